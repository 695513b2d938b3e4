"""MetaSchedule's design space as a template: decisions → knobs → Optuna distributions →
replayed schedule, built and checked against NumPy, on operators with and without a hand
template."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import optuna
import pytest
import tvm
from optuna.trial import TrialState
from tvm import te, tirx, topi
from tvm.script import tirx as T

import tensortune
from tensortune import CostModelSampler
from tensortune.cli import main
from tensortune.dashboard import study_note
from tensortune.errors import TensortuneError
from tensortune.export import export_best, load_kernel
from tensortune.storage import best_summary
from tensortune.target import target_spec
from tensortune.templates import InvalidConfig, narrowed_axes
from tensortune.templates import metaschedule as ms_space
from tensortune.templates.compile import compile_config
from tensortune.templates.metaschedule import MetaScheduleTemplate
from tensortune.templates.weight_packing import pack_arguments
from tensortune.trial_records import PROPOSAL_ATTR
from tensortune.workloads import WorkloadDef, _registry, get_workload

LLVM = target_spec("llvm")


def _softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def row_softmax(M: int, N: int) -> list[te.Tensor]:
    x = te.placeholder((M, N), name="x")
    return [x, topi.nn.softmax(x, axis=1)]


# Built from its definition, not registered: the registry stays as the other tests expect it.
ROW_SOFTMAX = WorkloadDef(
    "row_softmax", row_softmax, _softmax_reference, None, (("M", None), ("N", None))
)


def tir_matmul_relu(M: int, N: int, K: int) -> tirx.PrimFunc:
    """A kernel written in TVMScript, not as a tensor expression: no hand template has it."""

    @T.prim_func(s_tir=True)
    def main(
        A: T.Buffer((M, K), "float32"),
        B: T.Buffer((K, N), "float32"),
        C: T.Buffer((M, N), "float32"),
    ):
        T.func_attr({"tirx.noalias": True})
        Y = T.sblock_alloc_buffer((M, N))
        for i, j, k in T.grid(M, N, K):
            with T.sblock("Y"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    Y[vi, vj] = T.float32(0)
                Y[vi, vj] = Y[vi, vj] + A[vi, vk] * B[vk, vj]
        for i, j in T.grid(M, N):
            with T.sblock("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                C[vi, vj] = T.max(Y[vi, vj], T.float32(0))

    return main


TIR_MATMUL_RELU = WorkloadDef(
    "tir_matmul_relu", tir_matmul_relu, lambda a, b: np.maximum(a @ b, 0), None,
    (("M", None), ("N", None), ("K", None)),
)  # fmt: skip


def tir_lanes_dot(M: int, B: int, K: int) -> tirx.PrimFunc:
    """Per lane b, a matrix-vector product: b indexes every buffer, innermost in the output."""

    @T.prim_func(s_tir=True)
    def main(
        A: T.Buffer((M, K, B), "float32"),
        X: T.Buffer((K, B), "float32"),
        C: T.Buffer((M, B), "float32"),
    ):
        T.func_attr({"tirx.noalias": True})
        for i, b, k in T.grid(M, B, K):
            with T.sblock("C"):
                vi, vb, vk = T.axis.remap("SSR", [i, b, k])
                with T.init():
                    C[vi, vb] = T.float32(0)
                C[vi, vb] = C[vi, vb] + A[vi, vk, vb] * X[vk, vb]

    return main


TIR_LANES_DOT = WorkloadDef(
    "tir_lanes_dot", tir_lanes_dot, lambda a, x: np.einsum("mkb,kb->mb", a, x), None,
    (("M", None), ("B", None), ("K", None)),
)  # fmt: skip

WORKLOADS = {
    "batch_matmul": lambda: get_workload("batch_matmul", B=4, M=16, N=32, K=8),
    "dense_bias_relu": lambda: get_workload("dense_bias_relu", M=32, N=64, K=48),
    "conv2d": lambda: get_workload(
        "conv2d", N=1, C=8, H=10, W=10, OC=16, KH=3, KW=3, stride=1, pad=1
    ),
    # No hand template: a row softmax, two reductions and an elementwise tail.
    "row_softmax": lambda: ROW_SOFTMAX.bind(M=16, N=64),
    "tir_matmul_relu": lambda: TIR_MATMUL_RELU.bind(M=24, N=32, K=40),
}


def _run(workload, executable) -> tuple[list[np.ndarray], list[np.ndarray]]:
    inputs = workload.random_inputs(seed=1)
    expected = workload.reference(inputs)
    device = tvm.cpu()
    args = [tvm.runtime.tensor(a, device) for a in inputs]
    args += [tvm.runtime.tensor(np.zeros_like(e), device) for e in expected]
    executable["main"](*args)
    return [a.numpy() for a in args[len(inputs) :]], expected


def _tile_decisions(sch) -> list[list[int]]:
    trace = sch.trace
    return [
        [int(f) for f in trace.decisions[inst]]
        for inst in trace.insts
        if inst.kind.name == ms_space.TILE
    ]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_sampled_configs_replay_their_decisions_and_compute_the_reference(name):
    workload = WORKLOADS[name]()
    template = MetaScheduleTemplate(workload, LLVM)
    dists = template.distributions()
    assert list(dists) == [k.name for k in template.knobs]
    for dist in dists.values():
        assert isinstance(dist, optuna.distributions.CategoricalDistribution)
        assert all(isinstance(c, (str, int)) for c in dist.choices)
    assert ms_space.SKETCH in dists and len(dists[ms_space.SKETCH].choices) >= 2
    # Knobs are named after what they act on, e.g. the output block's tiled loops.
    assert any(n.endswith(".unroll_explicit") for n in dists)

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(3):
        trial = study.ask()
        config = template.suggest(trial)
        sch, executable, _ = compile_config(template, config, LLVM)
        # The schedule holds the tile sizes the config chose, in trace order.
        decisions = template.decisions[int(config[ms_space.SKETCH])]
        tiles = [config[d.knob] for d in decisions if d.kind == ms_space.TILE]
        assert ["x".join(map(str, t)) for t in _tile_decisions(sch)] == tiles
        outputs, expected = _run(workload, executable)
        for out, ref in zip(outputs, expected, strict=True):
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        study.tell(trial, 1.0)


def test_a_tir_function_is_a_workload_whose_unwritten_buffers_are_its_inputs():
    workload = WORKLOADS["tir_matmul_relu"]()
    assert workload.argument_specs() == [
        ((24, 40), "float32", True),
        ((40, 32), "float32", True),
        ((24, 32), "float32", False),
    ]
    assert workload.flop_count == 2.0 * 24 * 32 * 40
    with pytest.raises(TensortuneError, match="is a TIR function, not a tensor expression"):
        workload.tensors()


def test_a_value_outside_the_space_is_refused_before_any_schedule():
    template = MetaScheduleTemplate(WORKLOADS["dense_bias_relu"](), LLVM)
    config = {k.name: k.choices[0] for k in template.knobs}
    tile = next(d.knob for d in template.decisions[0] if d.kind == ms_space.TILE)
    with pytest.raises(ValueError, match=f"knob {tile}='5x5x5x5' is outside its space"):
        template.apply({**config, tile: "5x5x5x5"})
    with pytest.raises(ValueError, match="has no value for knob"):
        template.apply({k: v for k, v in config.items() if k != tile})


def _tile_knobs(template) -> dict[str, tuple]:
    """The first sketch's tile knobs and their choices."""
    tiles = {d.knob for d in template.decisions[0] if d.kind == ms_space.TILE}
    return {k.name: k.choices for k in template.knobs if k.name in tiles}


def test_a_batch_axis_is_split_outside_the_register_tile_only():
    tiles = _tile_knobs(MetaScheduleTemplate(WORKLOADS["batch_matmul"](), LLVM))
    batch = [name for name in tiles if name.endswith(narrowed_axes.BATCH_SUFFIX)]
    assert len(batch) == 1
    # B=4 over four levels, the inner two (inside the reduction loops) left at 1.
    assert sorted(tiles[batch[0]]) == ["1x4x1x1", "2x2x1x1", "4x1x1x1"]
    # The rows and columns reuse an operand, and keep their register tiles.
    others = [c for name, c in tiles.items() if name not in batch and len(c[0].split("x")) == 4]
    assert len(others) == 2 and all(any(not v.endswith("x1x1") for v in c) for c in others)
    # No axis of a matmul indexes both operands; a batch axis innermost in the output is the
    # vector lanes.
    for workload in (get_workload("matmul", M=16, N=32, K=8), TIR_LANES_DOT.bind(M=8, B=32, K=4)):
        names = _tile_knobs(MetaScheduleTemplate(workload, LLVM))
        assert names and not any(n.endswith(narrowed_axes.BATCH_SUFFIX) for n in names)


def test_a_batch_split_stored_under_the_loops_plain_name_still_applies():
    workload = WORKLOADS["batch_matmul"]()
    template = MetaScheduleTemplate(workload, LLVM)
    config = {k.name: k.choices[0] for k in template.knobs}
    batch = next(n for n in config if n.endswith(narrowed_axes.BATCH_SUFFIX))
    plain = batch.removesuffix(narrowed_axes.BATCH_SUFFIX)
    stored = {k: v for k, v in config.items() if k != batch} | {plain: "1x1x2x2"}
    sch, executable, _ = compile_config(template, stored, LLVM)
    assert [1, 1, 2, 2] in _tile_decisions(sch)
    outputs, expected = _run(workload, executable)
    np.testing.assert_allclose(outputs[0], expected[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=f"knob {plain}='1x1x2x3' is no split of its loop"):
        template.check({**stored, plain: "1x1x2x3"})


def tir_dense(marked: bool):
    """A dense layer's product, its weight marked layout-free with `marked` (as a model's
    task with packed weights is extracted)."""
    attrs = {"tirx.noalias": True, **({"layout_free_buffers": [1]} if marked else {})}

    def func(M: int, N: int, K: int) -> tirx.PrimFunc:
        @T.prim_func(s_tir=True)
        def main(
            A: T.Buffer((M, K), "float32"),
            W: T.Buffer((K, N), "float32"),
            C: T.Buffer((M, N), "float32"),
        ):
            T.func_attr(attrs)
            for i, j, k in T.grid(M, N, K):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * W[vk, vj]

        return main

    return func


DENSE_PARAMS = (("M", None), ("N", None), ("K", None))
PACKED_DENSE = WorkloadDef("tir_dense_packed", tir_dense(True), np.matmul, None, DENSE_PARAMS)
DENSE = WorkloadDef("tir_dense", tir_dense(False), np.matmul, None, DENSE_PARAMS)


def test_rows_that_do_not_index_a_large_packed_weight_are_split_inside_the_reduction_only():
    # 1024 x 512 floats: 2 MiB, the least weight that is streamed.
    large = PACKED_DENSE.bind(M=16, N=512, K=1024)
    tiles = _tile_knobs(MetaScheduleTemplate(large, LLVM))
    rows = [name for name in tiles if name.endswith(narrowed_axes.STREAM_SUFFIX)]
    assert len(rows) == 1 and rows[0].startswith("C.i")
    assert sorted(tiles[rows[0]]) == ["1x1x16x1", "1x1x1x16", "1x1x2x8", "1x1x4x4", "1x1x8x2"]
    # The weight's own columns keep every split; so do the rows of a weight not marked, or
    # one that fits a core's cache, and every axis on a GPU.
    columns = [c for n, c in tiles.items() if n not in rows and len(c[0].split("x")) == 4]
    assert columns and all(any(not v.startswith("1x1x") for v in c) for c in columns)
    for workload in (
        DENSE.bind(M=16, N=512, K=1024),
        PACKED_DENSE.bind(M=16, N=512, K=512),
    ):
        names = _tile_knobs(MetaScheduleTemplate(workload, LLVM))
        assert names and not any(n.endswith(narrowed_axes.STREAM_SUFFIX) for n in names)
    gpu = MetaScheduleTemplate(large, {"kind": "cuda", "arch": "sm_90"})
    assert not any(k.name.endswith(narrowed_axes.STREAM_SUFFIX) for k in gpu.knobs)


def test_a_streamed_config_and_one_stored_before_compute_the_product():
    workload = PACKED_DENSE.bind(M=16, N=512, K=1024)
    template = MetaScheduleTemplate(workload, LLVM)
    config = {k.name: k.choices[len(k.choices) // 2] for k in template.knobs}
    config[ms_space.SKETCH] = 0
    rows = next(n for n in config if n.endswith(narrowed_axes.STREAM_SUFFIX))
    plain = rows.removesuffix(narrowed_axes.STREAM_SUFFIX)
    stored = {k: v for k, v in config.items() if k != rows} | {plain: "2x2x2x2"}
    # A config stored before the narrowing names the loop plainly with any split of it, and
    # the checked config checks again to itself.
    checked = template.check(stored)
    assert checked[rows] == "2x2x2x2" and template.check(checked) == checked
    for chosen, split in ((config, config[rows]), (stored, "2x2x2x2")):
        sch, executable, packed = compile_config(template, chosen, LLVM)
        assert packed  # the weight is read packed, in the layout its loops read
        assert [int(f) for f in split.split("x")] in _tile_decisions(sch)
        inputs = workload.random_inputs(seed=1)
        device = tvm.cpu()
        args = [tvm.runtime.tensor(a, device) for a in inputs]
        args.append(tvm.runtime.tensor(np.zeros((16, 512), "float32"), device))
        executable["main"](*pack_arguments(executable, args, packed, device))
        np.testing.assert_allclose(args[-1].numpy(), inputs[0] @ inputs[1], rtol=1e-4, atol=1e-4)


def test_the_template_travels_without_tvm_objects_and_rebuilds_its_spaces():
    workload = WORKLOADS["conv2d"]()
    template = MetaScheduleTemplate(workload, LLVM)
    config = {k.name: k.choices[len(k.choices) // 2] for k in template.knobs}
    before = template.apply(config).mod.script()
    copy = pickle.loads(pickle.dumps(template))
    ms_space._CACHE.clear()  # as in a fresh worker process
    assert copy.knobs == template.knobs and copy.decisions == template.decisions
    assert copy.apply(config).mod.script() == before


def test_a_target_without_default_rules_is_refused():
    with pytest.raises(TensortuneError, match="no MetaSchedule design space for target kind"):
        MetaScheduleTemplate(WORKLOADS["conv2d"](), {"kind": "c"})


def test_configs_the_cuda_postprocessors_reject_fail_before_any_build():
    # Scheduling needs no GPU; MetaSchedule's VerifyGPUCode turns down a config whose threads
    # or shared memory do not fit a block, before anything is compiled.
    template = MetaScheduleTemplate(WORKLOADS["conv2d"](), {"kind": "cuda", "arch": "sm_90"})
    rng = np.random.default_rng(0)
    reasons = []
    for _ in range(12):
        config = {k.name: k.choices[rng.integers(len(k.choices))] for k in template.knobs}
        try:
            template.apply(config)
        except InvalidConfig as err:
            reasons.append(str(err))
    assert "VerifyGPUCode rejected the schedule" in reasons, reasons


def test_a_config_the_cuda_postprocessors_accept_builds_to_a_cuda_kernel():
    # Compile only: TVM writes the CUDA C without a GPU (the seeded draw is the same each run).
    target = {"kind": "cuda", "arch": "sm_90"}
    template = MetaScheduleTemplate(WORKLOADS["dense_bias_relu"](), target)
    rng = np.random.default_rng(0)
    for _ in range(200):
        config = {k.name: k.choices[rng.integers(len(k.choices))] for k in template.knobs}
        try:
            sch = template.apply(config)
        except InvalidConfig:
            continue
        break
    else:
        pytest.fail("no config of 200 passed the CUDA postprocessors")
    built = tvm.compile(sch.mod, target=tvm.target.Target({**ms_space.CUDA_LIMITS, **target}))
    source = built.mod.imports[0].inspect_source()
    assert "__global__" in source and "threadIdx.x" in source


def test_a_study_with_the_learned_sampler_in_the_metaschedule_space(
    storage_url, fast_settings, tmp_path
):
    workload = WORKLOADS["dense_bias_relu"]()
    sampler = CostModelSampler(n_startup_trials=4, batch_size=4, seed=0)
    study = tensortune.tune(
        workload, "llvm", 12, storage=storage_url, sampler=sampler, settings=fast_settings,
        batch_size=4, space="metaschedule", show_progress=False,
    )  # fmt: skip
    assert study.study_name.endswith("@metaschedule")
    assert study.user_attrs["space"] == "metaschedule"
    # A study of its own on a CPU ranks by the decisions, not by lowering every candidate.
    assert sampler.feature_set == "knob"
    # optuna-dashboard's note of the study says which space it searches.
    assert "- **search space** `metaschedule`" in study_note(study, sampler)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 12 and all(t.state == TrialState.COMPLETE for t in trials)
    knobs = {k.name for k in MetaScheduleTemplate(workload, LLVM).knobs}
    assert all(set(t.params) == knobs for t in trials)
    sources = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in trials]
    assert sources[:4] == ["startup"] * 4
    assert sources[4:].count("model") + sources[4:].count("explore") >= 6, sources
    # The same name in the template space is another study, and refused as this one.
    with pytest.raises(TensortuneError, match="tunes in the metaschedule space, not template"):
        tensortune.tune(workload, "llvm", 1, storage=storage_url, study_name=study.study_name,
                        settings=fast_settings, show_progress=False)  # fmt: skip
    # The best kernel exports from the study's own space, and computes the reference.
    assert best_summary(study)["config"] == study.best_trial.params
    kernel = load_kernel(export_best(study, str(tmp_path / "kernel")))
    assert kernel.manifest["space"] == "metaschedule"
    kernel.check()
    # Its decision features describe its own knobs: no other study learns from them, and
    # nothing is measured before that is said.
    warm = CostModelSampler(source_studies=[study], feature_set="knob", seed=0)
    other = get_workload("matmul", 32, 32, 32)
    with pytest.raises(TensortuneError, match="do not compare with another study's"):
        tensortune.tune(other, "llvm", 2, storage=storage_url, sampler=warm,
                        settings=fast_settings, show_progress=False)  # fmt: skip
    # A study of the very same design space makes the same decisions: it learns from the first
    # in decision features, lowering nothing.
    twin = CostModelSampler(source_studies=[study], n_startup_trials=4, batch_size=4, seed=1)
    again = tensortune.tune(
        workload, "llvm", 8, storage=storage_url, study_name="same space", sampler=twin,
        settings=fast_settings, batch_size=4, space="metaschedule", show_progress=False,
    )  # fmt: skip
    assert twin.feature_set == "knob"
    assert again.user_attrs["transfer_sources"] == [study.study_name]
    proposals = [t.system_attrs[PROPOSAL_ATTR] for t in again.get_trials(deepcopy=False)]
    assert "model" in [p["source"] for p in proposals]
    assert all(p.get("source_weights") for p in proposals if p["source"] == "model")


@pytest.mark.slow
def test_a_source_of_another_design_space_turns_a_twin_sampler_to_program_features(
    storage_url, fast_settings
):
    workload = WORKLOADS["dense_bias_relu"]()

    def random_study(of, name):
        return tensortune.tune(
            of, "llvm", 4, storage=storage_url, study_name=name, settings=fast_settings,
            sampler=optuna.samplers.RandomSampler(seed=0), batch_size=4, space="metaschedule",
            show_progress=False,
        )  # fmt: skip

    twin = random_study(workload, "twin")
    other = random_study(get_workload("matmul", 32, 32, 32), "another space")
    sampler = CostModelSampler(source_studies=[twin], n_startup_trials=2, batch_size=2, seed=0)

    def tune_to(total):
        return tensortune.tune(
            workload, "llvm", storage=storage_url, study_name="target", sampler=sampler,
            settings=fast_settings, batch_size=2, space="metaschedule", show_progress=False,
            total_trials=total,
        )  # fmt: skip

    tune_to(4)
    assert sampler.feature_set == "knob"
    # The sources change under the sampler, as a model's tasks of one kind grow: one of
    # another design space joins, whose decision rows do not compare with the study's.
    sampler.source_studies = [twin, other]
    assert sampler.feature_set == "curve"
    study = tune_to(8)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 8 and all(t.state == TrialState.COMPLETE for t in trials)
    weights = [t.system_attrs[PROPOSAL_ATTR].get("source_weights") for t in trials[4:]]
    assert any(w and len(w) == 2 for w in weights), weights
    # Back to sources of this space alone: decision rows again, nothing lowered.
    sampler.source_studies = [twin]
    assert sampler.feature_set == "knob"


USER_MODULE = """
import numpy as np
from tvm import te, tirx, topi
from tvm.script import tirx as T

import tensortune


def _reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@tensortune.register_workload("user_row_softmax", reference=_reference)
def row_softmax(M: int, N: int):
    x = te.placeholder((M, N), name="x")
    return [x, topi.nn.softmax(x, axis=1)]


def not_registered(M: int):
    return []
"""


@pytest.fixture
def user_module(tmp_path):
    """A module of the user's in the working folder that registers a row softmax."""
    (tmp_path / "user_ops.py").write_text(USER_MODULE)
    yield "user_ops"
    _registry._REGISTRY.pop("user_row_softmax", None)
    sys.modules.pop("user_ops", None)


@pytest.mark.slow
def test_the_cli_tunes_a_function_of_the_users_module_and_finds_it_again(tmp_path, user_module):
    storage = f"sqlite:///{tmp_path / 'user.db'}"
    argv = ["tune", "user_ops:row_softmax", "--shape", "16,64", "--space", "metaschedule",
            "--trials", "4", "--batch-size", "4", "--sampler", "random", "--seed", "0",
            "--storage", storage, "--repeat", "2", "--min-repeat-ms", "2",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (name,) = optuna.get_all_study_names(storage)
    assert name.startswith("user_row_softmax(M=16,N=64)@") and name.endswith("@metaschedule")
    study = optuna.load_study(study_name=name, storage=storage)
    assert study.user_attrs["workload_module"] == "user_ops"
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    # Another process finds the workload by importing the module the study names.
    script = os.path.join(os.path.dirname(sys.executable), "tensortune")
    done = subprocess.run(
        [script, "export", "--storage", storage, "--study", name, "-o", "kernel"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kernel = load_kernel(str(tmp_path / "kernel"))
    kernel.check()


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("no_such_module:f", "cannot import module no_such_module: ModuleNotFoundError"),
        ("user_ops:missing", "module user_ops has no 'missing'"),
        ("user_ops:not_registered", "user_ops:not_registered is not a workload: decorate it"),
        ("user_ops:", "'user_ops:' is not module:function"),
    ],
)
def test_a_module_function_that_is_no_workload_is_one_line(
    tmp_path, capsys, user_module, workload, message
):
    before = sorted(os.listdir(tmp_path))
    argv = ["tune", workload, "--shape", "4", "--space", "metaschedule", "--storage",
            f"sqlite:///{tmp_path / 'x.db'}"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, err
    assert message in err
    assert sorted(p for p in os.listdir(tmp_path) if p != "__pycache__") == before
