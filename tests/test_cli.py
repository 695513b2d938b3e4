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
from tensortune.finalists import finalist_trials

#: What the matmul vendor may name: the faster of PyTorch (where installed) and NumPy.
VENDORS = ("torch-", "numpy-")

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
    assert "vendor" in done.stdout and any(v in done.stdout for v in VENDORS)

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
    assert study.user_attrs["vendor_library"].startswith(VENDORS)

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

    # With finalists: the study's best 3 configs timed again, the fastest exported.
    picked = tmp_path / "picked"
    assert main(["export", "--storage", storage, "--study", "mm", "-o", str(picked),
                 "--finalists", "3"]) == 0  # fmt: skip
    assert "timed again" in capsys.readouterr().out
    finalists = json.loads((picked / "config.json").read_text())["finalists"]
    top = finalist_trials(study, 3)
    assert finalists["count"] == 3 and finalists["study_best_trial"] == top[0].number
    assert [f["trial"] for f in finalists["timed_again"]] == [t.number for t in top]
    assert all(0 < f["seconds"] < 0.1 for f in finalists["timed_again"])
    fastest = min(finalists["timed_again"], key=lambda f: f["seconds"])
    kernel = tensortune.load_kernel(str(picked))
    assert kernel.manifest["trial"] == fastest["trial"]
    assert kernel.config == study.trials[fastest["trial"]].params
    kernel.check(seed=5)

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


@pytest.mark.slow
def test_costmodel_sampler_options_from_the_cli(tmp_path):
    storage = f"sqlite:///{tmp_path / 'cm.db'}"
    argv = tune_args(storage, 12, "--sampler", "costmodel", "--acquisition", "ucb", "--loss", "reg")
    assert main(argv) == 0
    study = optuna.load_study(study_name="mm", storage=storage)
    configs = [tuple(sorted(t.params.items())) for t in study.trials]
    assert len(configs) == 12 and len(set(configs)) == 12


@pytest.mark.slow
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
        "--cost-model and --source-weighting apply to the costmodel sampler only",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--sampler", "tpe", "--cost-model", "treegru"],
        "--cost-model and --source-weighting apply to the costmodel sampler only",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--batch-size", "0"], "batch_size must be at least 1"),
    (["best", "--study", "nope"], "no storage at sqlite:///tensortune.db"),
    (["export", "--study", "nope", "-o", "out"], "no storage at sqlite:///tensortune.db"),
    (["export", "--study", "s", "-o", "out", "--finalists", "0"], "--finalists must be at least 1"),
    # Inputs that pass parsing and used to fail late, or not at all.
    (["tune", "matmul", "--shape", "M=16,N=16,K=16,K=4"], "K given twice"),
    (["tune", "matmul", "--shape", "4,4,4", "--seed", "-1"], "seed must be an integer from 0"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--seed", str(2**64), "--sampler", "tpe"],
        f"2**32 - 1, got {2**64}",
    ),
    (["tune", "matmul", "--shape", "100000,100000,100000"], "its tensors need 111.8 GiB of memory"),
    (["tune", "conv2d", "--shape", "64,512,512,512,512"], "of this machine's"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind": "llvm", "mcpu": "znver9"}'],
        "unknown mcpu 'znver9': LLVM has no such CPU for",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind": "llvm", "mcpu": "Znver4"}'],
        "did you mean znver4",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind": "llvm", "num-cores": -4}'],
        "num-cores must be a positive integer, got -4",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "llvm -num-cores=0"], "got 0"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind":"llvm","mtriple":"x-y-z"}'],
        "unknown mtriple 'x-y-z'",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "--storage", "sqlite:///:memory:"], "is in memory"),
    (["tune", "matmul", "--shape", "4,4,4", "--storage", "sqlite://"], "is in memory"),
    (["best", "--storage", "sqlite:///:memory:", "--study", "s"], "is in memory"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--study", "two\nlines"],
        "study name 'two\\nlines' holds a control character",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--study", "\x1b[2J\x1b[31mred"],
        "study name '\\x1b[2J\\x1b[31mred' holds a control character",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--artifact-dir", "/sys/tensortune-artifacts"],
        "cannot write in /sys",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--trials", "8", "--total-trials", "8"],
        "give --trials or --total-trials, not both",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--transfer-storage", "sqlite:///t.db"],
        "--transfer-storage holds --transfer-from studies: give those too",
    ),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--source-weighting", "outranked"],
        "--source-weighting weighs --transfer-from studies: give those too",
    ),
    (["dashboard", "--port", "99999"], "port must be an integer from 1 to 65535, got 99999"),
    (["dashboard", "--port", "0"], "port must be an integer from 1 to 65535, got 0"),
    (["dashboard", "--storage", "sqlite:///none.db"], "sqlite:///none.db: none.db does not exist"),
    (["dashboard", "--storage", "sqlite:///:memory:"], "is in memory"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    before = sorted(os.listdir(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, err
    assert message in err
    assert sorted(os.listdir(tmp_path)) == before


USAGE_ERRORS = [
    (["tune", "matmul", "--shape", "4,4,4", "--trials", "abc"], "invalid int value: 'abc'"),
    (["tune", "matmul", "--shape", "4,4,4", "--bogus"], "unrecognized arguments: --bogus"),
    (["tune", "matmul"], "the following arguments are required: --shape"),
    (["tune", "matmul", "--shape", "4,4,4", "--sampler", "x\ny"], "invalid choice: 'x\\ny'"),
    (
        ["tune", "matmul", "--shape", "4,4,4", "--source-weighting", "trust"],
        "argument --source-weighting: invalid choice: 'trust'",
    ),
    (["tune", "matmul", "--shape", "4,4,4", "extra\x1b[31m"], "arguments: extra\\x1b[31m"),
    (["dashboard", "--port", "http"], "argument --port: invalid int value: 'http'"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ([], "the following arguments are required: command"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_usage_error_is_one_line(tmp_path, capsys, argv, message):
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, err
    assert message in err and err.endswith("--help)"), err
    assert captured.out == "" and sorted(os.listdir(tmp_path)) == before


@pytest.mark.slow
def test_usage_error_from_the_console_script_and_help_unchanged(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "tensortune")
    done = subprocess.run(
        [script, "tune", "matmul", "--shape", "4,4,4", "--trials", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "tensortune: error: argument --trials: invalid int value: 'abc' "
        "(see tensortune tune --help)\n"
    )
    helped = subprocess.run([script, "tune", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and helped.stderr == ""
    assert helped.stdout.startswith("usage: tensortune tune") and "--artifact-dir" in helped.stdout


@pytest.mark.parametrize("kind", ["file", "under a file", "unwritable"])
def test_unusable_artifact_dir_is_refused_before_the_study_exists(tmp_path, capsys, kind):
    (tmp_path / "taken").write_text("")
    folder = {
        "file": str(tmp_path / "taken"),
        "under a file": str(tmp_path / "taken" / "arts"),
        "unwritable": "/sys/tensortune-artifacts",
    }[kind]
    storage = f"sqlite:///{tmp_path / 'a.db'}"
    served = f"sqlite:///{tmp_path / 'served.db'}"  # the dashboard needs a storage that exists
    optuna.create_study(storage=served, study_name="s")
    before = sorted(os.listdir(tmp_path))
    tune = ["tune", "matmul", "--shape", "4,4,4", "--storage", storage, "--artifact-dir", folder]
    dashboard = ["dashboard", "--storage", served, "--port", "1", "--artifact-dir", folder]
    for argv in (tune, dashboard):
        assert main(argv) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.startswith(f"tensortune: error: cannot use artifact folder {folder}: "), err
        assert "\n" not in err and captured.out == ""
        assert sorted(os.listdir(tmp_path)) == before  # no storage, study or probe left
    with pytest.raises(TensortuneError, match="it is a file" if kind == "file" else "cannot"):
        tensortune.tune("matmul", shape=dict(M=4, N=4, K=4), storage=storage, artifact_dir=folder)
    assert sorted(os.listdir(tmp_path)) == before


def test_python_api_refuses_what_the_cli_refuses(tmp_path):
    from tensortune.dashboard import serve
    from tensortune.storage import open_storage
    from tensortune.target import target_spec
    from tensortune.tuning import make_sampler

    storage = f"sqlite:///{tmp_path / 'p.db'}"
    for seed in (-1, 2**32, 2**64, 1.5, True, "3"):
        for sampler in ("costmodel", "tpe", "random"):
            with pytest.raises(TensortuneError, match="seed must be an integer from 0"):
                make_sampler(sampler, seed)  # type: ignore[arg-type]
    for seed in (0, 2**32 - 1):
        make_sampler("random", seed)
    with pytest.raises(TensortuneError, match="seed must be"):
        tensortune.tune("matmul", shape=dict(M=4, N=4, K=4), storage=storage, seed=-1)
    with pytest.raises(TensortuneError, match=r"study name 'a\\rb' holds a control character"):
        tensortune.tune("matmul", shape=dict(M=4, N=4, K=4), storage=storage, study_name="a\rb")
    with pytest.raises(TensortuneError, match="K given twice"):
        tensortune.workloads.parse_shape("matmul", "4,4,K=4,K=8")
    with pytest.raises(TensortuneError, match="of memory, more than 25% of this machine's"):
        tensortune.get_workload("batch_matmul", 4096, 4096, 4096, 4096)
    with pytest.raises(TensortuneError, match=r"unknown mcpu 'cortex-a7'.*cortex-a7"):
        target_spec({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a7"})
    assert target_spec({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})
    for cores in (0, -4, True, 2.0):
        with pytest.raises(TensortuneError, match=r"num-cores|malformed target"):
            target_spec({"kind": "llvm", "num-cores": cores})
    for url in ("sqlite:///:memory:", "sqlite://", "sqlite:///file::memory:?cache=shared"):
        with pytest.raises(TensortuneError, match="is in memory"):
            open_storage(url)
    for port in (0, -1, 65536, 99999, True):
        with pytest.raises(TensortuneError, match="port must be an integer from 1 to 65535"):
            serve(storage, port=port)
    with pytest.raises(TensortuneError, match="does not exist"):
        serve(storage, port=8080)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
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
    errors = [t.user_attrs.get("error") for t in study.trials]
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 4, errors
