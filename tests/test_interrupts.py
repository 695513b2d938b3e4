"""Interrupts and losses: a Ctrl-C at any step of a batch loses no measured value and leaves no
trial RUNNING; a trial whose worker died before its first heartbeat is failed as stale; two
workers that create one study at once both join it; killed runs leave no temporary folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tensortune import tuning
from tensortune.sampler.history import is_abandoned, stale_trial_numbers
from tensortune.storage import TrialHeartbeats, create_study, fail_stale_trials, open_storage
from tensortune.tuning import Objective, _run_batches
from tensortune.workloads import get_workload


@pytest.fixture
def batch_setup(storage_url, fast_settings):
    """A fresh study with heartbeats, and an objective whose workers live for the test."""
    workload = get_workload("matmul", M=16, N=16, K=16)
    db = open_storage(storage_url, heartbeat=True)
    study = create_study(
        db, "s", workload, {"kind": "llvm"}, None, optuna.samplers.RandomSampler(seed=0)
    )
    with Objective(workload, "llvm", fast_settings) as objective:
        yield study, objective


def _states(study: optuna.Study) -> list[tuple[TrialState, str | None]]:
    return [(t.state, t.user_attrs.get("failed_stage")) for t in study.trials]


def _measured(trial: optuna.trial.FrozenTrial) -> bool:
    """Told what its measurement gave: its value, or a FAIL for a reason of its own."""
    if trial.state == TrialState.COMPLETE:
        return trial.value == trial.user_attrs["gflops"]
    return trial.state == TrialState.FAIL and trial.user_attrs.get("failed_stage") not in (
        None,
        "interrupted",
    )


def test_ctrl_c_while_publishing_the_best_kernel_tells_the_measured_batch(
    batch_setup, tmp_path, monkeypatch
):
    study, objective = batch_setup

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tuning, "publish_kernel", interrupted)
    store = optuna.artifacts.FileSystemArtifactStore(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        _run_batches(study, objective, 2, 2, False, store)
    trials = study.trials
    assert len(trials) == 2 and all(_measured(t) for t in trials), _states(study)
    assert any(t.state == TrialState.COMPLETE for t in trials)  # so publish_kernel was called


def test_ctrl_c_during_the_tell_waits_until_the_batch_is_told(batch_setup, monkeypatch):
    study, objective = batch_setup
    tell = optuna.Study.tell
    told: list[int] = []

    def tell_then_ctrl_c(self, trial, *args, **kwargs):
        if not told:  # Ctrl-C between the first tell and the second
            os.kill(os.getpid(), signal.SIGINT)
        told.append(trial.number)
        return tell(self, trial, *args, **kwargs)

    monkeypatch.setattr(optuna.Study, "tell", tell_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        _run_batches(study, objective, 4, 2, False)
    assert told == [0, 1]  # the interrupt came out once the batch was told, before the next
    assert all(_measured(t) for t in study.trials), _states(study)


def test_ctrl_c_while_recording_tells_the_recorded_and_frees_the_rest(batch_setup, monkeypatch):
    study, objective = batch_setup
    record = Objective._record
    calls: list[int] = []

    def record_then_ctrl_c(self, trial, result):
        calls.append(trial.number)
        if len(calls) == 2:  # the second trial was measured but not yet recorded
            raise KeyboardInterrupt
        return record(self, trial, result)

    monkeypatch.setattr(Objective, "_record", record_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        _run_batches(study, objective, 2, 2, False)
    first, second = study.trials
    assert _measured(first), _states(study)
    assert (second.state, second.user_attrs.get("failed_stage")) == (
        TrialState.FAIL,
        "interrupted",
    )


def test_a_worker_killed_before_its_first_heartbeat_leaves_no_trial_running(
    storage_url, monkeypatch
):
    monkeypatch.setenv("TENSORTUNE_HEARTBEAT_INTERVAL", "1")
    monkeypatch.setenv("TENSORTUNE_GRACE_PERIOD", "5")
    db = open_storage(storage_url, heartbeat=True)
    workload = get_workload("matmul", M=16, N=16, K=16)
    study = create_study(db, "s", workload, {"kind": "llvm"}, None, None)
    # A worker killed right after `study.ask`, before `TrialHeartbeats` records a beat.
    script = (
        "import os, signal, sys, optuna\n"
        "from tensortune.storage import open_storage\n"
        "study = optuna.load_study(study_name='s', storage=open_storage(sys.argv[1], "
        "heartbeat=True))\n"
        "study.ask()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script, storage_url], capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    fail_stale_trials(study)  # within the grace period: a worker may be about to beat
    assert [t.state for t in study.trials] == [TrialState.RUNNING]
    with TrialHeartbeats(study) as heartbeats:
        live = heartbeats.ask()  # a live worker's trial, beating: never failed
        deadline = time.monotonic() + 60
        while study.trials[0].state == TrialState.RUNNING and time.monotonic() < deadline:
            fail_stale_trials(study)
            time.sleep(0.2)
        fail_stale_trials(study)
        assert study.trials[live.number].state == TrialState.RUNNING
    assert study.trials[0].state == TrialState.FAIL
    assert stale_trial_numbers(study) == {0}  # marked as Optuna's stale trials are
    assert is_abandoned(study.trials[0], {0})
