"""The evolutionary search (`tensortune.search.evolve`) and the sampler that runs it by default:
it finds a good region that one-knob annealing from a poor start cannot reach, is
deterministic for a seed, and never proposes a measured or claimed config."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

import tensortune
from tensortune.sampler import CostModelSampler
from tensortune.sampler.history import KnobSpace
from tensortune.search import anneal, evolve, far_from, mutate_many, space_filling
from tensortune.templates import CpuTemplate
from tensortune.trial_records import PROPOSAL_ATTR

#: The known good region: four knobs at these values (96 combinations of them in all).
REGION = {"order": "S0 R0 S1 S2 R1 S3", "unroll": 512, "accumulate": "outer", "parallel": 2}
ROUNDS = 10  # rounds of 8 proposals each search gets; evolution needs 1, annealing never does


@pytest.fixture(scope="module")
def space() -> KnobSpace:
    return KnobSpace(CpuTemplate(tensortune.get_workload("matmul", 1024, 1024, 1024)).knobs)


def deceptive(space: KnobSpace):
    """10 in the region; elsewhere the number of the region's knobs a config gets wrong, so
    that every single step towards the region lowers the score."""
    columns = [i for i, k in enumerate(space.knobs) if k.name in REGION]
    target = np.array([space.knobs[i].choices.index(REGION[space.knobs[i].name]) for i in columns])

    def score(configs: np.ndarray) -> np.ndarray:
        wrong = (configs[:, columns] != target).sum(axis=1).astype(float)
        return np.where(wrong == 0, 10.0, wrong)

    return score, columns, target


def rounds_to_region(space: KnobSpace, search: str, seed: int) -> int | None:
    """Rounds of 8 proposals (the oracle score as the model) until one lies in the region."""
    score, columns, target = deceptive(space)
    rng = np.random.default_rng(seed)
    # A poor start: 16 measured configs, each wrong on every knob of the region.
    start = space_filling(space.sizes, 16, rng)
    start[:, columns] = (target + 1) % np.array(space.sizes)[columns]
    measured = [tuple(r) for r in start.tolist()]
    chains = np.repeat(start, 2, axis=0)
    for round_ in range(1, ROUNDS + 1):
        if search == "evolve":
            values = score(np.array(measured))
            best = np.array(measured)[np.argsort(-values, kind="stable")][:64]
            found = evolve(space.sizes, score, best, rng, n_keep=8, exclude=set(measured))
            batch = found.configs
        else:  # the sampler's annealing defaults: 32 chains x 8 steps, chains kept
            result = anneal(
                space.sizes, score, chains, rng, n_steps=8, n_keep=8, exclude=set(measured)
            )
            batch, chains = result.configs, result.states
        if (score(batch) == 10.0).any():
            return round_
        measured += [tuple(r) for r in batch.tolist()]
    return None


@pytest.mark.parametrize("seed", [0, 1])
def test_evolution_reaches_the_region_that_annealing_cannot(space, seed):
    assert rounds_to_region(space, "evolve", seed) == 1
    assert rounds_to_region(space, "anneal", seed) is None


def test_evolve_is_deterministic_and_scores_ten_thousand(space):
    score, _, _ = deceptive(space)
    seeds = space_filling(space.sizes, 8, np.random.default_rng(0))
    runs = [
        evolve(space.sizes, score, seeds, np.random.default_rng(5), exclude={tuple(seeds[0])})
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].configs, runs[1].configs)
    assert runs[0].n_scored >= 10_000
    assert tuple(seeds[0]) not in {tuple(r) for r in runs[0].configs.tolist()}
    assert len({tuple(r) for r in runs[0].configs.tolist()}) == len(runs[0].configs)
    other = evolve(space.sizes, score, seeds, np.random.default_rng(6))
    assert not np.array_equal(other.population, runs[0].population)


def test_space_filling_covers_every_value_and_mutants_change_several_knobs(space):
    points = space_filling(space.sizes, 256, np.random.default_rng(0))
    for j, size in enumerate(space.sizes):
        values, counts = np.unique(points[:, j], return_counts=True)
        if size <= 16:  # each value equally often: Sobol is stratified along every knob
            assert len(values) == size and counts.max() - counts.min() <= 1, space.knobs[j].name
        else:
            # Uniform draws would cover about 63 % of 256 values (1 - 1/e); Sobol 76 %.
            assert len(values) >= 0.7 * min(size, 256), space.knobs[j].name
    mutants = mutate_many(points, space.sizes, np.random.default_rng(1), rate=0.3)
    changed = (mutants != points).sum(axis=1)
    assert changed.min() >= 1 and changed.mean() > 2
    assert (mutants < np.array(space.sizes)).all() and (mutants >= 0).all()


def synthetic_study(
    seed: int,
    search: str = "evolve",
    n_trials: int = 40,
    callbacks: list | None = None,
    **sampler_args: float,
) -> optuna.Study:
    """A study of matmul 64's knob space whose objective is a function of the knob values;
    `sampler_args` go to `CostModelSampler`, `callbacks` to `optimize`."""
    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))

    def objective(trial: optuna.Trial) -> float:
        config = template.suggest(trial)
        inner = [int(f) for f in str(config["tile_j"]).split("x")][-1]
        return inner * (1 + (config["unroll"] == 64)) + (config["order"] == "S0 S1 R0 S2 R1 S3")

    sampler = CostModelSampler(
        template, n_startup_trials=16, search=search, seed=seed, **sampler_args
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=n_trials, callbacks=callbacks)
    return study


@pytest.mark.slow  # 6 model rounds: about 30 s on a loaded 2-core machine, mostly XGBoost fits
def test_sampler_is_deterministic_and_never_repeats_a_config():
    runs = [synthetic_study(seed=3) for _ in range(2)]
    params = [[t.params for t in s.trials] for s in runs]
    assert params[0] == params[1]
    keys = [tuple(sorted(p.items())) for p in params[0]]
    assert len(set(keys)) == len(keys) == 40
    assert runs[0].sampler.feature_set == "knob"
    assert runs[0].sampler.settings.search == "evolve"
    # The learned rounds beat the space-filling start on median.
    values = [t.value for t in runs[0].trials]
    assert np.median(values[16:]) > np.median(values[:16])


def test_far_from_matches_a_brute_force_hamming_distance(space):
    rng = np.random.default_rng(4)
    reference = space_filling(space.sizes, 40, rng)
    # Candidates 0-5 knobs from a reference config, and fresh points.
    near = mutate_many(np.repeat(reference[:6], 5, axis=0), space.sizes, rng, rate=0.3)
    configs = np.vstack([reference[:3], near, space_filling(space.sizes, 50, rng)])
    nearest = np.array([min(int((c != r).sum()) for r in reference) for c in configs])
    for distance in (1, 2, 3, 5):
        assert np.array_equal(far_from(configs, reference, distance), nearest >= distance)
    assert far_from(configs, reference[:0], 3).all() and far_from(configs, reference, 0).all()
    assert not far_from(configs, reference, 1)[:3].any()  # the reference itself is at 0


def test_far_from_keys_a_long_history_exactly(space):
    """Against hundreds of reference configs `far_from` compares keys of the knobs left when
    `distance - 1` are masked, not every pair; it must agree with the pairwise distance, and
    fall back to pairs where the keys would not be exact."""
    rng = np.random.default_rng(7)
    reference = space_filling(space.sizes, 600, rng)
    near = mutate_many(np.repeat(reference[:100], 3, axis=0), space.sizes, rng, rate=0.25)
    configs = np.vstack([reference[:5], near, space_filling(space.sizes, 300, rng)])
    nearest = (configs[:, None, :] != reference[None, :, :]).sum(axis=2).min(axis=1)
    assert set(nearest.tolist()) >= {0, 1, 2, 3}
    for distance in (1, 2, 3, 4, len(space.sizes), len(space.sizes) + 1):
        assert np.array_equal(far_from(configs, reference, distance), nearest >= distance)
    # 8 knobs of 2^10 values each: 80 bits of key, more than float64 holds exactly.
    wide_reference = rng.integers(0, 1 << 10, size=(600, 8))
    wide = wide_reference[:50].copy()
    wide[:, :2] = rng.integers(0, 1 << 10, size=(50, 2))
    wide_nearest = (wide[:, None, :] != wide_reference[None, :, :]).sum(axis=2).min(axis=1)
    for distance in (2, 3):
        assert np.array_equal(far_from(wide, wide_reference, distance), wide_nearest >= distance)


def test_rounds_refit_the_model_as_the_history_grows():
    """A round fits the model again once the history grew by `refit_growth` of the rows it
    was last fit on (and by a batch at least); before that it searches with the last model.
    The default fits every round of a short study, so it proposes what fitting always does."""

    def fits(**sampler_args: float) -> tuple[list[bool], list[dict]]:
        seen: dict[int, bool] = {}

        def record(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            # The round that proposed this trial is the sampler's last one when it ends.
            proposal = trial.system_attrs[PROPOSAL_ATTR]
            if proposal["source"] != "startup":
                seen[proposal["round"]] = study.sampler.last_round_seconds["fit"] > 0

        study = synthetic_study(seed=2, n_trials=48, callbacks=[record], **sampler_args)
        return [seen[r] for r in sorted(seen)], [t.params for t in study.trials]

    # Rounds at 16, 24, 32 and 40 trials: with a growth of 1, fits at 16 and 32 only.
    halved, _ = fits(refit_growth=1.0)
    assert halved == [True, False, True, False]
    every, params = fits(refit_growth=0.0)
    default, default_params = fits()
    assert every == default == [True] * 4
    assert params == default_params
    with pytest.raises(ValueError, match="refit_growth must be at least 0, got -1"):
        CostModelSampler(refit_growth=-1)


@pytest.mark.slow  # 3 model rounds, two searches each: about 20 s on a loaded 2-core machine
def test_explore_share_lies_far_from_every_config_taken_before_it():
    study = synthetic_study(seed=5, n_trials=40)
    template = study.sampler.template
    space = KnobSpace(template.knobs)
    trials = sorted(study.trials, key=lambda t: t.number)
    configs = np.array([space.encode(t.params) for t in trials])
    proposals = [t.system_attrs[PROPOSAL_ATTR] for t in trials]
    rounds = sorted({p["round"] for p in proposals if p["source"] != "startup"})
    assert len(rounds) >= 3
    for round_ in rounds:
        members = [n for n, p in enumerate(proposals)
                   if p.get("round") == round_ and p["source"] != "startup"]  # fmt: skip
        far = [n for n in members if proposals[n]["source"] == "explore"]
        # round(0.25 * 8) explore configs a round, each 3 knobs or more from everything
        # measured or claimed when the round was proposed (the trials before its first).
        assert len(far) == 2, (round_, [proposals[n]["source"] for n in members])
        before = configs[: min(members)]
        assert far_from(configs[far], before, 3).all()


def test_unknown_search_is_refused():
    with pytest.raises(ValueError, match="unknown search 'walk'; choose one of evolve, anneal"):
        CostModelSampler(search="walk")


def test_startup_trials_cover_every_value_evenly():
    """The 16 start-up configs come from a Sobol design: each of the 4 orders and 4 unroll
    budgets 4 times (16 uniform draws balance one such knob 1.5 % of the time)."""
    template = CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    study = optuna.create_study(sampler=CostModelSampler(template, seed=11))
    configs = [template.suggest(study.ask()) for _ in range(16)]
    for knob in ("order", "unroll"):
        counts = {v: sum(c[knob] == v for c in configs) for c in configs for v in [c[knob]]}
        assert sorted(counts.values()) == [4, 4, 4, 4], (knob, counts)
    assert len({tuple(sorted(c.items())) for c in configs}) == 16
