"""The CLI end to end on SQLite: tune, resume, best, export; and every bad input ends in one
clear line, a non-zero exit, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna
import pytest

import tensortune
from tensortune import TensortuneError
from tensortune.cli import main

FAST = ["--repeat", "2", "--min-repeat-ms", "2", "--no-progress"]


def tune_args(storage, trials=4, *extra):
    return [
        "tune",
        "matmul",
        "--shape",
        "32,32,32",
        "--trials",
        str(trials),
        "--storage",
        storage,
        "--study",
        "mm",
        "--seed",
        "0",
        "--batch-size",
        "4",
        *FAST,
        *extra,
    ]


def test_tune_resume_best_export(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'cli.db'}"
    # The installed console script, as a user runs it.
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "tensortune"), *tune_args(storage)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "best" in done.stdout and "GFLOP/s" in done.stdout
    assert "vendor" in done.stdout and "numpy" in done.stdout

    assert main(tune_args(storage, 4, "--sampler", "random")) == 0  # resume, another sampler
    study = optuna.load_study(study_name="mm", storage=storage)
    assert len(study.trials) == 8
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete and all(t.user_attrs["gflops"] > 0 for t in complete)
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in study.trials)
    for trial in complete:
        assert trial.user_attrs["compile_s"] > 0
        assert len(trial.user_attrs["costs_s"]) == 2
        assert trial.user_attrs["vendor_ratio"] == pytest.approx(
            trial.value / study.user_attrs["vendor_gflops"], rel=1e-3
        )
    assert study.user_attrs["workload"] == "matmul(M=32,N=32,K=32)"
    assert study.user_attrs["vendor_library"].startswith("numpy")

    capsys.readouterr()
    assert main(["best", "--storage", storage, "--study", "mm", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    assert best["gflops"] == pytest.approx(study.best_value)
    assert best["config"] == study.best_params

    out = tmp_path / "kernel"
    assert main(["export", "--storage", storage, "--study", "mm", "-o", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["config.json", "kernel.so"]
    kernel = tensortune.load_kernel(str(out))
    assert kernel.config == study.best_params
    kernel.check(seed=5)
    a, b = kernel.workload.random_inputs(seed=9)
    assert abs(kernel(a, b) - a @ b).max() < 1e-4

    # A second export to the same folder is refused; corrupt exports are refused on load.
    assert main(["export", "--storage", storage, "--study", "mm", "-o", str(out)]) == 2
    manifest = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**manifest, "shape": {"M": 64, "N": 32, "K": 32}}))
    with pytest.raises(TensortuneError, match=r"kernel.so does not match config.json"):
        tensortune.load_kernel(str(out))
    (out / "config.json").write_text("{not json")
    with pytest.raises(TensortuneError, match="corrupt export"):
        tensortune.load_kernel(str(out))
    with pytest.raises(TensortuneError, match="not a tensortune export"):
        tensortune.load_kernel(str(tmp_path))


def test_costmodel_sampler_options_from_the_cli(tmp_path):
    storage = f"sqlite:///{tmp_path / 'cm.db'}"
    argv = tune_args(storage, 12, "--sampler", "costmodel", "--acquisition", "ucb", "--loss", "reg")
    assert main(argv) == 0
    study = optuna.load_study(study_name="mm", storage=storage)
    configs = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(configs) == 12 and len(set(configs)) == 12


def test_python_api_with_each_optuna_sampler(tmp_path, fast_settings):
    storage = f"sqlite:///{tmp_path / 'api.db'}"
    workload = tensortune.get_workload("dense_bias_relu", 16, 32, 16)
    for name in ("random", "tpe", "gp"):
        study = tensortune.tune(
            workload,
            n_trials=4,
            storage=storage,
            study_name=name,
            sampler=name,
            seed=1,
            settings=fast_settings,
            batch_size=2,
            show_progress=False,
        )
        assert len(study.trials) == 4
        assert any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


BAD_INPUTS = [
    (["tune", "nosuchop", "--shape", "4"], "unknown workload 'nosuchop'"),
    (["tune", "matmul", "--shape", "0,4,4"], "M must be positive"),
    (["tune", "matmul", "--shape", "4,four,4"], "not an integer"),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "cuda"], "target cuda needs an arch"),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "rocm"], "unsupported target kind 'rocm'"),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "{oops"], "malformed target"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind": "llvm", "bogus": 1}'],
        "Unknown config option 'bogus'",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "llvm -mcpu"], "expected -key=value"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--storage", "sqlite:////no/such/dir/x.db"],
        "folder /no/such/dir does not exist",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--storage", "nosuchdb://x"], "cannot open storage"),
    (["tune", "matmul", "--shape", "4,4,4", "--storage", "tensortune.db"], "malformed storage URL"),
    (["tune", "matmul", "--shape", "4,4,4", "--trials", "0"], "n_trials must be at least 1"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--total-trials", "0"],
        "total_trials must be at least 1",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--repeat", "0"], "repeat must be at least 1"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--sampler", "tpe", "--acquisition", "ei"],
        "--acquisition, --loss and --cost-model apply to the costmodel sampler only",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--sampler", "tpe", "--cost-model", "treegru"],
        "--acquisition, --loss and --cost-model apply to the costmodel sampler only",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--batch-size", "0"], "batch_size must be at least 1"),
    (["best", "--study", "nope"], "no storage at sqlite:///tensortune.db"),
    (["export", "--study", "nope", "-o", "out"], "no storage at sqlite:///tensortune.db"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    before = sorted(os.listdir(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, err
    assert message in err
    assert sorted(os.listdir(tmp_path)) == before


def test_missing_study_and_mismatched_resume(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="other", storage=storage)
    assert main(["best", "--storage", storage, "--study", "nope"]) == 2
    assert "no study named 'nope'" in capsys.readouterr().err
    assert main(["export", "--storage", storage, "--study", "nope", "-o", "k"]) == 2
    assert not (tmp_path / "k").exists()
    assert main(["best", "--storage", storage, "--study", "other"]) == 2
    assert "not made by tensortune" in capsys.readouterr().err
    # Resuming a study under a name that holds another workload is refused before any trial.
    assert (
        main(
            ["tune", "matmul", "--shape", "4,4,4", "--storage", storage, "--study", "other", *FAST]
        )
        == 2
    )
    assert "choose another study name" in capsys.readouterr().err
    assert len(optuna.load_study(study_name="other", storage=storage).trials) == 0


def test_module_entry_point_lists_workloads():
    done = subprocess.run(
        [sys.executable, "-m", "tensortune.cli", "workloads"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert "conv2d(N, C, H, W, OC, KH=3, KW=3, stride=1, pad=1)" in done.stdout
    assert "resnet18-c7" in done.stdout


def test_objective_with_threads(storage_url, fast_settings):
    """study.optimize(n_jobs=2): the threads share one set of workers, one batch at a time."""
    workload = tensortune.get_workload("batch_matmul", 2, 16, 16, 16)
    study = optuna.create_study(
        storage=storage_url, direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0)
    )
    with tensortune.Objective(workload, settings=fast_settings) as objective:
        study.optimize(objective, n_trials=4, n_jobs=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 4
