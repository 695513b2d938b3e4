"""Many workers on one study in a real PostgreSQL server, and workers killed mid-trial.

The module starts a private PostgreSQL server (``initdb`` + ``pg_ctl`` from Debian's
``postgresql``, which ``tests/system_deps.sh`` installs) on a free port of 127.0.0.1, and stops
it at the end. The stale-trial path is also checked on SQLite, in one process.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import tensortune
from tensortune.errors import TensortuneError
from tensortune.heartbeats import (
    GRACE_PERIOD_ENV,
    HEARTBEAT_INTERVAL_ENV,
    TrialHeartbeats,
    fail_stale_trials,
    heartbeat_settings,
)
from tensortune.sampler import CostModelSampler
from tensortune.sampler.history import KnobSpace, read_history
from tensortune.storage import open_storage
from tensortune.templates import CpuTemplate
from tensortune.trial_records import CONFIG_ATTR, stale_trial_numbers, trial_config

#: Short heartbeat for the tests that kill a worker (the defaults wait five minutes).
INTERVAL, GRACE = 1, 3
SHAPE = "48,48,48"


def _postgres_bindir() -> str | None:
    """The folder holding initdb and pg_ctl: on PATH, else Debian's newest
    /usr/lib/postgresql/<version>/bin (Debian keeps the server programs off PATH)."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        folder = os.path.dirname(os.path.realpath(on_path))
        if os.path.exists(os.path.join(folder, "initdb")):
            return folder

    def version(folder: str) -> tuple[int, ...]:
        name = os.path.basename(os.path.dirname(folder))
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    folders = [
        os.path.dirname(path)
        for path in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
        if os.path.exists(os.path.join(os.path.dirname(path), "initdb"))
    ]
    return max(folders, key=version) if folders else None


def _tail(path: str) -> str:
    return Path(path).read_text()[-2000:] if os.path.exists(path) else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url(request) -> Iterator[str]:
    """A database on a private PostgreSQL server, stopped and removed after the module."""
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.fail(
            "PostgreSQL's initdb/pg_ctl not found (on PATH or in /usr/lib/postgresql/*/bin): "
            "run `bash tests/system_deps.sh`, or `apt-get install postgresql`"
        )
    try:  # the driver is a test extra: fail, don't skip, without it
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.fail("psycopg2 is missing: pip install -e '.[test]' (or 'tensortune[postgres]')")
    # PostgreSQL refuses to run as root: then the server runs as the postgres system user,
    # in a folder it owns outside pytest's root-only tmp folders.
    as_user: list[str] = []
    folder = tempfile.mkdtemp(prefix="tensortune-pg-")
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, but there is no `postgres` user to run PostgreSQL as")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = os.path.join(folder, "data"), os.path.join(folder, "server.log")

    def run(*args: str) -> None:
        # The working folder is pytest's, which the postgres user cannot enter.
        done = subprocess.run(
            [*as_user, *args], capture_output=True, text=True, timeout=120, cwd=folder
        )
        if done.returncode != 0:
            pytest.fail(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}{_tail(log)}")

    run(
        os.path.join(bindir, "initdb"),
        *("-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"),
    )
    pg_ctl = os.path.join(bindir, "pg_ctl")

    def stop() -> None:
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run(
                [*as_user, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                cwd=folder,
            )

    request.addfinalizer(stop)  # registered before the start, so it runs whatever happens
    # Throwaway data: no fsync. The socket goes to the private folder, not /var/run.
    options = f"-h 127.0.0.1 -k '{folder}' -c fsync=off -c synchronous_commit=off"
    for attempt in range(3):  # another process may take the free port first
        port = _free_port()
        start = [
            pg_ctl,
            "-D",
            data,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "-o",
            f"{options} -p {port}",
            "start",
        ]
        started = subprocess.run(
            [*as_user, *start], capture_output=True, text=True, timeout=90, cwd=folder
        )
        if started.returncode == 0:
            break
        if attempt == 2:
            pytest.fail(f"pg_ctl start failed:\n{started.stdout}{started.stderr}{_tail(log)}")
    createdb = os.path.join(bindir, "createdb")
    run(createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "tensortune")
    # No driver named: open_storage picks psycopg2, as the README's workers do.
    yield f"postgresql://postgres@127.0.0.1:{port}/tensortune"


def _tune_command(url: str, study: str, trials: int) -> list[str]:
    command = [sys.executable, "-m", "tensortune.cli", "tune", "matmul", "--shape", SHAPE]
    command += ["--storage", url, "--study", study, "--seed", "0", "--trials", str(trials)]
    return [*command, "--batch-size", "2", "--repeat", "2", "--min-repeat-ms", "2", "--no-progress"]


def _short_heartbeat() -> dict[str, str]:
    return {**os.environ, HEARTBEAT_INTERVAL_ENV: str(INTERVAL), GRACE_PERIOD_ENV: str(GRACE)}


def _space() -> KnobSpace:
    return KnobSpace(CpuTemplate(tensortune.get_workload("matmul", 48, 48, 48)).knobs)


@pytest.mark.slow
def test_four_workers_measure_distinct_configs(postgres_url):
    first = subprocess.run(
        _tune_command(postgres_url, "shared", 2), capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr[-2000:]  # created the study, measured the vendor
    workers = [
        subprocess.Popen(
            _tune_command(postgres_url, "shared", 2), stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="shared", storage=open_storage(postgres_url))
    trials = study.trials
    assert len(trials) == 2 + 4 * 2
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert not stale_trial_numbers(study)
    # One seed gives all workers the same draws: only the claim check keeps them apart.
    configs = [tuple(sorted(trial_config(t).items())) for t in trials]
    assert len(set(configs)) == len(configs)


def _freeze_mid_trial(victim: subprocess.Popen, url: str, study_name: str, log: Path) -> None:
    """Return with `victim`'s process group stopped (SIGSTOP) while each of its RUNNING trials
    holds a config: the sampler ran, so each has its heartbeat and is mid-measurement."""
    storage = open_storage(url)
    deadline = time.monotonic() + 240
    while True:
        assert victim.poll() is None, "the worker exited early: " + log.read_text()[-2000:]
        assert time.monotonic() < deadline, "the worker never had a RUNNING trial"
        os.killpg(victim.pid, signal.SIGSTOP)
        with contextlib.suppress(KeyError):  # the study may not exist yet
            trials = storage.get_all_trials(storage.get_study_id_from_name(study_name))
            running = [t for t in trials if t.state == TrialState.RUNNING]
            if running and all(CONFIG_ATTR in t.system_attrs for t in running):
                return
        os.killpg(victim.pid, signal.SIGCONT)
        time.sleep(0.1)


@pytest.mark.slow
def test_killed_worker_trials_fail_as_stale_and_free_their_configs(postgres_url, tmp_path):
    env = _short_heartbeat()
    with open(tmp_path / "victim.log", "w") as log:
        # Its own process group: the kill takes its build and timing processes along, as a
        # lost machine would.
        victim = subprocess.Popen(
            _tune_command(postgres_url, "killed", 8),
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        try:
            _freeze_mid_trial(victim, postgres_url, "killed", tmp_path / "victim.log")
        finally:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=60)
    study = optuna.load_study(study_name="killed", storage=open_storage(postgres_url))
    left = [t for t in study.trials if t.state == TrialState.RUNNING]
    assert left, (tmp_path / "victim.log").read_text()[-2000:]
    measured_before = sum(t.state.is_finished() for t in study.trials)
    held = {t.number: trial_config(t) for t in left}

    time.sleep(GRACE + INTERVAL + 0.5)  # the dead worker's last beat is older than the grace
    resumed = subprocess.run(
        _tune_command(postgres_url, "killed", 2),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    trials = study.trials
    stale = stale_trial_numbers(study)
    assert stale == set(held)
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert all(trials[n].state == TrialState.FAIL for n in stale)
    # The resumed worker ran all its trials, and none of them is counted as stale.
    assert sum(t.number not in stale for t in trials) == measured_before + 2
    # Stale trials are neither taken nor failures to learn from: their configs are free again.
    space = _space()
    history = read_history(study, space, fresh=True)
    assert history.n_finished == len(trials) - len(stale) == len(history.configs)
    others = {space.encode(trial_config(t)) for t in trials if t.number not in stale}
    for config in held.values():
        indices = space.encode(config)
        assert indices is not None
        assert (indices in history.taken) == (indices in others)


def test_stale_trial_on_sqlite_frees_its_config(storage_url, monkeypatch):
    monkeypatch.setenv(HEARTBEAT_INTERVAL_ENV, str(INTERVAL))
    monkeypatch.setenv(GRACE_PERIOD_ENV, str(GRACE))
    template = CpuTemplate(tensortune.get_workload("matmul", 16, 16, 16))
    space = KnobSpace(template.knobs)
    study = optuna.create_study(
        storage=open_storage(storage_url, heartbeat=True),
        direction="maximize",
        sampler=CostModelSampler(template, seed=0),
    )
    dead_worker = TrialHeartbeats(study)
    dead = dead_worker.ask()
    config = template.suggest(dead)
    dead_worker.close()  # its worker dies: the trial stays RUNNING and beats no more
    with TrialHeartbeats(study) as live_worker:
        live = live_worker.ask()
        live_config = template.suggest(live)
        fail_stale_trials(study)  # within the grace period: nothing is stale yet
        assert [t.state for t in study.trials] == [TrialState.RUNNING] * 2
        time.sleep(GRACE + INTERVAL + 0.5)
        fail_stale_trials(study)
        assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.RUNNING]
        assert stale_trial_numbers(study) == {dead.number}
        history = read_history(study, space, fresh=True)
        assert history.taken == {space.encode(live_config)}
        assert history.n_finished == 0 and len(history.configs) == 0
        # One seed draws the same config first: it is handed out again, not refused as taken.
        study.sampler = CostModelSampler(template, seed=0)
        assert template.suggest(live_worker.ask()) == config


def test_heartbeat_settings(monkeypatch):
    monkeypatch.delenv(HEARTBEAT_INTERVAL_ENV, raising=False)
    monkeypatch.delenv(GRACE_PERIOD_ENV, raising=False)
    assert heartbeat_settings() == (30, 300)
    monkeypatch.setenv(HEARTBEAT_INTERVAL_ENV, "2")
    monkeypatch.setenv(GRACE_PERIOD_ENV, "5")
    assert heartbeat_settings() == (2, 5)
    monkeypatch.setenv(GRACE_PERIOD_ENV, "2")
    with pytest.raises(TensortuneError, match="must be longer than the heartbeat interval"):
        heartbeat_settings()
    monkeypatch.setenv(HEARTBEAT_INTERVAL_ENV, "soon")
    with pytest.raises(TensortuneError, match="TENSORTUNE_HEARTBEAT_INTERVAL must be a positive"):
        heartbeat_settings()
