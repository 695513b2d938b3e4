"""How well a cost model orders configs it has not seen: the numbers a search depends on."""

from __future__ import annotations

import numpy as np


def kendall_tau(scores: np.ndarray, truth: np.ndarray) -> float:
    """Kendall's tau-b between predicted scores and true values (1: same order)."""
    from scipy.stats import kendalltau

    return float(kendalltau(scores, truth).statistic)


def top_k_recall(scores: np.ndarray, truth: np.ndarray, fraction: float = 0.1) -> float:
    """Share of the truly best ``fraction`` of configs that the scores also put in their best
    ``fraction`` (default 0.1: a search measures only the top of what the model proposes)."""
    k = max(1, round(fraction * len(truth)))
    best = set(np.argsort(-truth, kind="stable")[:k].tolist())
    picked = set(np.argsort(-scores, kind="stable")[:k].tolist())
    return len(best & picked) / k
