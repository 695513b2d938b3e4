"""The cost model on committed measurements (``tests/data``, recorded with
``studies/record_configs.py``): it ranks held-out configs of a real workload well, and a broken
feature pipeline cannot."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tensortune
from tensortune.cost_model import BootstrapXGBModel, kendall_tau, top_k_recall
from tensortune.features import FeatureExtractor
from tensortune.sampler.history import training_targets
from tensortune.templates import CpuTemplate

DATA = os.path.join(os.path.dirname(__file__), "data")
# Floors: a model on the true features clears them on every split; one on features shuffled
# against the measurements cannot (its tau is near 0).
TAU_FLOOR = 0.45
RECALL_FLOOR = 0.3


def load(name: str, feature_set: str) -> tuple[np.ndarray, np.ndarray]:
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


@pytest.mark.parametrize("feature_set", ["curve", "itervar"])
def test_model_ranks_held_out_configs(feature_set):
    X, y = load("conv2d_a.json", feature_set)
    assert len(y) >= 300
    for seed in range(3):
        tau, recall = held_out_quality(X, y, seed)
        assert tau > TAU_FLOOR, (seed, tau)
        assert recall > RECALL_FLOOR, (seed, recall)
        shuffled = X[np.random.default_rng(100 + seed).permutation(len(y))]
        tau_broken, _ = held_out_quality(shuffled, y, seed)
        assert tau_broken < TAU_FLOOR / 2, (seed, tau_broken)


def test_regression_loss_ranks_too():
    X, y = load("matmul_a.json", "curve")
    tau, _ = held_out_quality(X, y, 0, loss="reg")
    assert tau > TAU_FLOOR


def test_curve_features_carry_over_to_another_shape():
    """Trained on one conv2d shape, the model still orders another shape's configs."""
    X_a, y_a = load("conv2d_a.json", "curve")
    X_b, y_b = load("conv2d_b.json", "curve")
    model = BootstrapXGBModel(n_models=3, seed=0).fit(X_a, y_a)
    mean, _ = model.predict(X_b)
    assert kendall_tau(mean, y_b) > 0.3
