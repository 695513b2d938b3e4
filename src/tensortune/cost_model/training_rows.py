"""Training rows shared by the cost models: checks, the row cap and grouped bootstraps."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class TrainingSet:
    """Checked, capped training rows and what a model predicts when it cannot learn.

    Attributes:
        X, y, groups, weight: The rows kept by `cap_rows`.
        constant: The prediction without a model: 0 for the rank loss, the weighted mean of y
            for the regression loss.
        learnable: Whether there is an order to learn (two rows or more, and y varying: for
            the rank loss, within some group).
    """

    X: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    weight: np.ndarray
    constant: float
    learnable: bool


def training_set(
    X: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray | None,
    sample_weight: np.ndarray | None,
    loss: str,
    max_train: int,
    rng: np.random.Generator,
) -> TrainingSet:
    """The rows a cost model's `fit` trains on, checked (`check_xy`, `check_groups`) and
    capped at `max_train` (`cap_rows`, sampled with `rng`)."""
    X, y = check_xy(X, y)
    groups, weight = check_groups(groups, sample_weight, len(y), loss)
    rows = cap_rows(y, max_train, rng)
    X, y, groups, weight = X[rows], y[rows], groups[rows], weight[rows]
    constant = float(np.average(y, weights=weight)) if loss == "reg" and len(y) else 0.0
    varies = np.ptp(y) > 0 if loss == "reg" else varies_within_a_group(y, groups)
    return TrainingSet(X, y, groups, weight, constant, bool(len(y) >= 2 and varies))


def cap_rows(y: np.ndarray, max_train: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of at most ``max_train`` training rows, favouring the best configs.

    The cost model matters most near the top, so all of the best ``max_train // 4`` rows (by
    y, ties broken by position) are kept and the rest of the budget is a uniform random sample
    of the other rows. Below the cap every row is kept.

    Args:
        y: Targets, higher is better, shape (n,).
        max_train: The most rows to keep (positive).
        rng: Source of the random sample.

    Returns:
        Sorted row indices into y.
    """
    n = len(y)
    if n <= max_train:
        return np.arange(n)
    order = np.argsort(-y, kind="stable")
    n_best = max_train // 4
    rest = rng.choice(order[n_best:], size=max_train - n_best, replace=False)
    return np.sort(np.concatenate([order[:n_best], rest]))


def check_groups(
    groups: np.ndarray | None, weight: np.ndarray | None, n: int, loss: str
) -> tuple[np.ndarray, np.ndarray]:
    groups = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups)
    weight = np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)
    if groups.shape != (n,) or weight.shape != (n,):
        raise ValueError(f"groups and sample_weight must have shape ({n},) like y")
    if not np.issubdtype(groups.dtype, np.integer):
        raise ValueError(f"groups must be integer ids, got dtype {groups.dtype}")
    if not (np.all(np.isfinite(weight)) and np.all(weight > 0)):
        raise ValueError("sample_weight must be finite and positive")
    if loss == "rank":
        for g in np.unique(groups):
            if np.ptp(weight[groups == g]) > 0:
                raise ValueError(f"with the rank loss, weights must be equal within group {g}")
    return groups.astype(np.int64), weight


def varies_within_a_group(y: np.ndarray, groups: np.ndarray) -> bool:
    return any(np.ptp(y[groups == g]) > 0 for g in np.unique(groups))


def grouped_rows(groups: np.ndarray, resample: bool, rng: np.random.Generator) -> np.ndarray:
    """Row indices with each group's rows together; with `resample`, a bootstrap drawn within
    each group, so every workload keeps its share of the rows."""
    parts = []
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        if resample:
            members = members[rng.integers(0, len(members), size=len(members))]
        parts.append(members)
    return np.concatenate(parts) if parts else np.arange(0)


def check_xy(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y):
        raise ValueError(f"X must have shape (n, d) and y (n,), got {X.shape} and {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite: give failed configs a score of 0")
    return X, y
