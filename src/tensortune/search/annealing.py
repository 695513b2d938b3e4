"""Parallel simulated annealing over a discrete knob space, as in AutoTVM's model-guided search.

A config is a row of ints, the index of the chosen value for each knob; a space is the number
of choices per knob. Many chains walk the space at once, each step proposing one-knob changes
for every chain and scoring the whole batch with one call to the (cost-model) score function.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class AnnealResult:
    """What `anneal` found.

    Attributes:
        configs: The best distinct configs seen, not excluded, best first, shape (k, m).
        scores: Their scores, shape (k,), non-increasing.
        states: Final chain states, shape (n_chains, m): pass them back as the next round's
            ``start`` to keep the chains where they were, as the paper does.
        steps: Annealing steps run (fewer than ``n_steps`` when stopped early).
        n_scored: Total rows passed to the score function, start states included.
    """

    configs: np.ndarray
    scores: np.ndarray
    states: np.ndarray
    steps: int
    n_scored: int


def random_configs(space: Sequence[int], n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw configs uniformly from the space.

    Args:
        space: Number of choices per knob (each at least 1).
        n: How many configs to draw.
        rng: Source of randomness.

    Returns:
        An int64 array of shape (n, len(space)); duplicates are possible.
    """
    sizes = _sizes(space)
    return rng.integers(0, sizes, size=(n, len(sizes)), dtype=np.int64)


def unseen_random_configs(
    space: Sequence[int],
    n: int,
    rng: np.random.Generator,
    taken: Collection[tuple[int, ...]],
    per_round: int,
    max_rounds: int,
) -> np.ndarray:
    """Up to `n` distinct configs drawn uniformly from the space and not in `taken`, in the
    order drawn; fewer only when `max_rounds` rounds of `per_round` draws found no more (a
    crowded space).

    Args:
        space: Number of choices per knob (each at least 1).
        n: How many configs to find.
        rng: Source of randomness; each round draws `per_round` configs at once
            (`random_configs`), so a seed gives the same configs whatever the caller keeps.
        taken: Configs (tuples of indices) never to return.
        per_round: Configs drawn per round.
        max_rounds: Rounds drawn at most before giving up.

    Returns:
        An int64 array of shape (k, len(space)), k <= n.
    """
    avoid = set(taken)
    out: list[tuple[int, ...]] = []
    for _ in range(max_rounds):
        for row in random_configs(space, per_round, rng).tolist():
            key = tuple(row)
            if key not in avoid:
                avoid.add(key)
                out.append(key)
                if len(out) == n:
                    return np.asarray(out, dtype=np.int64)
    return np.asarray(out, dtype=np.int64).reshape(-1, len(space))


def mutate(configs: np.ndarray, space: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Change one knob of every config to a different value.

    The knob is drawn uniformly among knobs with more than one choice, the new value uniformly
    among that knob's other values. In a space where no knob has two choices there is nothing
    to change and a copy comes back.

    Args:
        configs: Configs, shape (n, m), values within the space.
        space: Number of choices per knob.
        rng: Source of randomness.

    Returns:
        New int64 configs, shape (n, m); the input is left alone.
    """
    sizes = _sizes(space)
    out = np.array(configs, dtype=np.int64, copy=True).reshape(-1, len(sizes))
    mutable = np.flatnonzero(sizes > 1)
    if len(out) == 0 or len(mutable) == 0:
        return out
    rows = np.arange(len(out))
    knobs = mutable[rng.integers(0, len(mutable), size=len(out))]
    # An offset in [1, size) modulo size lands on every other value with equal probability.
    offsets = rng.integers(1, sizes[knobs])
    out[rows, knobs] = (out[rows, knobs] + offsets) % sizes[knobs]
    return out


def anneal(
    space: Sequence[int],
    score: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    rng: np.random.Generator,
    *,
    n_steps: int = 200,
    n_keep: int = 64,
    exclude: Collection[tuple[int, ...]] = (),
    temperature: tuple[float, float] = (1.0, 0.0),
    early_stop: int = 40,
) -> AnnealResult:
    """Run parallel simulated annealing and keep the best configs it meets.

    Each step mutates every chain (`mutate`), scores all proposals in one call, and accepts a
    proposal with probability ``exp(min(0, (new - old) / (T * scale)))``. ``T`` falls linearly
    from ``temperature[0]`` at the first step to ``temperature[1]`` at the last; ``scale`` is
    the standard deviation of the step's current and proposed scores together (1 when they are
    all equal), which makes the schedule independent of the score's units, so one schedule
    serves a rank model's margins and expected improvements alike. At ``T == 0`` only
    non-worsening moves are taken. Scores of NaN or -inf mark configs to avoid: a chain never
    moves onto one from a finite score, and they never enter the result.

    Args:
        space: Number of choices per knob.
        score: Maps configs of shape (n, m) to n scores, higher is better. Called once for the
            start states and once per step on the whole proposal batch, which may repeat
            configs: the caller caches per-config work.
        start: Chain states, shape (n_chains, m); the number of chains is its length.
        rng: Source of randomness for proposals and acceptance.
        n_steps: Most annealing steps (default 200; AutoTVM runs 500, but with ``early_stop``
            the search usually settles well before).
        n_keep: Size of the kept top set (default 64): several times a measurement batch, so
            the caller can still pick a diverse batch among them.
        exclude: Configs, as tuples of ints, never to return, e.g. ones already measured
            (default none). Chains may still pass through them.
        temperature: Start and end temperature in units of ``scale`` (default (1.0, 0.0)):
            early steps accept a one-standard-deviation loss with probability 1/e, the last
            ones are greedy.
        early_stop: Stop when the top set has not changed for this many consecutive steps
            (default 40, a fifth of the default step budget); 0 or less never stops early.

    Returns:
        An `AnnealResult`.

    Raises:
        ValueError: For a start of the wrong shape or outside the space, a non-positive
            ``n_keep``, or a score function returning the wrong number of scores.
    """
    sizes = _sizes(space)
    states = _check_configs(start, sizes)
    if n_keep < 1:
        raise ValueError(f"n_keep must be positive, got {n_keep}")
    top = _TopSet(n_keep, {tuple(int(v) for v in c) for c in exclude})
    current = _call_score(score, states)
    top.offer(states, current)
    n_scored, steps, stale = len(states), 0, 0
    for step in range(n_steps):
        frac = step / (n_steps - 1) if n_steps > 1 else 1.0
        temp = temperature[0] + (temperature[1] - temperature[0]) * frac
        proposals = mutate(states, space, rng)
        proposed = _call_score(score, proposals)
        n_scored += len(proposals)
        accept = _accept(current, proposed, temp, rng)
        states[accept] = proposals[accept]
        current[accept] = proposed[accept]
        steps += 1
        stale = 0 if top.offer(proposals, proposed) else stale + 1
        if 0 < early_stop <= stale:
            break
    configs, scores = top.ranked(len(sizes))
    return AnnealResult(configs, scores, states, steps, n_scored)


def _accept(
    current: np.ndarray, proposed: np.ndarray, temp: float, rng: np.random.Generator
) -> np.ndarray:
    """Metropolis acceptance mask for one step, with a scale-free temperature."""
    both_bad = np.isneginf(current) & np.isneginf(proposed)
    with np.errstate(invalid="ignore"):
        delta = np.where(both_bad, 0.0, proposed - current)
    scores = np.concatenate([current, proposed])
    finite = scores[np.isfinite(scores)]
    scale = float(finite.std()) if len(finite) > 1 else 0.0
    scale = scale if scale > 0 else 1.0
    if temp <= 0:
        return delta >= 0
    with np.errstate(over="ignore"):
        prob = np.exp(np.minimum(delta, 0.0) / (temp * scale))
    return rng.random(len(delta)) < prob


class _TopSet:
    """The best ``n_keep`` distinct, non-excluded configs seen, with their scores."""

    def __init__(self, n_keep: int, exclude: set[tuple[int, ...]]) -> None:
        self.n_keep = n_keep
        self.exclude = exclude
        self.scores: dict[tuple[int, ...], float] = {}

    def threshold(self) -> float:
        """The score a new config must beat to enter."""
        return -np.inf if len(self.scores) < self.n_keep else min(self.scores.values())

    def offer(self, configs: np.ndarray, scores: np.ndarray) -> bool:
        """Add what beats the threshold; True if the set changed."""
        # A vectorized pre-filter: late in a run almost no proposal beats the threshold.
        candidates = np.flatnonzero(np.isfinite(scores) & (scores > self.threshold()))
        changed = False
        for i in candidates[np.argsort(-scores[candidates], kind="stable")]:
            key = tuple(configs[i].tolist())
            if key in self.exclude or key in self.scores:
                continue
            if scores[i] <= self.threshold():
                break  # sorted descending: nothing further can enter
            self.scores[key] = float(scores[i])
            if len(self.scores) > self.n_keep:
                del self.scores[min(self.scores, key=self.scores.__getitem__)]
            changed = True
        return changed

    def ranked(self, n_knobs: int) -> tuple[np.ndarray, np.ndarray]:
        """Configs (k, n_knobs) and scores (k,), best first."""
        items = sorted(self.scores.items(), key=lambda kv: -kv[1])
        configs = np.array([k for k, _ in items], dtype=np.int64).reshape(-1, n_knobs)
        return configs, np.array([v for _, v in items], dtype=np.float64)


def _call_score(score: Callable[[np.ndarray], np.ndarray], configs: np.ndarray) -> np.ndarray:
    """Score a batch, checking the shape and mapping NaN to -inf (a config to avoid)."""
    out = np.asarray(score(configs), dtype=np.float64).reshape(-1)
    if len(out) != len(configs):
        raise ValueError(f"score returned {len(out)} values for {len(configs)} configs")
    return np.where(np.isnan(out), -np.inf, out)


def _sizes(space: Sequence[int]) -> np.ndarray:
    sizes = np.asarray(space, dtype=np.int64).reshape(-1)
    if np.any(sizes < 1):
        raise ValueError(f"every knob needs at least one choice, got space {list(space)}")
    return sizes


def _check_configs(configs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """A writable int64 copy of configs after checking shape and range."""
    out = np.array(configs, dtype=np.int64, copy=True)
    if out.ndim != 2 or out.shape[1] != len(sizes):
        raise ValueError(f"configs must have shape (n, {len(sizes)}), got {out.shape}")
    if np.any(out < 0) or np.any(out >= sizes):
        raise ValueError("configs hold values outside the space")
    return out
