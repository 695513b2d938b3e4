"""The cost model on committed measurements (``tests/data``, recorded with
``studies/record_configs.py``): it ranks held-out configs of a real workload well, and a broken
feature pipeline cannot."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tensortune
from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall, top_weighted_tau
from tensortune.features import FeatureExtractor
from tensortune.sampler.history import training_targets
from tensortune.templates import CpuTemplate

DATA = os.path.join(os.path.dirname(__file__), "data")
# Floors on the median over three half/half splits of 320 random configs of a small conv2d.
# Measured: tau 0.18-0.28 and top-10 % recall 0.31-0.44 with the true features; with the
# features shuffled against the measurements, tau -0.06-0.05 and recall 0.0-0.06.
TAU_FLOOR = 0.18
RECALL_FLOOR = 0.2


def load(name: str, feature_set: str = "curve") -> tuple[np.ndarray, np.ndarray]:
    with open(os.path.join(DATA, name)) as f:
        data = json.load(f)
    workload = tensortune.get_workload(data["workload"], **data["shape"])
    rows = FeatureExtractor(CpuTemplate(workload), feature_set)(
        [r["config"] for r in data["records"]]
    )
    values = np.array([np.nan if r["gflops"] is None else r["gflops"] for r in data["records"]])
    return rows, training_targets(values)


def held_out_quality(X, y, seed, loss="rank"):
    order = np.random.default_rng(seed).permutation(len(y))
    train, test = order[: len(y) // 2], order[len(y) // 2 :]
    model = BootstrapXGBModel(loss=loss, n_models=3, seed=seed).fit(X[train], y[train])
    mean, _ = model.predict(X[test])
    return kendall_tau(mean, y[test]), top_k_recall(mean, y[test], 0.1)


def median_quality(X, y, loss="rank"):
    scores = [held_out_quality(X, y, seed, loss) for seed in range(3)]
    return float(np.median([s[0] for s in scores])), float(np.median([s[1] for s in scores]))


def test_model_ranks_held_out_configs_and_shuffled_features_cannot():
    X, y = load("conv2d_a.json")
    assert len(y) == 320
    tau, recall = median_quality(X, y)
    assert tau > TAU_FLOOR and recall > RECALL_FLOOR, (tau, recall)
    shuffled = X[np.random.default_rng(100).permutation(len(y))]
    tau_broken, recall_broken = median_quality(shuffled, y)
    assert tau_broken < TAU_FLOOR / 2 and recall_broken < RECALL_FLOOR, (
        tau_broken,
        recall_broken,
    )


def test_regression_loss_ranks_too():
    X, y = load("conv2d_a.json")
    tau, _ = median_quality(X, y, loss="reg")
    assert tau > TAU_FLOOR / 2


def test_the_top_weighted_tau_reads_the_best_configs_order_first():
    y = np.linspace(0.05, 1.0, 20)
    # The poor half reversed, or the best half: one plain Kendall's tau for both, while the
    # top-weighted tau is high for the first and low for the second.
    bottom_reversed = np.concatenate([y[:10][::-1], y[10:]])
    top_reversed = np.concatenate([y[:10], y[10:][::-1]])
    assert kendall_tau(bottom_reversed, y) == pytest.approx(kendall_tau(top_reversed, y))
    assert top_weighted_tau(top_reversed, y) < 0.3 < 0.7 < top_weighted_tau(bottom_reversed, y)
    assert top_weighted_tau(y, y) == pytest.approx(1.0)
    assert top_weighted_tau(-y, y) == pytest.approx(-1.0)


@pytest.mark.slow
def test_curve_features_carry_over_to_another_shape():
    """Trained on one conv2d shape, the model still orders another shape's configs."""
    X_a, y_a = load("conv2d_a.json")
    X_b, y_b = load("conv2d_b.json")
    model = BootstrapXGBModel(n_models=3, seed=0).fit(X_a, y_a)
    mean, _ = model.predict(X_b)
    assert kendall_tau(mean, y_b) > 0.12
