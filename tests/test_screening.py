"""The knob-feature screen: it learns a round's ranking from configs scored before, lowers only
its share of a search step's candidates, and keeps what the search finds; a warm study on a
real template lowers a fraction of what it did without it."""

from __future__ import annotations

import numpy as np
import pytest

import tensortune
from tensortune.cost_model import kendall_tau
from tensortune.sampler import CostModelSampler
from tensortune.sampler.screening import (
    MIN_LOWERED,
    MIN_POOL,
    Screen,
    fit_screen,
    recent_pool,
    screened,
)
from tensortune.search import evolve, random_configs

SPACE = [12] * 6


def one_hot(configs: np.ndarray) -> np.ndarray:
    """Cheap rows: each knob's choice, one-hot (what a knob featurizer would see)."""
    rows = np.zeros((len(configs), sum(SPACE)), np.float32)
    offsets = np.cumsum([0, *SPACE[:-1]])
    rows[np.arange(len(configs))[:, None], offsets + configs] = 1
    return rows


def program_score(seed: int):
    """A score the screen must learn: a table per knob plus one interaction, -inf (an
    unschedulable config) where knobs 0 and 1 both take their last choice."""
    tables = np.random.default_rng(seed).normal(size=(len(SPACE), SPACE[0]))

    def score(configs: np.ndarray) -> np.ndarray:
        out = tables[np.arange(len(SPACE)), configs].sum(axis=1) + 0.5 * (
            configs[:, 2] == configs[:, 3]
        )
        out[(configs[:, 0] == SPACE[0] - 1) & (configs[:, 1] == SPACE[1] - 1)] = -np.inf
        return out

    return score


def test_screen_ranks_unseen_configs_as_the_score_does():
    score = program_score(0)
    rng = np.random.default_rng(0)
    pool = random_configs(SPACE, 1024, rng)
    cheap = fit_screen(Screen(one_hot, pool, 0.25), score, seed=0)
    assert cheap is not None
    held_out = random_configs(SPACE, 500, rng)
    truth = score(held_out)
    finite = np.isfinite(truth)
    assert kendall_tau(truth[finite], cheap(held_out)[finite]) > 0.6


def test_no_screen_from_a_small_or_flat_pool():
    pool = random_configs(SPACE, MIN_POOL - 1, np.random.default_rng(0))
    assert fit_screen(Screen(one_hot, pool, 0.25), program_score(0), seed=0) is None
    pool = random_configs(SPACE, 2 * MIN_POOL, np.random.default_rng(0))
    flat = Screen(one_hot, pool, 0.25)
    assert fit_screen(flat, lambda c: np.ones(len(c)), seed=0) is None


def test_screened_scores_only_its_share_and_all_of_a_small_call():
    score = program_score(1)
    calls: list[int] = []

    def counted(configs: np.ndarray) -> np.ndarray:
        calls.append(len(configs))
        return score(configs)

    cheap = fit_screen(
        Screen(one_hot, random_configs(SPACE, 1024, np.random.default_rng(1)), 0.25), score, 1
    )
    lowered: list[np.ndarray] = []
    screened_score = screened(counted, cheap, 0.25, lowered)
    configs = random_configs(SPACE, 400, np.random.default_rng(2))
    out = screened_score(configs)
    assert calls == [100]
    kept = np.isfinite(out)
    assert kept.sum() <= 100
    np.testing.assert_array_equal(out[kept], score(configs[kept]))
    # What the screen passed is better, on the true score, than what it ruled out.
    truth = score(configs)
    ruled_out = ~np.isin(np.arange(400), np.flatnonzero(kept)) & np.isfinite(truth)
    assert np.median(truth[kept]) > np.median(truth[ruled_out])
    small = random_configs(SPACE, MIN_LOWERED, np.random.default_rng(3))
    np.testing.assert_array_equal(screened_score(small), score(small))
    assert calls == [100, MIN_LOWERED]
    assert [len(x) for x in lowered] == [100, MIN_LOWERED]
    # No screen: everything scored.
    everything = screened(counted, None, 0.25, [])
    np.testing.assert_array_equal(everything(configs), truth)


def test_screened_evolution_scores_a_quarter_and_finds_as_good():
    score = program_score(2)
    pool = random_configs(SPACE, 1024, np.random.default_rng(4))
    cheap = fit_screen(Screen(one_hot, pool, 0.25), score, seed=2)
    found = {}
    for name, search_score in (
        ("full", screened(score, None, 1.0, lowered_full := [])),
        ("screened", screened(score, cheap, 0.25, lowered_screened := [])),
    ):
        result = evolve(
            SPACE,
            search_score,
            np.empty((0, len(SPACE)), np.int64),
            np.random.default_rng(5),
            population=64,
            generations=3,
            n_fresh=256,
            children=128,
            n_keep=24,
        )
        found[name] = float(result.scores[0])
    n_full = sum(map(len, lowered_full))
    n_screened = sum(map(len, lowered_screened))
    assert n_screened <= 0.4 * n_full
    best = score(random_configs(SPACE, 20000, np.random.default_rng(6))).max()
    assert found["screened"] >= found["full"] - 0.1 * abs(best)


def test_recent_pool_keeps_each_config_once_latest_last():
    a = np.array([[0, 0], [1, 1], [2, 2]])
    b = np.array([[1, 1], [3, 3]])
    pool = recent_pool(np.empty((0, 2), np.int64), [a, b], size=3)
    np.testing.assert_array_equal(pool, [[2, 2], [1, 1], [3, 3]])
    assert len(recent_pool(pool, [], size=3)) == 3


def test_bad_screen_share_is_refused():
    for share in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="screen_share"):
            CostModelSampler(screen_share=share)


class RecordingSampler(CostModelSampler):
    """Keeps `last_round_scored` of every model round, by round."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.per_round: dict[int, int] = {}

    def sample_relative(self, study, trial, search_space):
        config = super().sample_relative(study, trial, search_space)
        if self.last_round_scored:
            self.per_round[self._round] = self.last_round_scored
        return config


@pytest.mark.slow
def test_lowered_study_lowers_a_fraction_behind_the_screen(storage_url, fast_settings):
    """A real study on curve features (lowered through TVM) with and without the screen:
    once the screen has a pool, a round lowers at most about its share of what it would.
    The feature set is named, not left to the sampler, and the study is cold: a warm study may
    drop its sources mid-way (their weight is measured) and go on as a knob-feature study."""
    scored: dict[float, list[int]] = {}
    for share in (1.0, 0.25):
        sampler = RecordingSampler(feature_set="curve", screen_share=share, seed=0)
        tensortune.tune(
            "matmul",
            shape=dict(M=128, N=128, K=128),
            n_trials=40,
            storage=storage_url,
            study_name=f"screen-{share}",
            sampler=sampler,
            settings=fast_settings,
            show_progress=False,
        )
        assert sampler.feature_set == "curve"
        scored[share] = [sampler.per_round[k] for k in sorted(sampler.per_round)]
    full, screened_rounds = scored[1.0], scored[0.25]
    assert len(full) >= 3 and len(screened_rounds) >= 3
    # The first round has no pool to learn from; the later ones lower about a quarter.
    assert screened_rounds[0] > 0.6 * full[0]
    assert max(screened_rounds[2:]) < 0.45 * min(full[1:])
