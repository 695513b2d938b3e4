"""Several worker processes on one study: no config is measured twice, no trial is lost."""

from __future__ import annotations

import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from tensortune.trial_records import trial_config

pytestmark = pytest.mark.slow  # several tensortune processes on one study


def test_workers_with_one_seed_measure_distinct_configs(storage_url):
    base = [sys.executable, "-m", "tensortune.cli", "tune", "matmul", "--shape", "48,48,48"]
    base += ["--storage", storage_url, "--study", "shared", "--seed", "0", "--batch-size", "2"]
    base += ["--repeat", "2", "--min-repeat-ms", "2", "--no-progress"]
    # One process creates the study (and measures the vendor), then three join it.
    first = subprocess.run([*base, "--trials", "2"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    workers = [
        subprocess.Popen([*base, "--trials", "4"], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, err[-2000:]
    trials = optuna.load_study(study_name="shared", storage=storage_url).trials
    assert len(trials) == 2 + 3 * 4
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    # The same seed gives every worker the same random draws: each config is measured once
    # only because a worker that finds its choice claimed by an earlier trial chooses again.
    configs = [tuple(sorted(trial_config(t).items())) for t in trials]
    assert len(set(configs)) == len(configs)
