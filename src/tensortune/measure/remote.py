"""Time candidates on a device registered with TVM's RPC tracker.

Candidates are still built on this host (for the device's target) and linked by its C
compiler, so the device must share the host's architecture. The exported library is uploaded
to an RPC server that the tracker hands out, checked there against the NumPy reference
computed here, and timed there with `time_evaluator`.

Everything in this module that talks RPC runs inside the measurer's run worker process
(`tvm.support.popen_pool.PopenWorker`), not in the tuning process: TVM's RPC client has no
timeouts of its own, so a device that vanishes from the network would block a call forever.
In the worker, every call is bounded by the task's timeout, and a failure or a hang kills only
that worker (closing its session); the measurer starts a fresh one.
The worker keeps one session open between candidates, so the tracker is asked again only when
the session is lost.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any

from tensortune.errors import TensortuneError
from tensortune.measure.settings import MeasureSettings
from tensortune.measure.worker_tasks import DEVICE_OF_KIND, check_and_time
from tensortune.templates.weight_packing import PackedWeight
from tensortune.workloads import Workload

# Target kinds whose name is not a TVM device name.
# Pause between attempts while waiting for the tracker or a device.
_RETRY_PAUSE = 1.0


@dataclasses.dataclass(frozen=True)
class RpcDevice:
    """A kind of device reached through a TVM RPC tracker.

    Start the tracker with ``python -m tvm.exec.rpc_tracker --port 9190`` and one server per
    device with ``python -m tvm.exec.rpc_server --tracker HOST:9190 --key KEY``. Any free
    server registered under `key` may be handed out; after a session is lost (the device died
    or was restarted) a new one is requested from the tracker.

    Attributes:
        tracker: The tracker's address, ``"HOST:PORT"``.
        key: The key the device's RPC servers registered with (``--key``).
        session_timeout: Seconds after which the server ends a session, whatever it is doing;
            0 means never. Default 0: each run is bounded by `MeasureSettings.run_timeout` on
            this side, but a kernel still running on the device when that expires keeps the
            device busy until it returns; a session timeout frees it. A session is renewed
            before a candidate that could outlast it, so the timeout fails no trial.
        wait_for_device: Seconds to wait for the tracker to hand out a free device (and for
            the tracker itself to answer) before the candidate fails with stage
            ``"device"``. Default 60. In one batch the wait is paid once: once it has
            expired, the rest of the batch fails at once, and the next batch waits again.
        priority: Priority of the requests at the tracker (higher is served first).
            Default 1, the tracker's default.
    """

    tracker: str
    key: str
    session_timeout: float = 0.0
    wait_for_device: float = 60.0
    priority: int = 1

    def __post_init__(self) -> None:
        parse_address(self.tracker)
        if not self.key.strip() or any(c.isspace() for c in self.key):
            raise TensortuneError(f"device key must be one word, got {self.key!r}")
        if self.session_timeout < 0:
            raise TensortuneError(f"session_timeout must not be negative: {self.session_timeout}")
        if not self.wait_for_device > 0:
            raise TensortuneError(f"wait_for_device must be positive: {self.wait_for_device}")

    @property
    def address(self) -> tuple[str, int]:
        """The tracker's (host, port)."""
        return parse_address(self.tracker)

    def __str__(self) -> str:
        return f"{self.key!r} at tracker {self.tracker}"


def parse_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` → (host, port); raises `TensortuneError` if malformed.

    An IPv6 host goes in brackets: ``"[::1]:9190"``."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TensortuneError(f"malformed tracker address {text!r}: expected HOST:PORT")
    return host, int(port)


class SessionLost(RuntimeError):
    """The session with the device broke during a run: the device died or went off the
    network, or the kernel crashed the server."""


# The worker process's session: the device it belongs to, the RPCSession, when it began.
_SESSION: dict[str, Any] = {}


def connect(device: RpcDevice, budget: float = 0.0) -> str | None:
    """Make sure this process has a live session with a device of `device`'s key, good for
    `budget` more seconds (default 0) under ``device.session_timeout``.

    Reuses the open session if it still answers; otherwise asks the tracker for a free device,
    waiting at most ``device.wait_for_device`` seconds. Returns None when connected, or why no
    device could be had within that time."""
    held = _SESSION.get("session")
    if held is not None and _SESSION.get("device") == device:
        age = time.monotonic() - _SESSION["since"]
        timeout = device.session_timeout
        if (not timeout or age + budget < timeout) and _answers(held):
            return None
    _SESSION.clear()  # closes the old session, if any: its server takes requests again
    found = _request(device)
    if isinstance(found, str):
        return found
    _SESSION.update(session=found, device=device, since=time.monotonic())
    return None


def _answers(session: Any) -> bool:
    try:
        session.get_function("ffi.SystemLib")  # one round trip; raises if the peer is gone
        return True
    except Exception:
        return False


def _request(device: RpcDevice) -> Any:
    """A new session from the tracker within ``device.wait_for_device`` seconds, or why not."""
    from tvm import rpc
    from tvm.rpc import base

    deadline = time.monotonic() + device.wait_for_device
    reason = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = reason or _queue_state(device)
            return f"no device {device} within {device.wait_for_device:g} s: {reason}"
        try:
            # Not TrackerSession.request: it waits for a free device without any time limit.
            with socket.create_connection(device.address, timeout=remaining) as sock:
                _handshake(sock)
                base.sendjson(sock, [base.TrackerCode.REQUEST, device.key, "", device.priority])
                answer = base.recvjson(sock)
            if answer[0] != base.TrackerCode.SUCCESS:
                return f"tracker {device.tracker} refused the request: {answer}"
            host, port, match_key = answer[1]
            return rpc.connect(host, port, match_key, device.session_timeout)
        except TimeoutError:
            reason = ""  # waited for a free device: say what the queue looks like
        except ConnectionRefusedError:
            reason = "the tracker is not running"
        except NotATracker:
            return f"{device.tracker} is not a TVM RPC tracker"
        except Exception as err:  # the tracker hung up, or the device died in between
            reason = _last_line(err)
        time.sleep(min(_RETRY_PAUSE, max(0.0, deadline - time.monotonic())))


class NotATracker(RuntimeError):
    """The address answered, but not as a TVM RPC tracker."""


def _handshake(sock: socket.socket) -> None:
    from tvm.rpc import base

    sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
    if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
        raise NotATracker()


def _queue_state(device: RpcDevice) -> str:
    """What the tracker says about `device`'s key, for the reason a wait ran out."""
    from tvm.rpc import base

    try:
        with socket.create_connection(device.address, timeout=_RETRY_PAUSE * 2) as sock:
            _handshake(sock)
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            summary = base.recvjson(sock)[1]
    except Exception as err:
        return f"the tracker did not answer ({_last_line(err)})"
    servers = sum(
        1 for s in summary.get("server_info", []) if s.get("key") == f"server:{device.key}"
    )
    if not servers:
        return "no server is registered with that key"
    return f"all {servers} servers with that key stayed busy"


def disconnect() -> None:
    """Close this process's session (the server then takes new requests)."""
    _SESSION.clear()


def run(
    path: str,
    workload: Workload,
    settings: MeasureSettings,
    device_kind: str,
    packed: Sequence[PackedWeight] = (),
) -> list[float] | str:
    """Upload the kernel at `path` to the session's device, check one run there against
    NumPy, then time it there: `worker_tasks.run` on the remote device.

    Call `connect` first. `device_kind` is the target's kind (``"llvm"`` → the remote CPU);
    `packed`, the arguments the kernel takes packed (default none, see `worker_tasks.run`).
    A kernel so slow that the full timing would not fit in half of ``settings.run_timeout``
    is timed once. Returns the costs in seconds, or a string saying why the result is wrong; an RPC
    failure (the device died mid-run) raises, and the session is dropped.
    """

    session = _SESSION["session"]
    try:
        name = os.path.basename(path)
        session.upload(path, name)
        module = session.load_module(name)
        session.remove(name)  # loaded already; keeps a long session's folder small
        dev = session.device(DEVICE_OF_KIND.get(device_kind, device_kind), 0)
        return check_and_time(module, dev, workload, settings, packed)
    except Exception as err:
        alive = _answers(session)
        disconnect()  # whatever broke, the next candidate starts on a fresh session
        if not alive:
            raise SessionLost(f"lost the session with the device: {_last_line(err)}") from None
        raise


def _last_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__
