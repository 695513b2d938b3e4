"""How well a cost model orders configs it has not seen: the numbers a search depends on."""

from __future__ import annotations

import numpy as np


def kendall_tau(scores: np.ndarray, truth: np.ndarray) -> float:
    """Kendall's tau-b between predicted scores and true values (1: same order)."""
    from scipy.stats import kendalltau

    return float(kendalltau(scores, truth).statistic)


def top_weighted_tau(scores: np.ndarray, truth: np.ndarray) -> float:
    """Kendall's tau with each pair weighed by how near the top its configs rank (scipy's
    `weightedtau`, hyperbolic weights ``1 / (rank + 1)``, averaged over the ranking by the
    scores and the one by the true values): 1 where the best configs are ordered as measured,
    whatever happens among the poor ones. A search only acts on the top of a ranking."""
    from scipy.stats import weightedtau

    return float(weightedtau(scores, truth).statistic)


def top_k_recall(scores: np.ndarray, truth: np.ndarray, fraction: float = 0.1) -> float:
    """Share of the truly best ``fraction`` of configs that the scores also put in their best
    ``fraction`` (default 0.1: a search measures only the top of what the model proposes)."""
    k = max(1, round(fraction * len(truth)))
    best = set(np.argsort(-truth, kind="stable")[:k].tolist())
    picked = set(np.argsort(-scores, kind="stable")[:k].tolist())
    return len(best & picked) / k
