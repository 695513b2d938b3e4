"""Knob-level features (`tensortune.features.knob`): rows from knob values alone, no TVM
lowering, that say what the loop nest does and rank measured configs like program features."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tensortune
from tensortune.cost_model import BootstrapXGBModel, kendall_tau
from tensortune.features import FeatureExtractor
from tensortune.features.knob import GRID, KNOB_SCALARS, LENGTH, MAX_BUFFERS, KnobFeatures
from tensortune.sampler.history import KnobSpace, training_targets
from tensortune.search import random_configs
from tensortune.templates import CpuTemplate

DATA = os.path.join(os.path.dirname(__file__), "data")
CONFIG = {
    "tile_i": "2x1x4x8",
    "tile_j": "1x2x2x16",
    "tile_k": "16x4",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 1,
    "unroll": 0,
    "accumulate": "off",
}


def scalar(row: np.ndarray, name: str) -> float:
    return float(row[(2 * MAX_BUFFERS + 1) * len(GRID) + KNOB_SCALARS.index(name)])


@pytest.fixture(scope="module")
def matmul() -> KnobFeatures:
    return KnobFeatures(CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64)), cores=2)


def test_rows_read_the_loop_nest(matmul):
    row = matmul([CONFIG])[0]
    assert row.shape == (LENGTH,) and np.isfinite(row).all()
    assert scalar(row, "vector_length") == 4.0  # j's innermost tile: 16 lanes
    assert scalar(row, "vector_full_lanes") == 1.0
    assert scalar(row, "parallel_extent") == 1.0  # i_0 = 2, fused alone
    assert scalar(row, "register_tile") == np.log2(8 * 16 / 16)  # 8x16 accumulators
    assert scalar(row, "order_0") == 1.0 and scalar(row, "accumulate_off") == 1.0
    # Along j (the vectorised axis) the output and B are contiguous, A is broadcast.
    strides = [scalar(row, f"inner_stride_{b}") for b in range(3)]
    assert sorted(strides) == [0.0, 1.0, 1.0]
    other = matmul([{**CONFIG, "inner_axis": "i", "parallel": 2, "accumulate": "inner"}])[0]
    assert scalar(other, "vector_length") == 3.0  # i's innermost tile: 8
    assert scalar(other, "parallel_extent") == 1.0  # i_0 * j_0 = 2 * 1
    assert scalar(other, "accumulate_inner") == 1.0 and scalar(other, "local_bytes") > 0


def test_rows_differ_where_configs_differ_and_batch_equals_one_by_one(matmul):
    space = KnobSpace(matmul.template.knobs)
    indices = random_configs(space.sizes, 200, np.random.default_rng(0))
    batch = matmul.from_indices(indices)
    assert batch.shape == (200, LENGTH) and np.isfinite(batch).all()
    one_by_one = np.vstack([matmul([space.decode(row)]) for row in indices])
    assert np.array_equal(batch, one_by_one)
    distinct = {tuple(r) for r in indices.tolist()}
    assert len({r.tobytes() for r in batch}) >= 0.95 * len(distinct)
    # Every knob moves the row: change one knob at a time from a config where each matters
    # (with j_0 = 1, fusing j_0 into the parallel loop would change nothing).
    base = space.encode({**CONFIG, "tile_j": "2x1x2x16"})
    assert base is not None
    for j, size in enumerate(space.sizes):
        changed = list(base)
        changed[j] = (changed[j] + 1) % size
        rows = matmul.from_indices(np.array([base, changed]))
        assert not np.array_equal(rows[0], rows[1]), space.knobs[j].name


def test_conv2d_footprints_follow_the_stride():
    """The padded input's footprint of a tile spans (tile - 1) * stride + kernel rows."""
    workload = tensortune.get_workload("conv2d", 1, 8, 10, 10, 16, 3, 3, 2, 1)
    features = KnobFeatures(CpuTemplate(workload), cores=2)
    pad = next(b for b in features._buffers if b[1].tolist() == [1, 8, 12, 12])
    coef = pad[0]
    names = [a.name for a in features.long]
    assert coef[2, names.index("y")] == 2 and coef[2, names.index("ry")] == 1


def test_cpu_template_only():
    from tensortune.templates.cuda import CudaTemplate

    template = CudaTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    with pytest.raises(ValueError, match="CPU template only"):
        KnobFeatures(template)


def test_knob_features_rank_measured_configs_and_shuffled_cannot():
    """On the recorded matmul: held-out Kendall tau about as the curve features' (measured:
    knob 0.36, curve 0.38; conv2d_a 0.28 vs 0.24; conv2d_b 0.31 vs 0.31, median of 5 splits)."""
    with open(os.path.join(DATA, "matmul_a.json")) as f:
        data = json.load(f)
    template = CpuTemplate(tensortune.get_workload(data["workload"], **data["shape"]))
    X = FeatureExtractor(template, "knob")([r["config"] for r in data["records"]])
    values = [np.nan if r["gflops"] is None else r["gflops"] for r in data["records"]]
    y = training_targets(np.array(values))

    def median_tau(X: np.ndarray) -> float:
        taus = []
        for seed in range(3):
            order = np.random.default_rng(seed).permutation(len(y))
            train, test = order[: len(y) // 2], order[len(y) // 2 :]
            model = BootstrapXGBModel(n_models=3, seed=seed).fit(X[train], y[train])
            taus.append(kendall_tau(model.predict(X[test])[0], y[test]))
        return float(np.median(taus))

    assert median_tau(X) > 0.25
    assert median_tau(X[np.random.default_rng(100).permutation(len(y))]) < 0.1


def test_decision_rows_read_tile_extents_from_any_templates_knobs():
    """MetaSchedule's space has no loop nest known ahead: its rows come from the decisions,
    the same in a batch as one by one, and with the row length the extractor reports."""
    from tensortune.features.decisions import DecisionFeatures
    from tensortune.target import target_spec
    from tensortune.templates import MetaScheduleTemplate

    template = MetaScheduleTemplate(tensortune.get_workload("matmul", 64, 64, 64), target_spec())
    features = DecisionFeatures(template)
    extractor = FeatureExtractor(template, "knob")
    assert extractor.length == features.length
    knobs = template.knobs
    tiles = [k for k in knobs if isinstance(k.choices[0], str) and "x" in k.choices[0]]
    assert tiles, [k.name for k in knobs]
    space = KnobSpace(knobs)
    configs = [space.decode(r) for r in random_configs(space.sizes, 20, np.random.default_rng(0))]
    rows = extractor(configs)
    assert rows.shape == (20, features.length) and np.isfinite(rows).all()
    assert np.array_equal(rows[3], extractor([configs[3]])[0])
    # The first tile knob's columns: log2 of each factor, then of the extent inside each level.
    first = next(i for i, k in enumerate(knobs) if k is tiles[0])
    column = sum(features._tables[j].shape[1] for j in range(first))
    factors = [int(f) for f in configs[0][tiles[0].name].split("x")]
    levels = len(factors)
    assert rows[0, column : column + levels].tolist() == [np.log2(f) for f in factors]
    inside = [np.log2(np.prod(factors[i:])) for i in range(levels)]
    assert np.allclose(rows[0, column + levels : column + 2 * levels], inside)
    assert rows[0, column + levels] == np.log2(64)  # the whole loop inside its outermost level
    # Configs that differ in one decision get different rows.
    other = dict(configs[0])
    other[tiles[0].name] = next(v for v in tiles[0].choices if v != configs[0][tiles[0].name])
    assert not np.array_equal(extractor([other])[0], rows[0])
