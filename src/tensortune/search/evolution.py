"""Evolutionary search over a discrete knob space, at MetaSchedule's scale.

Annealing moves one knob per step from a few dozen chains; with a cheap score (knob features,
`tensortune.features.knob`) a round can afford to score ten thousand configs and look far from
the measured ones. `evolve` starts from a large pool of space-filling points plus the measured
best and their multi-knob mutants, keeps a population of the best scored, and breeds it for a
few generations with uniform crossover between good configs and multi-knob mutations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from tensortune.search.annealing import _call_score, _check_configs, _sizes, _TopSet


@dataclass
class EvolveResult:
    """What `evolve` found.

    Attributes:
        configs: The best distinct configs scored, not excluded, best first, shape (k, m).
        scores: Their scores, shape (k,), non-increasing.
        population: The last generation's population, best first, shape (p, m).
        n_scored: Rows passed to the score function in all.
    """

    configs: np.ndarray
    scores: np.ndarray
    population: np.ndarray
    n_scored: int


def space_filling(space: Sequence[int], n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` configs spread over the space: a scrambled Sobol sequence (seeded from `rng`) mapped
    to choice indices, so that every knob's values are covered evenly even in small samples.

    Returns:
        An int64 array of shape (n, len(space)); duplicates are possible in small spaces.
    """
    from scipy.stats import qmc

    sizes = _sizes(space)
    if n <= 0:
        return np.empty((0, len(sizes)), np.int64)
    sobol = qmc.Sobol(len(sizes), scramble=True, seed=int(rng.integers(2**31)))
    # Sobol's balance holds for powers of two: draw the next one up and keep the first n.
    points = sobol.random(1 << max(0, (n - 1).bit_length()))[:n]
    return np.minimum((points * sizes).astype(np.int64), sizes - 1)


def mutate_many(
    configs: np.ndarray, space: Sequence[int], rng: np.random.Generator, rate: float
) -> np.ndarray:
    """Change each knob of each config with probability `rate`, and at least one knob of every
    config, each changed knob to one of its other values uniformly."""
    sizes = _sizes(space)
    out = np.array(configs, dtype=np.int64, copy=True).reshape(-1, len(sizes))
    mutable = sizes > 1
    if not len(out) or not mutable.any():
        return out
    change = (rng.random(out.shape) < rate) & mutable
    forced = np.flatnonzero(mutable)[rng.integers(0, mutable.sum(), size=len(out))]
    change[np.arange(len(out)), forced] = True
    offsets = rng.integers(1, np.maximum(sizes, 2), size=out.shape)
    out[change] = ((out + offsets) % sizes)[change]
    return out


def far_from(configs: np.ndarray, reference: np.ndarray, distance: int) -> np.ndarray:
    """True for each config that differs from every row of `reference` in at least `distance`
    knobs (Hamming distance over choice indices); all True for an empty `reference` or a
    `distance` of 0.

    Args:
        configs: Configs to test, shape (n, m).
        reference: Configs to keep away from, shape (r, m), e.g. the measured ones.
        distance: Knobs that must differ from the nearest reference config.

    Returns:
        A bool array of shape (n,).
    """
    configs = np.asarray(configs, dtype=np.int64)
    reference = np.asarray(reference, dtype=np.int64).reshape(-1, configs.shape[1])
    if distance <= 0 or not len(reference) or not len(configs):
        return np.ones(len(configs), dtype=bool)
    m = configs.shape[1]
    if distance > m:  # no config differs in more knobs than there are
        return np.zeros(len(configs), dtype=bool)
    n_masks = math.comb(m, distance - 1)
    # Pairwise comparison costs n*r*m; the masked keys about (n+r)*masks*log(r). With a
    # history of 1000 the keys are ~10x faster; with a few dozen configs pairs are cheaper.
    if n_masks <= _MAX_MASKS and n_masks * 16 < len(reference) * m:
        keys = _masked_keys(configs, reference, distance - 1)
        if keys is not None:
            return ~_any_key_shared(*keys)
    return _far_by_pairs(configs, reference, distance)


#: Most knob subsets `far_from` hashes before it compares configs pair by pair instead.
_MAX_MASKS = 512


def _far_by_pairs(configs: np.ndarray, reference: np.ndarray, distance: int) -> np.ndarray:
    """`far_from` by comparing every config with every reference row."""
    out = np.ones(len(configs), dtype=bool)
    # Compare in blocks of about 4M knob pairs, so that 10^4 configs against a history of
    # thousands stay within tens of MB.
    block = max(1, (1 << 22) // reference.size)
    for start in range(0, len(configs), block):
        rows = configs[start : start + block]
        differing = (rows[:, None, :] != reference[None, :, :]).sum(axis=2)
        out[start : start + block] = differing.min(axis=1) >= distance
    return out


def _masked_keys(
    configs: np.ndarray, reference: np.ndarray, n_masked: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per subset of `n_masked` knobs, every config's and reference row's other knobs as one
    mixed-radix number, shapes (n, masks) and (r, masks); None where the numbers would not be
    exact in float64 (a space of more than 2^52 configs).

    Two configs are within `n_masked` knobs of each other exactly when, for some subset of
    `n_masked` knobs, they agree on all the other knobs: when they share a key in one column.
    """
    m = configs.shape[1]
    base = np.maximum(configs.max(axis=0), reference.max(axis=0)) + 1
    if np.log2(base.astype(np.float64)).sum() >= 52:
        return None
    place = np.concatenate([[1.0], np.cumprod(base[:-1].astype(np.float64))])
    masks = list(itertools.combinations(range(m), n_masked))
    weights = np.repeat(place[:, None], len(masks), axis=1)
    for column, masked in enumerate(masks):
        weights[list(masked), column] = 0.0
    # float64 products of integers below 2^52 are exact, and BLAS computes them fast.
    return configs.astype(np.float64) @ weights, reference.astype(np.float64) @ weights


def _any_key_shared(keys: np.ndarray, reference_keys: np.ndarray) -> np.ndarray:
    """True for each row of `keys` that equals, in some column, a reference key of that
    column."""
    shared = np.zeros(len(keys), dtype=bool)
    for column in range(keys.shape[1]):
        known = np.sort(reference_keys[:, column])
        at = np.minimum(np.searchsorted(known, keys[:, column]), len(known) - 1)
        shared |= known[at] == keys[:, column]
    return shared


def evolve(
    space: Sequence[int],
    score: Callable[[np.ndarray], np.ndarray],
    seeds: np.ndarray,
    rng: np.random.Generator,
    *,
    population: int = 512,
    generations: int = 4,
    n_fresh: int = 4096,
    children: int = 1536,
    n_keep: int = 64,
    exclude: Collection[tuple[int, ...]] = (),
    mutation_rate: float | None = None,
    crossover: float = 0.5,
) -> EvolveResult:
    """Breed configs with high scores; keep the best distinct ones never excluded.

    Generation 0 scores `seeds` (e.g. the measured best), two multi-knob mutants of each, and
    `n_fresh` `space_filling` points, and keeps the best `population` distinct ones. Each
    generation then makes `children` configs: parents are drawn by binary tournament on
    score, a `crossover` share of children take each knob from one of two parents at random,
    and every child is mutated (`mutate_many`). Parents and children together are ranked and
    the best `population` distinct ones go on. So a round scores about
    ``n_fresh + 3 * len(seeds) + generations * children`` configs (10240 with the defaults
    and no seeds).

    Args:
        space: Number of choices per knob.
        score: Maps configs (n, m) to n scores, higher is better; NaN or -inf marks a config
            never to keep. Called once per generation on the whole batch.
        seeds: Configs to breed from, shape (s, m) (may be empty), best first.
        rng: Source of randomness: equal seeds give equal results.
        population: Configs kept between generations (default 512, MetaSchedule's).
        generations: Rounds of breeding (default 4, MetaSchedule's genetic iterations).
        n_fresh: Space-filling points in generation 0 (default 4096): they keep the search
            from being only a refinement of the measured configs.
        children: Configs bred per generation (default 1536).
        n_keep: Size of the returned top set (default 64).
        exclude: Configs, as tuples, never to return (the measured and claimed ones); they may
            still breed.
        mutation_rate: Chance that each knob of a child changes (default None: 1.5 / m, so
            about 1.5 knobs besides the one that always changes).
        crossover: Share of children bred from two parents (default 0.5).

    Returns:
        An `EvolveResult`.

    Raises:
        ValueError: For seeds of the wrong shape or outside the space, or counts below 1.
    """
    sizes = _sizes(space)
    m = len(sizes)
    seeds = _check_configs(np.asarray(seeds).reshape(-1, m), sizes)
    for name, count in (("population", population), ("children", children), ("n_keep", n_keep)):
        if count < 1:
            raise ValueError(f"{name} must be at least 1, got {count}")
    rate = 1.5 / max(m, 1) if mutation_rate is None else mutation_rate
    top = _TopSet(n_keep, {tuple(int(v) for v in c) for c in exclude})
    pool = np.vstack(
        [
            seeds,
            mutate_many(np.repeat(seeds, 2, axis=0), space, rng, rate),
            space_filling(space, n_fresh, rng),
        ]
    )
    pool = _unique(pool)
    pool_scores = _call_score(score, pool)
    n_scored = len(pool)
    top.offer(pool, pool_scores)
    pop, pop_scores = _best(pool, pool_scores, population)
    for _ in range(generations):
        if not len(pop):
            break
        first = _tournament(pop_scores, children, rng)
        second = _tournament(pop_scores, children, rng)
        kids = pop[first].copy()
        mixed = rng.random(children) < crossover
        take = mixed[:, None] & (rng.random((children, m)) < 0.5)
        kids[take] = pop[second][take]
        kids = _unique(mutate_many(kids, space, rng, rate))
        kid_scores = _call_score(score, kids)
        n_scored += len(kids)
        top.offer(kids, kid_scores)
        merged = np.vstack([pop, kids])
        merged_scores = np.concatenate([pop_scores, kid_scores])
        keep = _first_of_each(merged)
        pop, pop_scores = _best(merged[keep], merged_scores[keep], population)
    configs, scores = top.ranked(m)
    return EvolveResult(configs, scores, pop, n_scored)


def _unique(configs: np.ndarray) -> np.ndarray:
    """Distinct rows in the order first met (so that a seed gives the same order every run)."""
    return configs[_first_of_each(configs)]


def _first_of_each(configs: np.ndarray) -> np.ndarray:
    _, first = np.unique(configs, axis=0, return_index=True)
    return np.sort(first)


def _best(configs: np.ndarray, scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The `n` best rows with a finite score, best first (ties in input order)."""
    finite = np.flatnonzero(np.isfinite(scores))
    order = finite[np.argsort(-scores[finite], kind="stable")][:n]
    return configs[order], scores[order]


def _tournament(scores: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` parent indices, each the better of two drawn uniformly."""
    a = rng.integers(0, len(scores), size=n)
    b = rng.integers(0, len(scores), size=n)
    return np.where(scores[a] >= scores[b], a, b)
