"""Timing on devices of a real TVM RPC tracker: a device that dies mid-measurement fails only
the trial it was timing, and the study goes on with another device or waits for one to come
back; no device means failed trials with a reason within a bounded time, not a hang; bad
addresses are refused before anything is written.

Every tracker and server here is a real subprocess on 127.0.0.1, in a process group of its own,
killed (the whole group: servers fork a child per session) when its test ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import optuna
import pytest

import tensortune
from tensortune.cli import main

KEY = "tt-test-cpu"
N = 32
STARTUP_TIMEOUT = 60.0  # the tracker and servers import TVM first: seconds on a busy machine


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """A `python -m tvm.exec.<module>` subprocess whose output lines are kept (and watched)."""

    def __init__(
        self, module: str, *args: str, on_line: Callable[[Service, str], None] | None = None
    ) -> None:
        env = dict(os.environ, TVM_NUM_THREADS="1")  # tiny kernels; leave a core to the builds
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"tvm.exec.{module}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, so that kill() gets its children
        )
        self.lines: list[str] = []
        self._on_line = on_line
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self._on_line is not None:
                self._on_line(self, line)

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # it died already
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Servers started by a test; all killed when it ends, whatever happened."""
    started: list[Service] = []
    yield started
    for service in started:
        service.kill()


@pytest.fixture(scope="module")
def tracker() -> Iterator[str]:
    """A tracker's HOST:PORT, shared by this module's tests (each uses its own device key)."""
    port = _free_port()
    args = ("--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))
    service = Service("rpc_tracker", *args)
    address = f"127.0.0.1:{port}"
    try:
        _wait_for(lambda: _free_servers(address, KEY) >= 0, "the tracker to listen", [service])
        yield address
    finally:
        service.kill()


def _free_servers(tracker: str, key: str) -> int:
    """Servers of `key` free at the tracker; -1 while it does not answer."""
    from tvm import rpc

    host, port = tracker.rsplit(":", 1)
    try:
        # A plain connect first: connect_tracker retries a refused connection after 5 s.
        socket.create_connection((host, int(port)), timeout=5).close()
        summary = rpc.connect_tracker(host, int(port)).summary()
    except (OSError, RuntimeError):  # not listening yet
        return -1
    return int(summary["queue_info"].get(key, {}).get("free", 0))


def _start_server(
    services: list[Service], tracker: str, on_line: Callable[[Service, str], None] | None = None
) -> Service:
    port = _free_port()
    args = ("--tracker", tracker, "--key", KEY, "--host", "127.0.0.1", "--port", str(port))
    server = Service("rpc_server", *args, "--port-end", str(port + 1), on_line=on_line)
    services.append(server)
    return server


def _wait_for(ready: Callable[[], bool], what: str, services: list[Service]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not ready():
        if time.monotonic() > deadline:
            logs = "".join(line for s in services for line in s.lines[-20:])
            pytest.fail(f"timed out waiting for {what}; output:\n{logs}")
        time.sleep(0.2)


@pytest.mark.slow
def test_devices_killed_mid_study_fail_only_their_trials(tracker, services, storage_url):
    """Two servers, A and B. A times the first candidates and is killed during its third: the
    study goes on with B. B is killed during its third too, and only then is a third server
    started: the study waits for it and finishes there."""
    victims: list[Service] = []
    late: list[Service] = []

    def kill_on_third_load(server: Service, line: str) -> None:
        # The server logs load_module, then the client checks and times the kernel on it
        # (2 x 100 ms below): killing now lands in the middle of a measurement.
        if "load_module" in line and server.count("load_module") == 3 and server not in victims:
            victims.append(server)
            os.killpg(server.proc.pid, signal.SIGKILL)
            if len(victims) == 2:
                late.append(_start_server(services, tracker))

    servers = [_start_server(services, tracker, kill_on_third_load) for _ in range(2)]
    _wait_for(lambda: _free_servers(tracker, KEY) == 2, "two servers to register", services)

    start = time.monotonic()
    status = main(
        [
            *("tune", "matmul", "--shape", f"{N},{N},{N}", "--trials", "12", "--batch-size", "4"),
            *("--sampler", "random", "--seed", "0", "--storage", storage_url, "--study", "rpc"),
            *("--rpc-tracker", tracker, "--device-key", KEY, "--device-wait", "60"),
            *("--repeat", "2", "--min-repeat-ms", "100", "--run-timeout", "10", "--no-progress"),
        ]
    )
    elapsed = time.monotonic() - start
    assert status == 0

    study = optuna.load_study(study_name="rpc", storage=storage_url)
    trials = study.trials
    assert len(trials) == 12
    assert [t for t in trials if t.state.name not in ("COMPLETE", "FAIL")] == []
    assert set(victims) == set(servers), "not both servers timed three candidates"
    assert late and late[0].count("load_module") >= 1, "nothing was timed after the kills"
    failed = [t for t in trials if t.state.name == "FAIL"]
    # The candidates under the kills fail, with the reason; every other one completes.
    assert len(failed) == 2, [t.user_attrs for t in failed]
    for trial in failed:
        assert trial.user_attrs["failed_stage"] == "run", trial.user_attrs
        assert "lost the session with the device" in trial.user_attrs["error"], trial.user_attrs
    assert all(t.user_attrs["gflops"] > 0 for t in trials if t.state.name == "COMPLETE")
    assert "vendor_gflops" not in study.user_attrs  # not timed: the host is not the device
    assert elapsed < 90, f"the study took {elapsed:.0f} s"


@pytest.mark.slow
def test_no_device_fails_trials_with_a_reason_in_bounded_time(tracker, storage_url):
    device = tensortune.RpcDevice(tracker, "no-such-device", wait_for_device=2)
    start = time.monotonic()
    study = tensortune.tune(
        "matmul",
        shape=dict(M=16, N=16, K=16),
        n_trials=3,
        batch_size=3,
        storage=storage_url,
        sampler="random",
        seed=0,
        settings=tensortune.MeasureSettings(repeat=2, min_repeat_ms=2),
        show_progress=False,
        device=device,
    )
    elapsed = time.monotonic() - start
    assert study.study_name.endswith("@no-such-device")
    assert [t.state.name for t in study.trials] == ["FAIL"] * 3
    for trial in study.trials:
        assert trial.user_attrs["failed_stage"] == "device"
        error = trial.user_attrs["error"]
        assert "no-such-device" in error and "within 2 s" in error, error
        assert "no server is registered with that key" in error, error
    # One wait of 2 s for the batch (the other two fail at once), plus builds and start-up.
    assert elapsed < 30, f"took {elapsed:.0f} s"


@pytest.mark.parametrize(
    "flags",
    [
        ["--rpc-tracker", "localhost", "--device-key", KEY],
        ["--rpc-tracker", "localhost:port", "--device-key", KEY],
        ["--rpc-tracker", "127.0.0.1:70000", "--device-key", KEY],
        ["--rpc-tracker", ":9190", "--device-key", KEY],
        ["--rpc-tracker", "127.0.0.1:9190"],
        ["--device-key", KEY],
        ["--rpc-tracker", "127.0.0.1:9190", "--device-key", "two words"],
    ],
)
def test_bad_device_flags_are_refused_with_one_line(flags, tmp_path, capsys):
    status = main(["tune", "matmul", "--shape", "16,16,16", "--trials", "1", *flags])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("tensortune: error: "), err
    assert ("HOST:PORT" in err) or ("--device-key" in err) or ("device key" in err), err
    assert os.listdir(tmp_path) == []  # no storage was created
