"""Search: annealing beats random sampling at equal cost and honours exclusions; mutation
changes one knob; the diverse batch covers more values than top-b; the random share is exact."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tensortune.search import (
    AnnealResult,
    anneal,
    diverse_greedy,
    mutate,
    random_configs,
    unseen_random_configs,
    with_random_share,
)

SPACE = [20] * 6


def separable_score(seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """A random table per knob; a config's score is the sum of its knobs' entries."""
    tables = np.random.default_rng(seed).normal(size=(len(SPACE), SPACE[0]))
    return lambda configs: tables[np.arange(len(SPACE)), configs].sum(axis=1)


def run(seed: int, **kwargs) -> tuple[AnnealResult, Callable[[np.ndarray], np.ndarray]]:
    score = separable_score(100 + seed)
    rng = np.random.default_rng(seed)
    return anneal(SPACE, score, random_configs(SPACE, 32, rng), rng, **kwargs), score


def as_set(configs: np.ndarray) -> set[tuple[int, ...]]:
    return {tuple(c) for c in configs.tolist()}


def distinct_values(configs: np.ndarray) -> int:
    return sum(len(np.unique(column)) for column in configs.T)


def test_anneal_beats_random_sampling_at_equal_cost():
    margins = []
    for seed in range(5):
        result, score = run(seed)
        random = random_configs(SPACE, result.n_scored, np.random.default_rng(50 + seed))
        margins.append(result.scores[0] - score(random).max())
    assert np.median(margins) > 0.5  # a random walk of the same length scores about 0


def test_anneal_result_is_consistent():
    result, score = run(0, n_steps=50, n_keep=16)
    assert result.configs.shape == (16, len(SPACE))
    assert result.states.shape == (32, len(SPACE))
    assert result.configs.dtype == np.int64
    assert len(as_set(result.configs)) == 16
    assert np.all(np.diff(result.scores) <= 0)
    np.testing.assert_allclose(result.scores, score(result.configs))
    assert result.steps == 50
    assert result.n_scored == 32 * (result.steps + 1)


def test_anneal_never_returns_excluded_configs():
    first, _ = run(1, n_keep=32)
    excluded = as_set(first.configs)
    second, _ = run(1, n_keep=32, exclude=excluded)
    assert len(second.configs) == 32
    assert not as_set(second.configs) & excluded
    # the excluded ones were the best: the rest can only score lower
    assert second.scores[0] <= first.scores[0]


def test_anneal_stops_early_on_a_flat_score():
    flat = lambda configs: np.zeros(len(configs))  # noqa: E731
    rng = np.random.default_rng(0)
    result = anneal(SPACE, flat, random_configs(SPACE, 8, rng), rng, n_keep=4, early_stop=10)
    assert result.steps == 10  # the top set filled with the start states and never changed
    assert len(result.configs) == 4


def test_anneal_avoids_nan_scores():
    def score(configs: np.ndarray) -> np.ndarray:
        out = configs.sum(axis=1).astype(float)
        return np.where(configs[:, 0] == 19, np.nan, out)

    rng = np.random.default_rng(0)
    result = anneal(SPACE, score, random_configs(SPACE, 16, rng), rng, n_steps=60)
    assert np.all(result.configs[:, 0] != 19)
    assert np.all(np.isfinite(result.scores))


def test_anneal_is_reproducible():
    a, _ = run(3, n_steps=40)
    b, _ = run(3, n_steps=40)
    np.testing.assert_array_equal(a.configs, b.configs)
    np.testing.assert_array_equal(a.states, b.states)


def test_anneal_rejects_bad_start():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="shape"):
        anneal(SPACE, separable_score(0), np.zeros((4, 5), int), rng)
    with pytest.raises(ValueError, match="outside"):
        anneal(SPACE, separable_score(0), np.full((4, 6), 20), rng)


def test_mutate_changes_exactly_one_knob_with_choices():
    space = [5, 1, 3, 1, 2]
    rng = np.random.default_rng(0)
    configs = random_configs(space, 500, rng)
    mutated = mutate(configs, space, rng)
    changed = mutated != configs
    assert np.all(changed.sum(axis=1) == 1)
    assert not changed[:, [1, 3]].any()
    assert np.all((mutated >= 0) & (mutated < np.array(space)))
    assert changed[:, [0, 2, 4]].any(axis=0).all()  # every knob with choices gets its turn
    fixed = np.zeros((3, 5), np.int64)
    np.testing.assert_array_equal(mutate(fixed, [1] * 5, rng), fixed)


def clustered_candidates() -> tuple[np.ndarray, np.ndarray]:
    """40 near-copies of one config with top scores, then 40 varied ones scoring a bit less."""
    rng = np.random.default_rng(0)
    copies = np.zeros((40, 6), np.int64)
    copies[:, 0] = np.arange(40) % 2
    varied = random_configs(SPACE, 40, rng)
    scores = np.concatenate([1.0 + rng.random(40), rng.random(40)])
    return np.concatenate([copies, varied]), scores


def test_diverse_greedy_covers_more_values_than_top_b():
    candidates, scores = clustered_candidates()
    top_b = np.argsort(-scores, kind="stable")[:10]
    picked = diverse_greedy(candidates, scores, 10)
    assert len(set(picked.tolist())) == 10
    assert distinct_values(candidates[picked]) > distinct_values(candidates[top_b]) + 10
    assert picked[0] == top_b[0]  # the best candidate is always novel first


def test_diverse_greedy_without_alpha_is_top_b():
    candidates, scores = clustered_candidates()
    picked = diverse_greedy(candidates, scores, 10, alpha=0.0)
    np.testing.assert_array_equal(picked, np.argsort(-scores, kind="stable")[:10])
    assert len(diverse_greedy(candidates[:3], scores[:3], 10)) == 3


def test_diverse_greedy_counts_taken_values_as_covered():
    candidates = np.array([[0, 0], [1, 1]])
    scores = np.array([1.0, 0.0])
    assert diverse_greedy(candidates, scores, 1, alpha=1.0)[0] == 0
    assert diverse_greedy(candidates, scores, 1, alpha=1.0, taken=np.array([[0, 0]]))[0] == 1


def test_random_share_zero_and_full():
    rng = np.random.default_rng(0)
    selected = random_configs(SPACE, 16, rng)
    np.testing.assert_array_equal(with_random_share(selected, SPACE, rng, epsilon=0.0), selected)
    excluded = as_set(random_configs(SPACE, 100, rng))
    replaced = with_random_share(selected, SPACE, rng, epsilon=1.0, exclude=excluded)
    assert replaced.shape == selected.shape
    assert len(as_set(replaced)) == 16
    assert not as_set(replaced) & (excluded | as_set(selected))


def test_random_share_replaces_the_tail_with_expected_share():
    counts = []
    selected = np.zeros((8, 6), np.int64)
    for seed in range(2000):
        out = with_random_share(selected, SPACE, np.random.default_rng(seed), epsilon=0.05)
        changed = np.flatnonzero((out != selected).any(axis=1))
        np.testing.assert_array_equal(changed, np.arange(8 - len(changed), 8))
        counts.append(len(changed))
    assert np.mean(counts) == pytest.approx(0.4, abs=0.05)
    assert set(counts) == {0, 1}


def test_random_share_in_a_crowded_space_swaps_what_it_can():
    selected = np.array([[0, 0], [0, 1]])
    out = with_random_share(
        selected, [2, 2], np.random.default_rng(0), epsilon=1.0, exclude=[(1, 0)]
    )
    np.testing.assert_array_equal(out, [[0, 0], [1, 1]])


def test_random_share_is_reproducible():
    selected = np.zeros((20, 6), np.int64)
    a = with_random_share(selected, SPACE, np.random.default_rng(5), epsilon=0.5)
    b = with_random_share(selected, SPACE, np.random.default_rng(5), epsilon=0.5)
    np.testing.assert_array_equal(a, b)


def test_unseen_random_configs_are_new_distinct_and_seeded():
    taken = {(0, 0), (1, 1), (2, 3)}
    draw = [unseen_random_configs([3, 4], 6, np.random.default_rng(3), taken, 4, 50) for _ in "ab"]
    rows = [tuple(row) for row in draw[0].tolist()]
    assert len(rows) == 6 and len(set(rows)) == 6 and not set(rows) & taken
    np.testing.assert_array_equal(draw[0], draw[1])
    # A crowded space gives what it has left, and an empty (0, m) array when nothing is.
    crowded = unseen_random_configs([2, 2], 10, np.random.default_rng(0), {(0, 0)}, 8, 20)
    assert sorted(tuple(row) for row in crowded.tolist()) == [(0, 1), (1, 0), (1, 1)]
    full = unseen_random_configs([1, 2], 1, np.random.default_rng(0), {(0, 0), (0, 1)}, 4, 5)
    assert full.shape == (0, 2)
