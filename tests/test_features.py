"""Program features: the walk of the lowered loop program and the three encodings."""

from __future__ import annotations

import numpy as np
import pytest

import tensortune
from tensortune.features import (
    FEATURE_SETS,
    FeatureExtractor,
    curve_features,
    feature_length,
    loop_program,
)
from tensortune.templates import CpuTemplate, InvalidConfig

MATMUL_CONFIG = {
    "tile_i": "2x1x4x8",
    "tile_j": "1x2x2x16",
    "tile_k": "16x4",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 1,
    "unroll": 0,
    "accumulate": "off",
}


def test_walk_of_a_known_matmul_schedule():
    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    program = loop_program(template.apply(MATMUL_CONFIG).mod)
    main = program.main_store()
    # Unit loops vanish; j_3 (16 lanes) is vectorised, i_0 parallel.
    assert [(lp.name, lp.extent, lp.kind) for lp in main.loops] == [
        ("i_0", 2, "parallel"),
        ("j_1", 2, "serial"),
        ("k_0", 16, "serial"),
        ("i_2", 4, "serial"),
        ("j_2", 2, "serial"),
        ("k_1", 4, "serial"),
        ("i_3", 8, "serial"),
        ("j_3", 16, "vectorized"),
    ]
    assert main.arith == {"add": 1, "mul": 1, "div": 0, "minmax": 0, "other": 0}
    accesses = {a.buffer: a for a in main.accesses}
    assert set(accesses) == {"C", "A", "B"} and accesses["C"].write
    a, b = accesses["A"], accesses["B"]
    # A[i, k]: the innermost loop (j_3) does not move it; k_1 moves it by one element.
    assert a.stride(7) == 0 and a.stride(5) == 1 and a.stride(6) == 64
    assert b.stride(7) == 1 and b.stride(5) == 64
    # Under k_1 (level 5): A touches an 8x4 tile, B a 4x16 one.
    assert a.footprints(main.loops)[5] == 8 * 4
    assert b.footprints(main.loops)[5] == 4 * 16
    assert a.footprints(main.loops)[0] == 64 * 64
    # The initialisation store of C is in the program too, before the update.
    assert len(program.stores) == 2 and program.stores[0].arith["add"] == 0


def test_auto_unroll_pragma_is_seen():
    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    program = loop_program(template.apply({**MATMUL_CONFIG, "unroll": 64}).mod)
    assert {lp.auto_unroll for lp in program.main_store().loops} == {64}


@pytest.mark.parametrize("feature_set", FEATURE_SETS)
def test_every_operator_gets_rows_of_one_length(feature_set):
    """The relation encoding's length and meaning do not depend on the operator; the others
    have a fixed length too, so one model can read rows of several workloads."""
    workloads = [
        tensortune.get_workload("matmul", 32, 48, 64),
        tensortune.get_workload("batch_matmul", 2, 16, 16, 32),
        tensortune.get_workload("dense_bias_relu", 16, 32, 16),
        tensortune.get_workload("conv2d", 1, 8, 10, 10, 16),
        tensortune.get_workload("depthwise_conv2d", 1, 16, 12, 12, 3, 3, 1, 1),
    ]
    for workload in workloads:
        template = CpuTemplate(workload)
        rng = np.random.default_rng(0)
        configs = [
            {k.name: k.choices[rng.integers(len(k.choices))] for k in template.knobs}
            for _ in range(6)
        ]
        rows = FeatureExtractor(template, feature_set)(configs)
        assert rows.shape == (6, feature_length(feature_set))
        good = rows[~np.isnan(rows).any(axis=1)]
        assert len(good) >= 3, workload.key
        assert np.isfinite(good).all()
        # Different schedules look different.
        assert len({r.tobytes() for r in good}) > 1


def test_curve_rows_differ_where_the_schedule_does():
    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    narrow = {**MATMUL_CONFIG, "tile_j": "4x2x1x8"}
    rows = [curve_features(loop_program(template.apply(c).mod)) for c in (MATMUL_CONFIG, narrow)]
    assert not np.array_equal(rows[0], rows[1])
    # Many sampled points per curve, not one (the replication report's fix of AutoTVM's curve).
    input_reuse = rows[0][2 * 24 : 3 * 24]  # the second buffer's reuse against bytes touched
    assert len(np.unique(input_reuse)) >= 4


def test_extractor_caches_and_marks_unschedulable_configs():
    # Every config of the CPU template schedules, so this one refuses one (as TVM would).
    invalid = {**MATMUL_CONFIG, "tile_i": "2x4x8x1", "unroll": 512}

    class CountingTemplate(CpuTemplate):
        applied = 0

        def apply(self, config):
            CountingTemplate.applied += 1
            if config == invalid:
                raise InvalidConfig("refused by the test")
            return super().apply(config)

    template = CountingTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    extract = FeatureExtractor(template, "curve")
    rows = extract([MATMUL_CONFIG, invalid, MATMUL_CONFIG])
    assert np.isfinite(rows[0]).all() and np.isnan(rows[1]).all()
    assert np.array_equal(rows[0], rows[2])
    assert CountingTemplate.applied == 2
    extract([invalid, MATMUL_CONFIG])
    assert CountingTemplate.applied == 2


def test_configs_lowered_in_a_worker_process_get_the_rows_lowered_here():
    from tensortune.features import extractor as extractor_module
    from tensortune.sampler.history import KnobSpace
    from tensortune.search import random_configs

    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    space = KnobSpace(template.knobs)
    rows = random_configs(space.sizes, 2 * extractor_module.MIN_CHUNK + 5, np.random.default_rng(0))
    configs = [space.decode(row) for row in rows]
    here = FeatureExtractor(template, "curve")(configs)
    split = FeatureExtractor(template, "curve", processes=3)(configs)
    # 69 configs make two chunks: one went to the pool of the extractor's 3 - 1 workers.
    assert 2 in extractor_module._POOLS
    np.testing.assert_array_equal(split, here)
    with pytest.raises(ValueError, match="processes must be at least 1"):
        FeatureExtractor(template, "curve", processes=0)


def test_unknown_feature_set_is_refused():
    with pytest.raises(ValueError, match="unknown feature set 'nope'"):
        feature_length("nope")
