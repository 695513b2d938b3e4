"""One round of the paper's exploration: fit the cost model, anneal, pick a diverse batch."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from tensortune.cost_model import CostModel, acquire, make_cost_model
from tensortune.sampler.history import History, training_targets
from tensortune.sampler.screening import Screen, fit_screen, screened
from tensortune.sampler.settings import RoundSettings
from tensortune.sampler.source_weighting import (
    DRAWN_SOURCE_ROWS,
    MIN_EVIDENCE,
    VALIDATED,
    WEIGHTINGS_AGAINST_OWN,
    faded_sources,
    fit_with_sources,
    judge_taus,
    local_tau,
    source_row_weights,
    source_weights,
)
from tensortune.sampler.transfer import SourceRows
from tensortune.search import (
    AnnealResult,
    EvolveResult,
    anneal,
    diverse_greedy,
    evolve,
    far_from,
    random_configs,
    unseen_random_configs,
    with_random_share,
)

#: Maps ``(n, m)`` knob indices to ``(n, d)`` feature rows (NaN rows: unschedulable configs).
Featurize = Callable[[np.ndarray], np.ndarray]
#: The phases of a round, as `Round.seconds` names them, in the order they run.
ROUND_PHASES = ("fit", "features", "screen", "search", "select")


@dataclasses.dataclass
class Round:
    """What a round proposes, best first, and what it cost.

    Attributes:
        configs: ``(b, m)`` knob indices to measure, in the order to hand them out.
        sources: ``"model"``, ``"explore"`` (the explore share: best predicted far from every
            config taken) or ``"random"`` per config.
        scores: The acquisition value per config (NaN for the random share).
        states: Annealing chain states to continue from next round.
        seconds: Wall time per phase of `ROUND_PHASES`: ``fit``, ``features``, ``screen``
            (fitting it), ``search``, ``select``.
        n_scored: Configs the annealer scored (cached features included).
        model: The fitted cost model, for the next round to go on from.
        source_weights: `Fit.source_weights` of the round's fit (empty without sources).
        fitted: Whether the round fit `model` (False: it searched with the model it was
            given, see `propose_round`'s ``refit``).
        lowered: ``(k, m)`` configs the searches scored with the model (behind a screen,
            those it let through), for the next rounds' screen.
        start_weight: `Fit.start_weight` of the model (NaN without sources).
        restarted: `Fit.restarted` of the round's fit.
        source_faded: `Fit.source_faded` of the round's fit.
    """

    configs: np.ndarray
    sources: list[str]
    scores: np.ndarray
    states: np.ndarray
    seconds: dict[str, float]
    n_scored: int
    model: CostModel | None = None
    source_weights: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    fitted: bool = True
    lowered: np.ndarray = dataclasses.field(default_factory=lambda: np.empty((0, 0), np.int64))
    start_weight: float = float("nan")
    restarted: bool = False
    source_faded: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, bool))


@dataclasses.dataclass(frozen=True)
class Fit:
    """A fitted cost model and what it was fitted on.

    Attributes:
        model: The fitted cost model.
        rows: The study's own feature rows it saw (unschedulable configs left out).
        targets: Their scaled targets.
        source_taus: Per source workload, how well its judge ranks ``rows`` (NaN: not yet);
            empty without sources.
        source_weights: Per source workload, the weight of one of its rows next to a local
            row's 1 (`tensortune.sampler.source_weighting.source_weights`); empty without sources.
        start_weight: The sources' summed weight when `model` began training (this fit's for
            a fresh model, an earlier one's for a model that went on); NaN without sources.
        restarted: Whether a model that would have gone on training was replaced by a fresh
            one because its sources faded (see `fit_cost_model`). Default False.
        source_faded: Per source workload, whether it left the fit because its rows together
            weigh too little to count (`tensortune.sampler.source_weighting.faded_sources`;
            its weight then reads 0). Default empty: none did, or no sources.
    """

    model: CostModel
    rows: np.ndarray
    targets: np.ndarray
    source_taus: np.ndarray
    source_weights: np.ndarray
    start_weight: float = float("nan")
    restarted: bool = False
    source_faded: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, bool))


def fit_cost_model(
    history: History,
    featurize: Featurize,
    settings: RoundSettings,
    seed: int,
    prior: SourceRows | None = None,
    model: CostModel | None = None,
    judges: Sequence[CostModel | None] = (),
    start_weight: float = float("nan"),
) -> Fit:
    """The cost model fit on the measured configs and the `prior` studies' rows. A `model`
    from an earlier round is fit again (the TreeGRU goes on from its weights); default None: a
    fresh ``settings.cost_model``. With `prior` rows, a `model` that began training when the
    sources weighed `start_weight` in all (default NaN: unknown, it goes on) is replaced by a
    fresh one once they weigh less than half of that: what it learnt from them stays in its
    weights however little their rows weigh now.

    Each source workload is its own rank query and its rows weigh
    `tensortune.sampler.source_weighting.source_weights` of a local row's weight
    (``settings.source_weighting``): a decay as the study measures more of its own, times,
    with ``"evidence"``, how well that source's `judges` (one model per source workload,
    `tensortune.sampler.source_weighting.fit_judges`; default none: no evidence) rank the study's
    own configs; with ``"relative"`` and ``"outranked"`` against how well those configs rank each
    other (`tensortune.sampler.source_weighting.local_tau`, a cross-validation of one-member
    models); with ``"validated"``, kept only while that cross-validation ranks them at least as well
    with the sources in every fold as without.

    A model that goes on training (the TreeGRU) with ``settings.source_rows`` ``"by-weight"``
    trains on a random share of each source's rows as its weight is worth, and none of a
    source `tensortune.sampler.source_weighting.faded_sources` finds faded, whose weight then
    reads 0 (`tensortune.sampler.source_weighting.source_row_weights`; the draw is seeded by
    `seed` and the study's count of configs); with ``"drawn"`` the same draw, and no source
    fades."""
    features = featurize(history.configs)
    targets = training_targets(history.values)
    usable = ~np.isnan(features).any(axis=1)
    X, y = features[usable], targets[usable]
    going_on = model is not None and model.warm_start
    if model is None:
        model = make_cost_model(settings.cost_model, settings.loss, settings.n_models, seed)
    if prior is None or not len(prior):
        model.fit(X, y)
        return Fit(model, X, y, np.empty(0), np.empty(0))
    taus = judge_taus(judges, X, y) if judges else np.full(len(prior.workloads), np.nan)
    n_local = len(history.values)
    weights = source_weights(
        taus,
        n_local,
        settings.source_half_life,
        settings.source_weighting,
        rows=prior.rows_per_workload,
    )
    # Against the study's own ranking a source only loses weight: where the evidence left none,
    # the cross-validation (several model fits) has nothing to cut.
    against_own = settings.source_weighting in WEIGHTINGS_AGAINST_OWN
    validated = settings.source_weighting == VALIDATED
    if (against_own or validated) and n_local >= MIN_EVIDENCE and weights.any():

        def one_member() -> CostModel:
            return make_cost_model(settings.cost_model, settings.loss, 1, seed)

        own_tau = local_tau(one_member, X, y, seed)
        # The same folds again, with the sources at the evidence's weights.
        with_tau = local_tau(one_member, X, y, seed, prior, weights) if validated else math.nan
        weights = source_weights(
            taus,
            n_local,
            settings.source_half_life,
            settings.source_weighting,
            own_tau=own_tau,
            with_sources_tau=with_tau,
        )
    row_weights, faded = None, np.zeros(len(weights), bool)
    if settings.source_rows in DRAWN_SOURCE_ROWS and model.warm_start:
        # A model that goes on training pays for every row in every pass, whatever its weight.
        if settings.source_rows == "by-weight":
            faded = faded_sources(weights, prior.rows_per_workload, n_local)
            weights = np.where(faded, 0.0, weights)
        draw = np.random.default_rng([seed, n_local])
        row_weights = source_row_weights(prior, weights, faded, settings.loss, draw)
    restarted = bool(going_on and weights.sum() < start_weight / 2)
    if restarted:
        model = make_cost_model(settings.cost_model, settings.loss, settings.n_models, seed)
        going_on = False
    if not going_on or math.isnan(start_weight):
        start_weight = float(weights.sum())
    fit_with_sources(model, X, y, prior, weights, row_weights)
    return Fit(model, X, y, taus, weights, start_weight, restarted, faded)


def chain_starts(
    previous: np.ndarray | None,
    history: History,
    sizes: list[int],
    n_chains: int,
    restart_share: float,
    rng: np.random.Generator,
    prior_starts: np.ndarray | None = None,
) -> np.ndarray:
    """Last round's chain states (the paper keeps them across model updates), with a
    `restart_share` of the chains restarted from the best measured configs so that the search
    keeps refining what is known to be good; random states where there is no previous round.

    While the study has fewer good configs of its own than restart slots, the rest restart
    from `prior_starts` (prior studies' best configs moved into this space), best first."""
    starts = (
        previous.copy()
        if previous is not None and len(previous) == n_chains
        else random_configs(sizes, n_chains, rng)
    )
    finite = np.where(np.isfinite(history.values))[0]
    pool = history.configs[finite[np.argsort(-history.values[finite], kind="stable")]]
    if prior_starts is not None and len(prior_starts):
        pool = np.vstack([pool, prior_starts])
    if len(pool):
        n_restart = min(max(1, round(restart_share * n_chains)), len(pool))
        slots = rng.choice(n_chains, size=n_restart, replace=False)
        starts[slots] = pool[:n_restart]
    return starts


def propose_round(
    history: History,
    featurize: Featurize,
    sizes: list[int],
    settings: RoundSettings,
    chains: np.ndarray | None,
    rng: np.random.Generator,
    prior: SourceRows | None = None,
    prior_starts: np.ndarray | None = None,
    model: CostModel | None = None,
    judges: Sequence[CostModel | None] = (),
    refit: bool = True,
    screen: Screen | None = None,
    start_weight: float = float("nan"),
) -> Round:
    """Fit (on the study's history and the `prior` studies' rows, weighed with `judges`, see
    `fit_cost_model`; `model`, the last round's, goes on training where it warm-starts (the
    TreeGRU), else a fresh one is fit), search
    (``settings.search``: evolve from the measured best and `prior_starts`, or anneal from
    `chains` and `prior_starts`, see `chain_starts`), and select `settings.batch_size` configs
    never taken.

    `start_weight` (default NaN: unknown) is what the sources weighed when `model` began
    training, see `fit_cost_model`.

    With `refit` False (default True), a `model` and no `prior` rows, the round searches with
    `model` as it is: the history still gives the search its measured best and the configs it
    must not propose again. With `prior` rows every round fits: their weights follow the
    study's own configs.

    With a `screen` (default None: every candidate scored), each search step scores with the
    model only the share of its candidates that a knob-feature model of the model's scores
    ranks best (`tensortune.sampler.screening`), once the screen's pool is large enough."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    seed = int(rng.integers(2**31))
    fitted = refit or model is None or prior is not None
    if model is not None and not fitted:
        rows = featurize(history.configs)
        train_rows = rows[~np.isnan(rows).any(axis=1)]
        fit = Fit(model, train_rows, np.empty(0), np.empty(0), np.empty(0), start_weight)
        seconds["fit"] = 0.0
    else:
        going_on = model if model is not None and model.warm_start else None
        fit = fit_cost_model(
            history, featurize, settings, seed, prior, going_on, judges, start_weight
        )
        model, train_rows = fit.model, fit.rows
        seconds["fit"] = model.fit_seconds_
    seconds["features"] = time.perf_counter() - start - seconds["fit"]

    # EI's incumbent: the best predicted of the study's own configs (none yet: the sources').
    known = train_rows if len(train_rows) or prior is None else prior.features
    mean, _ = model.predict(known) if len(known) else (np.zeros(1), None)
    best = float(np.max(mean))

    def model_score(configs: np.ndarray) -> np.ndarray:
        rows = featurize(configs)
        bad = np.isnan(rows).any(axis=1)
        out = np.full(len(configs), -np.inf)
        if (~bad).any():
            mu, sigma = model.predict(rows[~bad])
            out[~bad] = acquire(settings.acquisition, mu, sigma, best)
        return out

    lowered: list[np.ndarray] = []
    start = time.perf_counter()
    cheap = fit_screen(screen, model_score, seed) if screen is not None else None
    score = screened(model_score, cheap, screen.share if screen else 1.0, lowered)
    seconds["screen"] = time.perf_counter() - start
    start = time.perf_counter()
    b = settings.batch_size
    n_keep = max(b, math.ceil(settings.candidate_factor * b))
    if settings.search == "evolve":
        result = _evolve(history, sizes, score, settings, n_keep, rng, prior_starts)
    else:
        result = _anneal(history, sizes, score, settings, n_keep, chains, rng, prior_starts)
    # No share to explore before the study has configs of its own to keep away from.
    n_far = round(settings.explore_share * b) if len(history.taken) else 0
    far = _explore(history, sizes, score, settings, n_far, rng) if n_far else None
    seconds["search"] = time.perf_counter() - start
    found = _select(history, sizes, settings, result, far, n_far, rng, seconds, model)
    return dataclasses.replace(
        found,
        source_weights=fit.source_weights,
        start_weight=fit.start_weight,
        restarted=fit.restarted,
        source_faded=fit.source_faded,
        fitted=fitted,
        lowered=np.vstack(lowered) if lowered else np.empty((0, len(sizes)), np.int64),
    )


def _anneal(
    history: History,
    sizes: list[int],
    score: Callable[[np.ndarray], np.ndarray],
    settings: RoundSettings,
    n_keep: int,
    chains: np.ndarray | None,
    rng: np.random.Generator,
    prior_starts: np.ndarray | None,
) -> AnnealResult:
    steps = max(settings.anneal_steps, math.ceil(2 * n_keep / settings.n_chains))
    if not len(history.configs):  # a warm start: no incumbent to refine, search wider
        steps *= 4
    result = anneal(
        sizes,
        score,
        chain_starts(
            chains,
            history,
            sizes,
            settings.n_chains,
            settings.restart_share,
            rng,
            prior_starts,
        ),
        rng,
        n_steps=steps,
        n_keep=n_keep,
        exclude=history.taken,
        early_stop=steps,  # every step is paid for in features; stop only at the end
    )
    return result


def _evolve(
    history: History,
    sizes: list[int],
    score: Callable[[np.ndarray], np.ndarray],
    settings: RoundSettings,
    n_keep: int,
    rng: np.random.Generator,
    prior_starts: np.ndarray | None,
) -> AnnealResult:
    """An evolution round seeded from the measured best (and the sources' best), as an
    `AnnealResult` whose states are the final population's best."""
    n_fresh, population, children, generations = settings.evolution
    finite = np.where(np.isfinite(history.values))[0]
    best = history.configs[finite[np.argsort(-history.values[finite], kind="stable")]]
    seeds = best[: max(1, population // 8)]
    if prior_starts is not None and len(prior_starts):
        seeds = np.vstack([seeds, prior_starts])
    found = evolve(
        sizes,
        score,
        seeds,
        rng,
        population=population,
        generations=generations,
        n_fresh=n_fresh,
        children=children,
        n_keep=n_keep,
        exclude=history.taken,
    )
    states = found.population[: settings.n_chains]
    return AnnealResult(found.configs, found.scores, states, generations, found.n_scored)


def _explore(
    history: History,
    sizes: list[int],
    score: Callable[[np.ndarray], np.ndarray],
    settings: RoundSettings,
    n_far: int,
    rng: np.random.Generator,
) -> EvolveResult:
    """The best-predicted configs at least ``settings.explore_distance`` knobs from every
    config the study has taken: an evolution from space-filling points alone, with the same
    sizes as the round's (``settings.evolution``), whose score rules out the near configs.

    The main search breeds from the measured best, so most of its proposals differ from a
    measured config in one or two knobs; this share keeps looking where nothing was measured,
    as TPE's draws do, so that one seed's start does not decide the study."""
    taken = np.array(sorted(history.taken), dtype=np.int64).reshape(-1, len(sizes))

    def far_score(configs: np.ndarray) -> np.ndarray:
        out = np.full(len(configs), -np.inf)
        far = far_from(configs, taken, settings.explore_distance)
        if far.any():
            out[far] = score(configs[far])
        return out

    n_fresh, population, children, generations = settings.evolution
    return evolve(
        sizes,
        far_score,
        np.empty((0, len(sizes)), np.int64),
        rng,
        population=population,
        generations=generations,
        n_fresh=n_fresh,
        children=children,
        n_keep=max(n_far, math.ceil(settings.candidate_factor * n_far)),
        exclude=history.taken,
    )


def _pick(
    configs: np.ndarray, scores: np.ndarray, n: int, settings: RoundSettings, taken: np.ndarray
) -> np.ndarray:
    """Indices of `n` of `configs`: the top scores, or a diverse pick (see `diverse_greedy`)."""
    if settings.diversity == 0:
        return np.arange(min(n, len(configs)))
    return diverse_greedy(configs, scores, n, alpha=settings.diversity, taken=taken)


def _select(
    history: History,
    sizes: list[int],
    settings: RoundSettings,
    result: AnnealResult,
    far: EvolveResult | None,
    n_far: int,
    rng: np.random.Generator,
    seconds: dict[str, float],
    model: CostModel,
) -> Round:
    """The round's batch: a diverse pick of the search's candidates, ε-mixed at random, then
    `n_far` of the `far` candidates (the explore share, already exploration: no ε), topped up
    at random where either found too few."""
    b = settings.batch_size
    m = len(sizes)
    start = time.perf_counter()
    picked = _pick(result.configs, result.scores, b - n_far, settings, np.empty((0, m), np.int64))
    near = result.configs[picked]
    near_scores = result.scores[picked].astype(np.float64)
    mixed = with_random_share(near, sizes, rng, epsilon=settings.epsilon, exclude=history.taken)
    sources = [
        "model" if np.array_equal(a, c) else "random" for a, c in zip(mixed, near, strict=True)
    ]
    scores = np.where(np.array(sources) == "model", near_scores, np.nan)
    selected = mixed
    if far is not None and len(far.configs):
        chosen = {tuple(int(v) for v in row) for row in selected}
        fresh = np.array([tuple(int(v) for v in row) not in chosen for row in far.configs])
        configs, far_scores = far.configs[fresh], far.scores[fresh]
        picked = _pick(configs, far_scores, n_far, settings, selected.reshape(-1, m))
        selected = np.vstack([selected.reshape(-1, m), configs[picked]])
        scores = np.concatenate([scores, far_scores[picked]])
        sources += ["explore"] * len(picked)
    if len(selected) < b:  # the searches found fewer fresh configs than asked: fill at random
        avoid = history.taken | {tuple(int(v) for v in row) for row in selected}
        n = b - len(selected)
        extra = unseen_random_configs(sizes, n, rng, avoid, per_round=4 * n, max_rounds=100)
        selected = np.vstack([selected.reshape(-1, m), extra]) if len(selected) else extra
        scores = np.concatenate([scores, np.full(len(extra), np.nan)])
        sources += ["random"] * len(extra)
    seconds["select"] = time.perf_counter() - start
    return Round(
        configs=selected,
        sources=sources,
        scores=scores,
        states=result.states,
        seconds=seconds,
        n_scored=result.n_scored,
        model=model,
    )
