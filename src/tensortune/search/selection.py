"""Choosing which candidates to measure: a diverse batch plus a small random share.

AutoTVM does not measure the model's top-b configs as they come: those tend to be near copies
of each other, so one batch teaches the model little. It picks the batch greedily under a
submodular objective that rewards covering many distinct knob values, and swaps a small share
of the batch for random configs (ε-greedy) so the model keeps seeing the whole space.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from tensortune.search.annealing import unseen_random_configs

#: Rounds of random draws `with_random_share` makes before giving up on a crowded space.
_DRAW_ROUNDS = 32


def diverse_greedy(
    candidates: np.ndarray,
    scores: np.ndarray,
    b: int,
    alpha: float | None = None,
    taken: np.ndarray | None = None,
) -> np.ndarray:
    """Pick ``b`` candidates maximizing score plus knob-value coverage, greedily.

    The objective is the paper's ``L(S) = sum_{s in S} r(s) + alpha * sum_j |V_j(S)|``, where
    ``V_j(S)`` is the set of values knob j takes among S and the rows of ``taken``, and ``r``
    is the score rank-normalized to [0, 1] (average rank of ties, best = 1), so that alpha
    means the same for every model and acquisition function whatever their units. L is
    monotone submodular, so adding at each step the candidate with the largest gain is within
    ``1 - 1/e`` of the optimum.

    Args:
        candidates: Configs, shape (n, m), non-negative ints.
        scores: Their scores, shape (n,), higher is better.
        b: Batch size; ``min(b, n)`` indices come back.
        alpha: Gain per knob value not yet covered (default None, meaning ``0.5 / m``): a
            candidate new on every knob gains 0.5, half the whole rank range, so novelty can
            lift a median candidate over a redundant top one but never a bottom one over a
            novel top one. 0 gives the plain top-b.
        taken: Configs already in this batch or measured (shape (t, m), default none): the
            values they hold count as covered, so they earn no bonus.

    Returns:
        Indices into candidates (int64), in the order picked: best first.

    Raises:
        ValueError: For mismatched shapes, negative values, or a negative alpha.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if candidates.ndim != 2 or scores.shape != (len(candidates),):
        raise ValueError(
            f"candidates must be (n, m) and scores (n,), got {candidates.shape} and {scores.shape}"
        )
    n, m = candidates.shape
    alpha = 0.5 / max(m, 1) if alpha is None else alpha
    if alpha < 0:
        raise ValueError(f"alpha must be non-negative, got {alpha}")
    taken = np.empty((0, m), np.int64) if taken is None else np.asarray(taken, np.int64)
    if taken.ndim != 2 or taken.shape[1] != m or np.any(candidates < 0) or np.any(taken < 0):
        raise ValueError("candidates and taken must be non-negative ints with the same m")
    covered = _coverage(candidates, taken)
    gains = _rank01(scores)
    picked: list[int] = []
    knobs = np.arange(m)
    available = np.ones(n, dtype=bool)
    for _ in range(min(b, n)):
        novelty = (~covered[knobs, candidates]).sum(axis=1)
        total = np.where(available, gains + alpha * novelty, -np.inf)
        best = int(np.argmax(total))
        picked.append(best)
        available[best] = False
        covered[knobs, candidates[best]] = True
    return np.array(picked, dtype=np.int64)


def with_random_share(
    selected: np.ndarray,
    space: Sequence[int],
    rng: np.random.Generator,
    *,
    epsilon: float = 0.05,
    exclude: Collection[tuple[int, ...]] = (),
) -> np.ndarray:
    """Swap the lowest-ranked share of a batch for uniformly random configs (ε-greedy).

    The number swapped is ``floor(epsilon * b + u)`` with ``u ~ U(0, 1)`` drawn from rng, so
    its expectation is exactly ``epsilon * b`` for any batch size b: rounding would give a
    batch of 8 at ε = 0.05 no random config ever, and a floor of one would give it 12.5%.
    The swapped rows are the last ones, since the selection is best first. Random configs are
    distinct, not in ``exclude`` and not in ``selected``; in a space too crowded to find
    enough of them, fewer rows are swapped and the rest keep their selected configs.

    Args:
        selected: The batch, shape (b, m), best first.
        space: Number of choices per knob.
        rng: Source of randomness for the count and the configs.
        epsilon: Expected share of random configs, in [0, 1] (default 0.05, AutoTVM's
            ε-greedy share: enough to keep sampling the whole space at little cost).
        exclude: Configs, as tuples of ints, never to draw, e.g. already measured ones.

    Returns:
        A new (b, m) int64 array.

    Raises:
        ValueError: For epsilon outside [0, 1] or a batch that does not match the space.
    """
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    out = np.array(selected, dtype=np.int64, copy=True)
    if out.ndim != 2 or out.shape[1] != len(space):
        raise ValueError(f"selected must have shape (b, {len(space)}), got {out.shape}")
    b = len(out)
    n_random = min(b, int(np.floor(epsilon * b + rng.random())))
    if n_random == 0:
        return out
    banned = {tuple(int(v) for v in c) for c in exclude}
    banned.update(tuple(row) for row in out.tolist())
    fresh = unseen_random_configs(space, n_random, rng, banned, 2 * n_random, _DRAW_ROUNDS)
    if len(fresh):
        out[b - len(fresh) :] = fresh
    return out


def _coverage(candidates: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """Boolean (m, n_values) table: True where knob j's value v is already covered."""
    rows = np.concatenate([candidates, taken])
    n_values = int(rows.max()) + 1 if rows.size else 1
    covered = np.zeros((candidates.shape[1], n_values), dtype=bool)
    covered[np.broadcast_to(np.arange(taken.shape[1]), taken.shape), taken] = True
    return covered


def _rank01(scores: np.ndarray) -> np.ndarray:
    """Average ranks scaled to [0, 1], best = 1 (a lone score gets 1, NaN ranks lowest)."""
    from scipy.stats import rankdata

    scores = np.where(np.isnan(scores), -np.inf, scores)
    if len(scores) < 2:
        return np.ones(len(scores))
    return (rankdata(scores, method="average") - 1.0) / (len(scores) - 1.0)
