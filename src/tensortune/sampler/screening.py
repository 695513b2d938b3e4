"""A knob-feature pre-screen for rounds whose program features are lowered through TVM.

Lowering a config for program features takes milliseconds; its knob features
(`tensortune.features.knob_features`) take microseconds. A study that scores lowered features
(a warm start's ``"curve"``, the TreeGRU's loop trees) spent most of its wall time lowering the
candidates of its searches: a warm C12 → C7 study 89 s of 130 (3720 candidates in 48 trials,
``studies/results/transfer-5seeds-128/sampler_profile.txt``). The screen learns, from the
configs lowered in the study's earlier rounds, to order configs by their knob features as the
round's model orders them by their program features, and each search step then lowers only the
best `Screen.share` of its candidates. What the sources taught the model carries over, since the
screen learns the model's scores, not the measurements.

Plain functions: the sampler keeps the pool of lowered configs, the round fits the screen.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from tensortune.cost_model import make_cost_model

#: Maps ``(n, m)`` knob indices to ``(n, d)`` rows (here: knob features, no TVM).
Rows = Callable[[np.ndarray], np.ndarray]
#: Maps ``(n, m)`` knob indices to ``n`` scores, higher is better, -inf: never keep.
Score = Callable[[np.ndarray], np.ndarray]

#: Fewest lowered configs with a finite score before a screen is fit: with fewer, a round
#: lowers every candidate (a study's first model round, or a new process's).
MIN_POOL = 256
#: Lowered configs the sampler keeps for the screen to learn from, the latest ones: about
#: three rounds' candidates, so the screen follows where the search is now.
POOL_SIZE = 4096
#: Fewest candidates of one call that are lowered: a small call (the seeds, a crowded
#: explore step) costs little, and screening it would only add the screen's errors.
MIN_LOWERED = 32


@dataclasses.dataclass(frozen=True)
class Screen:
    """What a round needs to screen its candidates.

    Attributes:
        rows: The cheap featurizer (knob indices → knob-feature rows).
        pool: ``(n, m)`` configs lowered in earlier rounds (their program features cached).
        share: Share of each search step's candidates to lower, in (0, 1].
    """

    rows: Rows
    pool: np.ndarray
    share: float


def fit_screen(screen: Screen, score: Score, seed: int) -> Score | None:
    """A model of `score` over knob features, fit on `screen.pool` (``score`` of the pool costs
    no lowering: its rows are cached), as a function of configs. None when the pool has fewer
    than `MIN_POOL` configs with a finite score, or they all score alike (nothing to learn)."""
    pool = screen.pool
    if len(pool) < MIN_POOL:
        return None
    target = score(pool)
    finite = np.isfinite(target)
    if finite.sum() < MIN_POOL or np.ptp(target[finite]) == 0:
        return None
    # One member: the screen only orders candidates; pairwise rank loss learns the order.
    model = make_cost_model("xgb", "rank", 1, seed)
    model.fit(screen.rows(pool[finite]), target[finite])

    def predict(configs: np.ndarray) -> np.ndarray:
        return model.predict(screen.rows(configs))[0]

    return predict


def screened(score: Score, cheap: Score | None, share: float, lowered: list[np.ndarray]) -> Score:
    """`score` behind the screen `cheap`: of each call's configs, only the best `share` by
    `cheap` (at least `MIN_LOWERED`, or all of a smaller call) are scored by `score`; the rest
    score -inf, so that a search never keeps them. No screen (`cheap` None): all are scored.
    The configs scored are appended to `lowered`, for the next rounds' pool."""

    def score_screened(configs: np.ndarray) -> np.ndarray:
        n = len(configs)
        keep = max(math.ceil(share * n), MIN_LOWERED)
        if cheap is None or keep >= n:
            lowered.append(configs)
            return score(configs)
        # Ties broken by position, so a seed gives the same round every run.
        best = np.argsort(-cheap(configs), kind="stable")[:keep]
        out = np.full(n, -np.inf)
        out[best] = score(configs[best])
        lowered.append(configs[best])
        return out

    return score_screened


def recent_pool(pool: np.ndarray, lowered: list[np.ndarray], size: int = POOL_SIZE) -> np.ndarray:
    """`pool` with the `lowered` configs added, each config once, the latest `size` kept
    (default `POOL_SIZE`)."""
    merged = np.vstack([pool, *lowered]) if lowered else pool
    if not len(merged):
        return merged
    # Keep each config's last occurrence: reversed, np.unique's first index is the last one.
    _, first = np.unique(merged[::-1], axis=0, return_index=True)
    latest = np.sort(len(merged) - 1 - first)
    return merged[latest[-size:]]
