"""Templates: knobs → Optuna distributions → schedule, for each workload."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
import tvm

from tensortune.templates import CpuTemplate, InvalidConfig, SplitKnob
from tensortune.templates.knobs import factorizations
from tensortune.workloads import get_workload, parse_shape
from tests.test_workloads import SMALL


def test_factorizations_are_all_divisor_splits():
    splits = factorizations(12, 3, max_innermost=64)
    assert all(math.prod(s) == 12 for s in splits)
    assert len(splits) == len(set(splits)) == 18  # ordered factorisations of 2^2 * 3 into 3
    assert all(s[-1] <= 4 for s in factorizations(64, 2, max_innermost=4))


def test_knobs_declare_readable_distributions():
    template = CpuTemplate(parse_shape("conv2d", "resnet18-c7"))
    dists = template.distributions()
    assert set(dists) == {
        "tile_f",
        "tile_y",
        "tile_x",
        "tile_rc",
        "tile_ry",
        "tile_rx",
        "inner_axis",
        "order",
        "parallel",
        "unroll",
        "accumulate",
    }
    assert "2x2x4x16" in dists["tile_f"].choices
    assert set(dists["inner_axis"].choices) == {"f", "y", "x"}
    assert dists["unroll"].choices == (0, 16, 64, 512)
    for dist in dists.values():
        assert isinstance(dist, optuna.distributions.CategoricalDistribution)
        assert all(isinstance(c, (str, int, bool)) for c in dist.choices)
    # The paper's conv2d spaces are 1e7-1e8 configs; ours adds parallel/unroll/accumulate knobs.
    assert 1e7 <= template.space_size <= 1e9
    assert 1e6 <= CpuTemplate(get_workload("matmul", 1024, 1024, 1024)).space_size <= 1e9


def _scheduled_loops(sch):
    return {
        str(sch.get(loop).loop_var.name): int(sch.get(loop).extent)
        for block in ("C",)
        for loop in sch.get_loops(sch.get_sblock(block))
    }


def _assert_computes(template: CpuTemplate, config: dict, inputs: list, want: np.ndarray) -> None:
    """Compile `config` of `template` for llvm, run it on `inputs` and compare with `want`."""
    lib = tvm.compile(template.apply(config).mod, target="llvm")
    dev = tvm.cpu(0)
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"), dev)
    lib["main"](*[tvm.runtime.tensor(a, dev) for a in inputs], out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_config_becomes_the_schedule_it_names():
    workload = get_workload("matmul", 64, 128, 32)
    template = CpuTemplate(workload)
    config = {
        "tile_i": "2x4x2x4",
        "tile_j": "2x2x2x16",
        "tile_k": "8x4",
        "inner_axis": "j",
        "order": "S0 S1 R0 S2 R1 S3",
        "parallel": 2,
        "unroll": 64,
        "accumulate": "inner",
    }
    sch = template.apply(config)
    script = sch.mod.script()
    assert "T.parallel(4" in script  # i0 * j0 = 2 * 2 fused
    assert "T.vectorized(16)" in script  # innermost j tile
    assert '"pragma_auto_unroll_max_step": 64' in script
    assert "C_global" in script  # local accumulation
    loops = [int(sch.get(loop).extent) for loop in sch.get_loops(sch.get_sblock("C_update"))]
    assert loops == [4, 4, 2, 8, 2, 2, 4, 4, 16]  # fused S0, S1 (i, j), R0, S2 (i, j), R1, S3


def test_only_an_axis_contiguous_in_the_output_is_vectorised_by_hand():
    """Vectorised along i, C[i, j] and A[i, k] are read and written 64 apart: LLVM spent over
    5 minutes compiling this config (unrolled 512 steps) before the template left such an
    axis to LLVM; it now builds like any other and computes the same."""
    workload = get_workload("matmul", 64, 64, 64)
    template = CpuTemplate(workload)
    config = {
        "tile_i": "2x1x1x32",
        "tile_j": "2x2x2x8",
        "tile_k": "32x2",
        "inner_axis": "i",
        "order": "S0 S1 S2 R0 R1 S3",
        "parallel": 2,
        "unroll": 512,
        "accumulate": "off",
    }
    assert "T.vectorized" not in template.apply(config).mod.script()
    contiguous = {**config, "inner_axis": "j"}
    assert "T.vectorized(8)" in template.apply(contiguous).mod.script()
    inputs = workload.random_inputs(seed=0)
    _assert_computes(template, config, inputs, workload.reference(inputs)[0])


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sampled_configs_compile_and_compute_correctly(name):
    workload = get_workload(name, **SMALL[name])
    template = CpuTemplate(workload)
    inputs = workload.random_inputs(seed=0)
    (want,) = workload.reference(inputs)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(4):
        trial = study.ask()
        config = template.suggest(trial)
        assert set(config) == set(template.distributions())
        _assert_computes(template, config, inputs, want)
        study.tell(trial, 0.0)


def test_write_back_under_a_tile_whose_inner_tiles_are_all_one():
    """Accumulating under S2 when every S3 tile is 1: the write-back has no loop of its own, and
    the S2 loop that holds it (and the reduction) must not be vectorised; this config once
    failed as invalid, as about 1 in 100 random configs of every CPU workload did."""
    workload = get_workload("batch_matmul", 2, 16, 16, 16)
    config = {
        "tile_b": "1x1x2x1",
        "tile_i": "8x1x2x1",
        "tile_j": "1x16x1x1",
        "tile_k": "8x2",
        "inner_axis": "i",
        "order": "S0 S1 S2 R0 R1 S3",
        "parallel": 1,
        "unroll": 512,
        "accumulate": "inner",
    }
    inputs = workload.random_inputs(seed=0)
    _assert_computes(CpuTemplate(workload), config, inputs, workload.reference(inputs)[0])


def test_values_outside_the_space_are_refused():
    template = CpuTemplate(get_workload("matmul", 64, 64, 64))
    good = {k.name: k.choices[0] for k in template.knobs}
    bad = [
        ({**good, "tile_i": "3x1x1x1"}, "tile_i='3x1x1x1' is outside its space"),
        ({**good, "unroll": 7}, "unroll=7 is outside"),
        ({k: v for k, v in good.items() if k != "order"}, "no value for knob order"),
    ]
    for config, message in bad:
        with pytest.raises(ValueError, match=message) as refused:
            template.apply(config)
        # A caller's mistake, not a config that cannot be scheduled (which fails only its trial).
        assert not isinstance(refused.value, InvalidConfig), refused.value


def test_split_knob_applies_its_factors():
    knob = SplitKnob.over("tile_x", 24, 3)
    assert "2x3x4" in knob.choices and knob.factors("2x3x4") == [2, 3, 4]
