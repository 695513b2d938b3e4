"""CUDA template without a GPU: sampled configs build to CUDA C (and one to PTX), limits are
refused before any build, and the lowered kernels pass TVM's GPU checks."""

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
