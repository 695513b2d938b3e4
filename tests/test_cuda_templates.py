"""CUDA template, with or without a GPU: sampled configs build to CUDA C (and one to PTX), limits
are refused before any build, the lowered kernels pass TVM's GPU checks, and tuning and timing
run on a GPU where there is one and are refused (tune) or fail at run (timing) where not."""

from __future__ import annotations

import math
import re
import shutil

import optuna
import pytest
import tvm

from tensortune.templates import CudaTemplate, InvalidConfig
from tensortune.templates.cuda import verify_gpu_limits
from tensortune.workloads import get_workload

TARGET = {"kind": "cuda", "arch": "sm_90"}
WORKLOADS = {
    "matmul": (64, 64, 64),
    "batch_matmul": (2, 32, 32, 32),
    "dense_bias_relu": (32, 64, 32),
    "conv2d": (1, 16, 14, 14, 32, 3, 3, 2, 1),
}
SHARED_DECL = re.compile(r"__shared__ alignas\(\d+\) float \w+\[(\d+)\]")


def _sample(template: CudaTemplate, count: int, seed: int) -> list[dict]:
    """`count` configs drawn by a seeded Optuna random sampler from the template's space."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [template.suggest(study.ask()) for _ in range(count)]


def _cuda_source(sch) -> str:
    ex = tvm.compile(sch.mod, target=tvm.target.Target(TARGET))
    return ex.mod.imports[0].inspect_source()


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_sampled_configs_build_to_cuda(name):
    template = CudaTemplate(get_workload(name, *WORKLOADS[name]), TARGET)
    built = 0
    for config in _sample(template, 10, seed=0):
        try:
            sch = template.apply(config)
        except InvalidConfig:
            continue
        src = _cuda_source(sch)
        blocks = math.prod(template.factors(config)[a.name][0] for a in template.program.spatial)
        expected = ["__global__", "__shared__"]
        # TVM drops a binding of extent 1, so a one-block (one-thread) kernel names no blockIdx
        # (threadIdx).
        expected += ["blockIdx"] if blocks > 1 else []
        expected += ["threadIdx"] if template.threads_per_block(config) > 1 else []
        assert all(word in src for word in expected), (config, expected)
        # The shared-memory estimate behind the limit check is what TVM allocates.
        assert 4 * sum(map(int, SHARED_DECL.findall(src))) == template.shared_bytes(config)
        assert verify_gpu_limits(sch.mod, template)
        built += 1
    assert built >= 5


def test_knobs_and_epilogue_inlined():
    template = CudaTemplate(get_workload("dense_bias_relu", 32, 64, 32))
    assert set(template.distributions()) == {"tile_i", "tile_j", "tile_k", "unroll", "vector"}
    config = {"tile_i": "2x2x4x2", "tile_j": "2x2x8x2", "tile_k": "4x8", "unroll": 64, "vector": 4}
    src = _cuda_source(template.apply(config))
    assert "max(" in src and "float4" in src  # ReLU in the kernel; 4-wide shared loads
    assert "__launch_bounds__(32)" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_one_config_compiles_to_ptx():
    from tvm.support import nvcc

    template = CudaTemplate(get_workload("matmul", 64, 64, 64), TARGET)
    config = {"tile_i": "2x2x8x2", "tile_j": "2x1x8x4", "tile_k": "8x8", "unroll": 512, "vector": 4}
    src = _cuda_source(template.apply(config))
    target = tvm.target.Target(TARGET)
    with target:  # compile_cuda reads Target.current() even with arch given
        ptx = nvcc.compile_cuda(src, target_format="ptx", arch="sm_90", compiler="nvcc")
    text = ptx.decode() if isinstance(ptx, bytes | bytearray) else str(ptx)
    assert ".visible .entry" in text and "main_kernel" in text


def test_limits_are_refused_before_building(monkeypatch):
    template = CudaTemplate(get_workload("matmul", 1024, 1024, 1024), TARGET)
    monkeypatch.setattr(
        tvm, "compile", lambda *a, **k: pytest.fail("built a config over the limits")
    )
    base = {"tile_k": "32x32", "unroll": 0, "vector": 1}
    too_many_threads = {**base, "tile_i": "16x1x64x1", "tile_j": "32x1x32x1"}  # 2048 threads
    with pytest.raises(InvalidConfig, match="max_num_threads=1024"):
        template.check(too_many_threads)
    # Tiles of 256 rows x 32 deep for A and 32 x 256 for B: 64 KiB of float32.
    too_much_shared = {**base, "tile_i": "4x4x8x8", "tile_j": "4x4x8x8"}
    with pytest.raises(InvalidConfig, match="max_shared_memory_per_block=49152"):
        template.apply(too_much_shared)
    # The target's own limit counts.
    small = CudaTemplate(
        get_workload("matmul", 1024, 1024, 1024), {**TARGET, "max_shared_memory_per_block": 1024}
    )
    with pytest.raises(InvalidConfig, match="max_shared_memory_per_block=1024"):
        small.check({**base, "tile_i": "32x1x32x1", "tile_j": "32x1x32x1"})


def test_no_reduction_is_refused():
    from tvm import te

    from tensortune.errors import TensortuneError
    from tensortune.workloads import WorkloadDef

    def scale(n: int):
        x = te.placeholder((n,), "float32", name="x")
        return [x, te.compute((n,), lambda i: 2 * x[i], name="out")]

    # Not registered: the registry is shared with the other tests.
    workload = WorkloadDef("scale", scale, lambda x: 2 * x, None, (("n", None),)).bind(8)
    with pytest.raises(TensortuneError, match="reduction"):
        CudaTemplate(workload)


# -- wired into tensortune: target, tune, measurer, sampler -------------------------------------
# Each of these checks the behaviour on either kind of machine: with a GPU, tuning and timing
# really run; without one, tuning is refused before anything is written and timing fails at run.
def _local_target() -> dict:
    """The cuda target of this machine's GPU (its own arch), or `TARGET` where there is none."""
    from tensortune.target import gpu_present

    if not gpu_present():
        return TARGET
    major, minor = tvm.cuda(0).compute_version.split(".")
    return {"kind": "cuda", "arch": f"sm_{major}{minor}"}


def test_cuda_targets_parse_and_tune_runs_only_where_a_gpu_is(tmp_path):
    import tensortune
    from tensortune import TensortuneError
    from tensortune.target import gpu_present, target_spec

    assert target_spec('{"kind": "cuda", "arch": "sm_90"}')["arch"] == "sm_90"
    assert target_spec("cuda -arch=sm_80")["arch"] == "sm_80"
    url = f"sqlite:///{tmp_path / 'gpu.db'}"
    settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=2)
    tune = dict(shape=dict(M=64, N=64, K=64), storage=url, settings=settings)
    if gpu_present():
        study = tensortune.tune("matmul", target=_local_target(), n_trials=4, seed=0, **tune)
        values = [t.value for t in study.trials if t.value is not None]
        assert len(study.trials) == 4 and values and min(values) > 0, study.trials
    else:
        with pytest.raises(TensortuneError, match="no CUDA GPU on this machine"):
            tensortune.tune("matmul", target=TARGET, **tune)
        assert not (tmp_path / "gpu.db").exists()  # refused before anything was written


@pytest.mark.slow
def test_measurer_builds_cuda_candidates_in_its_workers():
    from tensortune.measure import Measurer, MeasureSettings
    from tensortune.target import gpu_present

    target = _local_target()
    template = CudaTemplate(get_workload("matmul", 64, 64, 64), target)
    configs = [c for c in _sample(template, 6, seed=3) if _valid(template, c)][:2]
    assert len(configs) == 2
    with Measurer(template, target, MeasureSettings(repeat=1, min_repeat_ms=0)) as measurer:
        results = measurer.measure(configs)
    for result in results:
        # Built (the CUDA module is embedded in the library) in either case.
        assert result.compile_seconds > 0, result
        if gpu_present():  # then timed on the GPU, and its output checked
            assert result.error is None and result.stage is None, result
            assert len(result.costs) >= 1 and result.cost > 0, result
        else:  # refused at run time for want of a GPU: the run's failure, with the reason
            assert result.stage == "run" and result.error and not result.costs, result


def _valid(template: CudaTemplate, config: dict) -> bool:
    try:
        template.check(config)
    except InvalidConfig:
        return False
    return True


@pytest.mark.slow
def test_learned_sampler_proposes_cuda_configs_from_gpu_schedules(tmp_path):
    import numpy as np

    from tensortune.sampler import CostModelSampler
    from tensortune.storage import create_study, open_storage
    from tensortune.trial_records import PROPOSAL_ATTR

    workload = get_workload("matmul", 64, 64, 64)
    sampler = CostModelSampler(n_startup_trials=8, batch_size=4, seed=0)
    study = create_study(
        open_storage(f"sqlite:///{tmp_path / 's.db'}"), "gpu", workload, TARGET, None, sampler
    )
    template = CudaTemplate(workload, TARGET)
    for _ in range(12):
        trial = study.ask()
        config = template.suggest(trial)
        # A stand-in for GPU timings: more threads per block (up to 256) is faster.
        threads = template.threads_per_block(config)
        study.tell(trial, float(np.log2(min(threads, 256)) + 1))
    sources = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials]
    assert "model" in sources[8:], sources  # the model ranks features of CUDA schedules
    assert set(study.trials[0].params) == {k.name for k in template.knobs}


def test_gpu_features_read_launch_shape_and_memory_off_the_program():
    """Launch dimensions are loops of the nest: the GPU scalars give the threads, blocks and
    memory that the template computes from the config, and a CPU program has none."""
    import numpy as np

    from tensortune.features import FeatureExtractor, loop_program
    from tensortune.features.encodings import GPU_SCALARS, gpu_scalars
    from tensortune.templates import CpuTemplate

    workload = get_workload("matmul", 64, 64, 64)
    template = CudaTemplate(workload, TARGET)
    configs = [c for c in _sample(template, 12, seed=5) if _valid(template, c)]
    assert len(configs) >= 4
    for config in configs:
        scalars = gpu_scalars(loop_program(template.apply(config).mod))
        values = dict(zip(GPU_SCALARS, scalars, strict=True))
        blocks = math.prod(template.factors(config)[a.name][0] for a in template.program.spatial)
        threads = template.threads_per_block(config)
        assert values["threads_per_block"] == pytest.approx(math.log2(1 + threads))
        assert values["blocks"] == pytest.approx(math.log2(1 + blocks))
        assert values["shared_bytes"] == pytest.approx(math.log2(1 + template.shared_bytes(config)))
        assert values["shared_read_share"] == 1.0  # the update reads only the shared tiles
    # A one-column k tile makes neighbouring threads load rows 64 floats apart; a 16-wide one
    # lets them load neighbouring floats.
    narrow = {"tile_i": "2x1x8x4", "tile_j": "4x1x4x4", "tile_k": "64x1", "unroll": 0, "vector": 1}
    wide = {**narrow, "tile_k": "4x16"}
    coalesced = [
        gpu_scalars(loop_program(template.apply(c).mod))[GPU_SCALARS.index("coalesced_share")]
        for c in (narrow, wide)
    ]
    assert coalesced[0] < 0.5 < 0.8 < coalesced[1], coalesced
    # Rows of the default feature set differ across these configs in the GPU entries.
    rows = FeatureExtractor(template)(configs)
    gpu = rows[:, -len(GPU_SCALARS) :]
    assert len({tuple(r) for r in gpu}) > 1 and np.isfinite(rows).all()
    cpu = CpuTemplate(workload)
    cpu_config = cpu.suggest(optuna.create_study().ask())
    assert gpu_scalars(loop_program(cpu.apply(cpu_config).mod)) == [0.0] * len(GPU_SCALARS)
    # MetaSchedule's own features, extracted against the cuda target.
    per_store = FeatureExtractor(template, "per-store")(configs[:2])
    assert np.isfinite(per_store).all() and (per_store != 0).any()
