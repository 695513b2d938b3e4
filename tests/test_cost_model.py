"""Cost model: the bootstrap XGBoost ensemble learns a synthetic order, reports a spread that
grows away from its data, is reproducible, caps its training set; acquisition formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from tensortune.cost_model import (
    ACQUISITIONS,
    BootstrapXGBModel,
    acquire,
    expected_improvement,
    upper_confidence_bound,
)
from tensortune.cost_model.training_rows import cap_rows

TAU_FLOOR = 0.6
# The models below train on one thread: OpenMP workers spin-wait, and on a small machine busy
# with other work two threads made one test take 30 s instead of 1 s.


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8 features in [0, 1), a nonlinear target with interactions scaled to [0, 1]."""
    X = np.random.default_rng(seed).random((n, 8))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + 2 * (X[:, 3] - 0.5) ** 2
    return X, (y - y.min()) / np.ptp(y)


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    X, y = synthetic(600, seed=0)
    return {"X": X[:300], "y": y[:300], "X_test": X[300:], "y_test": y[300:]}


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_learns_order_that_shuffled_labels_cannot(data, loss):
    model = BootstrapXGBModel(loss=loss, seed=1, n_threads=1).fit(data["X"], data["y"])
    mean, _ = model.predict(data["X_test"])
    tau = kendalltau(mean, data["y_test"]).statistic
    shuffled_y = np.random.default_rng(2).permutation(data["y"])
    shuffled = BootstrapXGBModel(loss=loss, seed=1, n_threads=1).fit(data["X"], shuffled_y)
    tau_shuffled = kendalltau(shuffled.predict(data["X_test"])[0], data["y_test"]).statistic
    assert tau > TAU_FLOOR
    assert tau_shuffled < TAU_FLOOR
    assert model.n_train_ == 300
    assert model.fit_seconds_ > 0


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_spread_is_larger_away_from_training_data(data, loss):
    model = BootstrapXGBModel(loss=loss, seed=3, n_threads=1).fit(data["X"], data["y"])
    far = np.random.default_rng(4).random((300, 8))
    far[:, :4] += 1.5  # outside [0, 1) on every feature the target depends on
    _, std_train = model.predict(data["X"])
    _, std_far = model.predict(far)
    assert np.all(std_train >= 0)
    assert std_train.mean() > 0
    assert std_far.mean() > std_train.mean()


def test_single_member_has_no_spread(data):
    model = BootstrapXGBModel(n_models=1, n_threads=1).fit(data["X"], data["y"])
    _, std = model.predict(data["X_test"])
    assert np.all(std == 0)


def test_same_seed_same_predictions_other_seed_differs(data):
    def predict(seed: int) -> np.ndarray:
        model = BootstrapXGBModel(n_models=3, num_boost_round=20, seed=seed, n_threads=1)
        return model.fit(data["X"], data["y"]).predict(data["X_test"])[0]

    np.testing.assert_array_equal(predict(7), predict(7))
    assert not np.allclose(predict(7), predict(8))


def test_max_train_caps_training_rows_and_keeps_the_best(data):
    model = BootstrapXGBModel(n_models=2, num_boost_round=5, max_train=100, n_threads=1)
    assert model.fit(data["X"], data["y"]).n_train_ == 100
    rows = cap_rows(data["y"], 100, np.random.default_rng(0))
    assert len(np.unique(rows)) == 100
    best_25 = np.argsort(-data["y"])[:25]
    assert set(best_25) <= set(rows)
    np.testing.assert_array_equal(
        cap_rows(data["y"][:50], 100, np.random.default_rng(0)), range(50)
    )


@pytest.mark.parametrize("y", [np.full(20, 0.3), np.array([0.7])])
def test_degenerate_targets_predict_constant(y):
    X = np.random.default_rng(0).random((len(y), 3))
    mean, std = BootstrapXGBModel().fit(X, y).predict(X)
    np.testing.assert_array_equal(mean, np.zeros(len(y)))
    np.testing.assert_array_equal(std, np.zeros(len(y)))
    mean, _ = BootstrapXGBModel(loss="reg").fit(X, y).predict(X)
    np.testing.assert_allclose(mean, y.mean())


def test_bad_arguments_raise(data):
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        BootstrapXGBModel(loss="hinge").fit(data["X"], data["y"])
    with pytest.raises(ValueError, match="n_models"):
        BootstrapXGBModel(n_models=0).fit(data["X"], data["y"])
    with pytest.raises(ValueError, match="shape"):
        BootstrapXGBModel().fit(data["X"], data["y"][:10])
    with pytest.raises(ValueError, match="finite"):
        BootstrapXGBModel().fit(data["X"][:2], np.array([0.1, np.nan]))
    with pytest.raises(RuntimeError, match="before fit"):
        BootstrapXGBModel().predict(data["X"])
    model = BootstrapXGBModel(n_models=1, num_boost_round=2, n_threads=1).fit(data["X"], data["y"])
    with pytest.raises(ValueError, match="shape"):
        model.predict(data["X"][:, :5])


def normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_expected_improvement_matches_hand_computation():
    # mean 1, std 1, best 0.5: z = 0.5, EI = 0.5 * Phi(0.5) + phi(0.5)
    want = 0.5 * normal_cdf(0.5) + math.exp(-0.125) / math.sqrt(2 * math.pi)
    assert want == pytest.approx(0.697797, abs=1e-6)
    got = expected_improvement(np.array([1.0]), np.array([1.0]), best=0.5)
    assert got[0] == pytest.approx(want, rel=1e-12)
    # xi = 0.5 makes z = 0: EI = std * phi(0)
    got = expected_improvement(np.array([1.0]), np.array([2.0]), best=0.5, xi=0.5)
    assert got[0] == pytest.approx(2 / math.sqrt(2 * math.pi), rel=1e-12)
    # zero spread: the improvement itself, never negative
    got = expected_improvement(np.array([2.0, 0.0, 1.0]), np.zeros(3), best=1.0, xi=0.25)
    np.testing.assert_allclose(got, [0.75, 0.0, 0.0])
    # far below the incumbent with some spread: tiny but positive
    assert 0 < expected_improvement(np.array([-5.0]), np.array([1.0]), best=0.0)[0] < 1e-6


def test_upper_confidence_bound_and_dispatch():
    mean, std = np.array([1.0, 2.0]), np.array([0.5, 0.0])
    np.testing.assert_allclose(upper_confidence_bound(mean, std), [1.5, 2.0])
    np.testing.assert_allclose(upper_confidence_bound(mean, std, kappa=2.0), [2.0, 2.0])
    assert ACQUISITIONS == ("mean", "ei", "ucb")
    np.testing.assert_allclose(acquire("mean", mean, std, best=9.0), mean)
    np.testing.assert_allclose(acquire("ucb", mean, std, best=9.0, kappa=2.0), [2.0, 2.0])
    np.testing.assert_allclose(
        acquire("ei", mean, std, best=1.5), expected_improvement(mean, std, best=1.5)
    )
    with pytest.raises(ValueError, match=r"unknown acquisition 'pi'.*mean, ei, ucb"):
        acquire("pi", mean, std, best=0.0)


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_group_weights_decide_between_conflicting_workloads(data, loss):
    # Two workloads that order the same configs in opposite ways: the weighted one wins.
    X = np.vstack([data["X"], data["X"]])
    y = np.concatenate([data["y"], 1 - data["y"]])
    groups = np.repeat([0, 1], len(data["y"]))
    taus = []
    for first, second in ((1.0, 0.02), (0.02, 1.0)):
        weight = np.repeat([first, second], len(data["y"]))
        model = BootstrapXGBModel(loss=loss, seed=0, n_threads=1)
        model.fit(X, y, groups=groups, sample_weight=weight)
        taus.append(kendalltau(model.predict(data["X_test"])[0], data["y_test"]).statistic)
    assert taus[0] > TAU_FLOOR and taus[1] < -TAU_FLOOR, taus


def test_bad_groups_and_weights_raise(data):
    X, y = data["X"][:10], data["y"][:10]
    with pytest.raises(ValueError, match="equal within group"):
        BootstrapXGBModel().fit(X, y, groups=np.zeros(10, int), sample_weight=np.arange(1, 11))
    with pytest.raises(ValueError, match="integer ids"):
        BootstrapXGBModel().fit(X, y, groups=np.zeros(10))
    with pytest.raises(ValueError, match="positive"):
        BootstrapXGBModel().fit(X, y, sample_weight=np.zeros(10))
    with pytest.raises(ValueError, match="shape"):
        BootstrapXGBModel().fit(X, y, groups=np.zeros(3, int))
