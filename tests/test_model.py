"""Whole models: a small PyTorch network exported to ONNX inside the test (nothing downloaded),
its tasks tuned under one budget, the database written and read back by TVM's build, and the
built model checked against ONNX Runtime and PyTorch."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import optuna
import pytest

import tensortune.tuning
from tensortune.errors import TensortuneError
from tensortune.measure import MeasureSettings

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from tensortune.model import (  # noqa: E402
    build,
    check_outputs,
    from_torch,
    load_onnx,
    parse_input,
    run,
    tune_model,
    write_database,
)
from tensortune.model.tasks import NO_REWRITES, extract_tasks  # noqa: E402
from tensortune.target import make_target, target_spec  # noqa: E402
from tensortune.trial_records import PROPOSAL_ATTR  # noqa: E402

#: `tune_model`'s arguments for a model's functions as TVM fuses them (no rewrite; on a CPU
#: each is on by default).
AS_FUSED = dataclasses.asdict(NO_REWRITES)


class SmallNet(torch.nn.Module):
    """conv + bias + ReLU, then a linear layer: two tasks worth tuning and a reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture
def onnx_file(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "small.onnx"
    torch.onnx.export(
        SmallNet().eval(), (torch.randn(1, 3, 8, 8),), str(path), input_names=["x"], dynamo=False
    )
    return str(path)


def _worker_processes() -> list[int]:
    """The TVM worker processes this process started (build pool and timing worker)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):  # exited meanwhile
            continue
        if parent == os.getpid() and b"popen_worker" in command:
            found.append(int(entry))
    return found


def test_parse_input():
    assert parse_input("x:1x3x224x224").shape == (1, 3, 224, 224)
    spec = parse_input("ids:1,128:int64")
    assert (spec.name, spec.shape, spec.dtype) == ("ids", (1, 128), "int64")
    for bad in ("x", "x:1xa", "x:1x0", "x:1x3:float7", ":1x3", "x:1:float32:more"):
        with pytest.raises(TensortuneError):
            parse_input(bad)


def test_tasks_are_the_fused_functions_named_by_their_structure(onnx_file):
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    tasks = extract_tasks(program.mod, make_target(target_spec("llvm")))
    names = sorted(t.name for t in tasks)
    assert any(n.startswith("fused_conv2d") for n in names)
    assert any(n.startswith("fused_matmul") for n in names)
    assert all(t.weight == 1 for t in tasks)
    # The same model extracted again gives the same keys: a rerun finds the same studies.
    again = extract_tasks(load_onnx(onnx_file, [parse_input("x:1x3x8x8")]).mod,
                          make_target(target_spec("llvm")))  # fmt: skip
    assert [t.key for t in tasks] == [t.key for t in again]
    # Each task's workload is its function, read back from the script.
    import tvm_ffi
    from tvm import s_tir

    for task in tasks:
        func = task.workload().prim_func()
        assert tvm_ffi.structural_equal(func, s_tir.Schedule(func).mod["main"])
    # The scheduler compares tasks of one kind by FLOP/s: each counts its multiply-adds.
    conv = next(t for t in tasks if t.name.startswith("fused_conv2d"))
    matmul = next(t for t in tasks if t.name.startswith("fused_matmul"))
    assert (conv.kind, matmul.kind) == ("conv2d", "matmul")
    assert conv.flops == 2 * 8 * 8 * 8 * 3 * 3 * 3
    assert matmul.flops == 2 * 10 * 8 * 8 * 8


@pytest.mark.slow
def test_a_tuned_model_is_built_with_its_kernels_and_computes_what_onnxruntime_does(
    onnx_file, tmp_path
):
    pytest.importorskip("onnxruntime")
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    lines: list[str] = []
    workers: list[int] = []  # worker processes of this test after each batch

    def progress(line: str) -> None:
        lines.append(line)
        workers.append(len(_worker_processes()) - before)

    before = len(_worker_processes())
    # No rewrite, so that the tasks are the model's own (on a CPU each is on by default).
    tuning = tune_model(program, 12, storage=storage, batch_size=4, progress=progress, **AS_FUSED)
    tuned = [s for s in tuning.studies if s is not None]
    assert len(tuned) == 2  # the conv and the matmul; the reshape has nothing to search
    # The tasks share one set of build and timing workers (a set each held 2 x 3 here).
    assert 0 < max(workers) <= MeasureSettings().build_workers + 1, workers
    # Every tunable task got its first batch; the budget is spent exactly.
    finished = [len(s.get_trials(deepcopy=False)) for s in tuned]
    assert min(finished) >= 4 and sum(finished) == 12
    assert lines[-1].startswith("[12/12]") and "model estimate" in lines[-1]

    folder = str(tmp_path / "db")
    assert write_database(tuning.tasks, tuning.studies, tuning.target, folder) == 3
    executable = build(program, tuning.target, folder)
    x = program.inputs[0].random(np.random.default_rng(0))
    expected = program.reference([x])
    check_outputs(run(executable, [x]), expected)
    check_outputs(run(build(program, tuning.target, None), [x]), expected)  # untuned

    # The same call again measures nothing; a larger budget adds only the difference, and no
    # task study measures a config twice.
    again = tune_model(
        program, 12, storage=storage, batch_size=4, progress=lines.append, **AS_FUSED
    )
    assert [len(s.get_trials(deepcopy=False)) for s in again.studies if s] == finished
    more = tune_model(program, 20, storage=storage, batch_size=4, progress=lines.append, **AS_FUSED)
    studies = [s for s in more.studies if s is not None]
    assert sum(len(s.get_trials(deepcopy=False)) for s in studies) == 20
    for study in studies:
        configs = [tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False)]
        assert len(configs) == len(set(configs))


class TwoConvs(torch.nn.Module):
    """Two convolutions of other shapes: two tasks of one kind."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.second(torch.relu(self.first(x)))


@pytest.mark.slow
def test_warm_started_tasks_learn_from_their_kind_and_the_model_still_matches(
    tmp_path, monkeypatch
):
    torch.manual_seed(0)
    program = from_torch(TwoConvs().eval(), (torch.randn(1, 3, 8, 8),), name="two-convs")
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    with pytest.raises(TensortuneError, match="costmodel sampler"):
        tune_model(program, 8, storage=storage, sampler="random", warm_start=True)
    assert not (tmp_path / "model.db").exists()  # refused before anything was written
    made: list[int] = []  # sources of each sampler made
    make_sampler = tensortune.tuning.make_sampler

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(len(kwargs.get("source_studies", ())))
        sampler = make_sampler(*args, **kwargs)
        assert sampler.settings.source_weighting == "outranked"  # the choice reaches each one
        return sampler

    monkeypatch.setattr(tensortune.tuning, "make_sampler", counted)
    # No rewrite: two convolution tasks and nothing else (channels-last adds two transposes).
    tuning = tune_model(
        program, 16, storage=storage, batch_size=4, progress=lambda line: None, warm_start=True,
        source_weighting="outranked", **AS_FUSED,
    )  # fmt: skip
    studies = [s for s in tuning.studies if s is not None]
    assert len(studies) == 2 and all(t.kind == "conv2d" for t in tuning.tasks)
    # Four batches, three samplers: the first task's cold one, the second task's warm one
    # (kept for its second batch), and the first task's warm one once its kin was measured.
    assert made == [0, 1, 1], made
    # The task tuned first had no measured kin then; once both had a batch, each batch of
    # either learnt from the other, and the study says so.
    for study, other in ((studies[0], studies[1]), (studies[1], studies[0])):
        assert study.user_attrs.get("transfer_sources") == [other.study_name]
        proposals = [t.system_attrs.get(PROPOSAL_ATTR) or {} for t in study.trials]
        assert any(
            other.study_name.split("@")[0] in str(p.get("source_weights")) for p in proposals
        )
    x = program.inputs[0].random(np.random.default_rng(0))
    folder = str(tmp_path / "db")
    write_database(tuning.tasks, tuning.studies, tuning.target, folder)
    check_outputs(run(build(program, tuning.target, folder), [x]), program.reference([x]))


def test_a_torch_module_is_checked_against_its_eager_run():
    torch.manual_seed(0)
    program = from_torch(SmallNet(), [torch.randn(1, 3, 8, 8)])
    x = program.inputs[0].random(np.random.default_rng(1))
    check_outputs(run(build(program, target_spec("llvm"), None), [x]), program.reference([x]))


class Activations(torch.nn.Module):
    """A linear layer, then GELU (both forms), softmax and tanh: every libm function a
    transformer layer calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = torch.nn.functional.gelu(self.fc(x))
        z = torch.nn.functional.gelu(x, approximate="tanh") + torch.tanh(x)
        return torch.softmax(y, -1) + z


def test_gelu_softmax_and_tanh_compile_to_arithmetic_and_match_eager(tmp_path):
    torch.manual_seed(0)
    net, example = Activations().eval(), torch.randn(4, 16) * 3
    path = tmp_path / "activations.onnx"
    # The ONNX exporter writes GELU out with Erf: both frontends' forms must be rewritten.
    torch.onnx.export(net, (example,), str(path), input_names=["x"], dynamo=False)
    programs = [from_torch(net, [example]), load_onnx(str(path), [parse_input("x:4x16")])]
    target = target_spec("llvm")
    for program in programs:
        scripts = [t.script for t in extract_tasks(program.mod, make_target(target))]
        # A call of the C library's erf/exp/tanh would run one element at a time.
        for call in ("T.erf(", "T.exp(", "T.tanh("):
            assert not any(call in script for script in scripts), (program.name, call)
        x = program.inputs[0].random(np.random.default_rng(1)) * 3
        error = check_outputs(run(build(program, target, None), [x]), program.reference([x]))
        assert error < 1e-5, (program.name, error)


def test_bad_models_and_inputs_are_one_line(onnx_file, tmp_path):
    not_a_model = tmp_path / "notes.onnx"
    not_a_model.write_text("hello")
    cases = [
        (str(tmp_path / "missing.onnx"), ["x:1x3x8x8"], "no model file"),
        (str(not_a_model), ["x:1x3x8x8"], "is not an ONNX model"),
        (onnx_file, [], "no shape for input 'x'"),
        (onnx_file, ["y:1x3x8x8", "x:1x3x8x8"], "the model has no input 'y'"),
        (onnx_file, ["x:1x3x8x9"], "dimension 3 is 8 in the model, got 9"),
        (onnx_file, ["x:1x3x8"], "the model takes 4 dimensions, got 3"),
        (onnx_file, ["x:1x3x8x8:int64"], "the model takes float32, got int64"),
    ]
    for path, inputs, message in cases:
        with pytest.raises(TensortuneError, match=message) as raised:
            load_onnx(path, [parse_input(i) for i in inputs])
        assert "\n" not in str(raised.value)
    assert not list((tmp_path).glob("*.db"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_bad_tuning_options_are_one_line_and_write_nothing(onnx_file, tmp_path, capsys):
    from tensortune.cli import main

    common = [onnx_file, "--input", "x:1x3x8x8", "--trials", "4", "-o", str(tmp_path / "out"),
              "--storage", f"sqlite:///{tmp_path / 'model.db'}"]  # fmt: skip
    rows = [
        (["--source-weighting", "outranked"], "give --warm-start-tasks too"),
        (["--no-warm-start-tasks", "--source-weighting", "decay"], "give --warm-start-tasks"),
        (["--warm-start-tasks", "--sampler", "random"], "needs the costmodel sampler"),
        (["--finalists", "0"], "--finalists must be at least 1"),
        (["--warm-sources", "twins"], "what warm-started tasks learn"),
    ]
    for extra, message in rows:
        assert main(["tune-model", *common, *extra]) == 2, extra
        error = capsys.readouterr().err.strip()
        assert error.startswith("tensortune: ") and message in error and "\n" not in error
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    for kwargs, message in [
        ({"warm_start": False, "source_weighting": "outranked"}, "warm-start the tasks"),
        ({"sampler": "random", "source_weighting": "decay"}, "warm-start the tasks"),
        ({"warm_start": True, "source_weighting": "loudest"}, "unknown source weighting"),
        ({"warm_start": False, "warm_sources": "twins"}, "warm-start the tasks"),
        ({"warm_start": True, "warm_sources": "cousins"}, "unknown warm sources 'cousins'"),
        ({"sampler": "bogus"}, "unknown sampler 'bogus'"),
        ({"seed": -1}, "seed must be an integer"),
    ]:
        with pytest.raises(TensortuneError, match=message):
            tune_model(program, 4, storage=f"sqlite:///{tmp_path / 'model.db'}", **kwargs)
    assert [p.name for p in tmp_path.iterdir()] == ["small.onnx"]  # the model, no more


def test_a_build_tvm_refuses_is_one_line(onnx_file, tmp_path):
    """TVM's own errors in a build (here: no database in the folder) become one line."""
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    for prepack in (False, True):
        with pytest.raises(TensortuneError, match="TVM cannot build small for llvm") as raised:
            build(program, target_spec("llvm"), str(tmp_path), prepack)
        assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_the_cli_tunes_exports_and_loads_a_model(onnx_file, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from tensortune.cli import main
    from tensortune.model.export import load_model

    storage = f"sqlite:///{tmp_path / 'model.db'}"
    out = tmp_path / "small-tuned"
    common = [onnx_file, "--input", "x:1x3x8x8", "--storage", storage]
    assert main(["tune-model", *common, "--trials", "8", "-o", str(out), "--finalists", "4"]) == 0
    printed = capsys.readouterr().out
    assert "checked   against onnxruntime-" in printed and "ms tuned" in printed
    assert "timed again, each its study's best 4 configs" in printed  # the finalists
    model = load_model(str(out))
    x = model.inputs[0].random(np.random.default_rng(3))
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    check_outputs(model(x), program.reference([x]))
    with pytest.raises(TensortuneError, match="input x must be float32"):
        model(x.astype(np.float64))

    assert main(["best-model", *common]) == 0
    printed = capsys.readouterr().out
    # Channels-last (the default): the conv, the matmul, the input's transpose and the
    # transpose back before the flatten.
    assert "4 tasks" in printed and "trials, best" in printed and "estimate" in printed
    again = tmp_path / "again"
    assert main(["export-model", *common, "-o", str(again)]) == 0
    assert sorted(p.name for p in again.iterdir()) == sorted(p.name for p in out.iterdir())
    # Each manifest says where every kernel came from: re-timed finalists, or as tuned.
    picked, plain = (json.loads((d / "model.json").read_text()) for d in (out, again))
    assert picked["finalists"] == 4 and plain["finalists"] == 1
    assert any("retimed_s" in k for k in picked["kernels"])
    assert plain["kernels"] and all("tuning_s" in k for k in plain["kernels"])
    # A folder in the way, and a bad input: one line, status 2, nothing written.
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["export-model", *common, "-o", str(again)]) == 2
    assert main(["export-model", *common, "-o", str(tmp_path / "y"), "--finalists", "0"]) == 2
    assert main(["tune-model", onnx_file, "--storage", storage, "--trials", "8",
                 "-o", str(tmp_path / "x")]) == 2  # fmt: skip
    assert main(["best-model", onnx_file, "--input", "x:1x3x8x8", "--storage",
                 f"sqlite:///{tmp_path / 'none.db'}"]) == 2  # fmt: skip
    errors = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in errors] == ["tensortune"] * 4
    assert "--finalists must be at least 1" in errors[1]
    assert "no shape for input 'x'" in errors[2]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow
def test_a_killed_model_run_resumes_its_budget_and_measures_nothing_twice(onnx_file, tmp_path):
    """SIGKILL a tune-model run mid-way, run the same command again: the budget ends spent
    exactly (the killed run's trials that measured nothing do not count), no trial is left
    RUNNING (not even in a task study the rerun's budget does not reach), the measured trials
    are kept, and no study measured a config twice."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tensortune.trial_records import count_finished

    db = tmp_path / "model.db"
    command = [sys.executable, "-m", "tensortune.cli", "tune-model", onnx_file,
               "--input", "x:1x3x8x8", "--storage", f"sqlite:///{db}", "--trials", "24",
               "-o", str(tmp_path / "out")]  # fmt: skip

    def complete() -> set[tuple[str, int]]:
        """(study, trial number) of every COMPLETE trial so far."""
        if not db.exists():
            return set()
        storage = f"sqlite:///{db}"
        try:
            summaries = optuna.get_all_study_summaries(storage)
            return {(s.study_name, t.number) for s in summaries
                    for t in optuna.load_study(study_name=s.study_name, storage=storage).trials
                    if t.state == optuna.trial.TrialState.COMPLETE}  # fmt: skip
        except Exception:  # the first run is creating its tables or studies
            return set()

    # Short heartbeats, so that the killed run's trials go stale within seconds.
    env = {**os.environ, "TENSORTUNE_HEARTBEAT_INTERVAL": "1", "TENSORTUNE_GRACE_PERIOD": "3"}
    worker = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    try:
        deadline = time.time() + 300
        while len(complete()) < 6 and time.time() < deadline and worker.poll() is None:
            time.sleep(0.5)
        assert worker.poll() is None, "the run ended before it could be killed"
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    kept = complete()
    assert 6 <= len(kept) < 24
    time.sleep(4)  # past the grace period: the killed run's trials are stale now
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    storage = f"sqlite:///{db}"
    studies = [optuna.load_study(study_name=s.study_name, storage=storage)
               for s in optuna.get_all_study_summaries(storage)]  # fmt: skip
    assert sum(count_finished(s) for s in studies) == 24
    assert kept <= complete()
    for study in studies:
        assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
        measured = [tuple(sorted(t.params.items())) for t in study.trials
                    if t.state == optuna.trial.TrialState.COMPLETE]  # fmt: skip
        assert len(measured) == len(set(measured))
    assert (tmp_path / "out" / "model.json").exists()


@pytest.mark.slow
def test_a_model_run_resumes_only_with_the_cache_timing_it_began_with(onnx_file, tmp_path):
    program = load_onnx(onnx_file, [parse_input("x:1x3x8x8")])
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    cold = MeasureSettings(repeat=2, cache="dirty")

    def finished(tuning) -> list[int]:  # type: ignore[no-untyped-def]
        return [len(s.get_trials(deepcopy=False)) for s in tuning.studies if s is not None]

    first = tune_model(program, 8, storage=storage, batch_size=4, settings=cold, progress=print)
    assert sum(finished(first)) == 8
    flags = {t.user_attrs.get("cache") for s in first.studies if s for t in s.trials}
    assert flags == {"dirty"}
    # With the flag again it goes on (the task studies are timed by the model's measurer).
    more = tune_model(program, 12, storage=storage, batch_size=4, settings=cold, progress=print)
    assert sum(finished(more)) == 12
    # Without it, every task is checked before any is measured: refused, nothing added.
    with pytest.raises(TensortuneError, match="timed with dirty caches"):
        tune_model(program, 16, storage=storage, batch_size=4, progress=print)
    assert sum(finished(tune_model(program, 12, storage=storage, settings=cold))) == 12
