"""How much a prior study's rows count next to the study's own, round by round.

Every weighting starts from a decay (`source_weight`: halved every ``half_life`` of the study's
own measured configs). The default then follows the evidence: once the study has measured
`MIN_EVIDENCE` configs, a model trained on one source workload alone (its judge, `fit_judges`)
ranks them, and the source weighs in proportion to that ranking's Kendall tau (`judge_taus`),
down to nothing for a source whose ranking is no better than chance or reversed
(`source_weights`). A cost model that goes on training from round to round takes a draw of a
source's rows as large as its weight is worth (`source_row_weights`), with ``"by-weight"``
rows none once it has faded (`faded_sources`). The rows themselves come from
`tensortune.sampler.transfer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tensortune.cost_model import CostModel
    from tensortune.sampler.transfer import SourceRows

#: The study's own measured configs from which ``"beyond-chance"`` cuts a source within chance:
#: on 8 the band is ±0.29, and cutting there dropped sources of matmul + dense → batch_matmul
#: whose picks led (trials to 90 % of the best known 94 against 44); the start-up's own check
#: (`drop_outpaced`) judges the sources before then.
CHANCE_FROM = 16

#: How source rows weigh next to the study's own, each with the one line the CLIs show; the
#: first is the default. The rules themselves are `source_weights`'; why each exists:
#: ``"relative"`` lets a source fade once the study knows more than it does; ``"outranked"``
#: stops a source that orders the study's configs coarsely but not its best ones from steering
#: the search; ``"shared"`` lost to the evidence from three conv2d shapes to depthwise (the
#: count of source rows was not what hurt); ``"validated"`` keeps sources only while they help
#: the model itself; ``"capped"`` keeps a few hundred source rows at a third of a local row's
#: weight each from outvoting 8-48 measured configs of the study's own; ``"beyond-chance"``
#: stops a source unrelated to the study (depthwise conv2d for matmul) that ranks its configs
#: a little above 0 by luck from steering it at a small weight for a hundred trials.
SOURCE_WEIGHTING_SUMMARIES = {
    "evidence": "the half-life's decay times how well each source ranks the study's own configs",
    "relative": "the evidence's, with the bar for full trust raised to how well the study's "
    "own configs rank each other",
    "outranked": "the evidence's, cut further as the study's own ranking overtakes the source's",
    "shared": "the evidence's, split evenly among the source workloads",
    "decay": "the half-life's decay alone, whatever the sources' ranking",
    "guarded": "the decay, and nothing for a source that ranks the study's configs reversed "
    "beyond chance",
    "validated": "the evidence's, and none once a model with them ranks held-out configs worse "
    "than one without",
    "capped": "the evidence's, scaled so that the sources' rows together weigh at most as much "
    "as the study's own",
    "beyond-chance": f"the evidence's, and from the study's {CHANCE_FROM}th config on nothing "
    "for a source whose ranking is within one standard deviation of chance",
}
SOURCE_WEIGHTINGS = tuple(SOURCE_WEIGHTING_SUMMARIES)


def weighting_choices() -> str:
    """Every source weighting with its line (`SOURCE_WEIGHTING_SUMMARIES`), for a CLI's help."""
    return "; ".join(f"{name}: {line}" for name, line in SOURCE_WEIGHTING_SUMMARIES.items())


#: Which source rows a cost model that goes on training from round to round (the TreeGRU:
#: each fit costs passes over every row it is given) trains on, each with what it means; the
#: first is the default. The rule is `source_row_weights`'. ``"all"`` is the warm start before
#: 2026-12-05; where a source had faded to a few hundredths of a local row, its rows still
#: cost a warm TreeGRU study as much training time as at full weight. ``"by-weight"``, the
#: default before ``"drawn"``, also drops a source once it has faded (`faded_sources`): that
#: cut a faint late pull that still helped, and saved little, a faded source's draw being a few
#: dozen rows (``studies/README.md``, source rows drawn without the fade).
SOURCE_ROWS_SUMMARIES = {
    "drawn": "a share of each source's rows per fit as its weight is worth, however little that is",
    "by-weight": "a share of each source's rows per fit as its weight is worth, none once its "
    "rows together weigh under a tenth of the study's own",
    "all": "every source row in every fit, at its weight",
}
#: The source rows that are drawn by weight (`source_row_weights`) rather than all taken.
DRAWN_SOURCE_ROWS = ("drawn", "by-weight")
SOURCE_ROWS = tuple(SOURCE_ROWS_SUMMARIES)
#: With ``"by-weight"``, a source whose rows together weigh less than this share of the study's
#: own measured configs leaves the fit: the study's rows decide the ranking by then, and the
#: source's would cost training time at any weight.
FADED_SHARE = 0.1

#: The weightings that compare each source with the study's own ranking (`local_tau`).
WEIGHTINGS_AGAINST_OWN = ("relative", "outranked")
#: The weighting that cross-validates the model with its sources against one without.
VALIDATED = "validated"
#: Folds of `local_tau`'s cross-validation.
LOCAL_FOLDS = 4
#: The study's own measured configs before a source's ranking of them counts: with fewer, one
#: swapped pair moves Kendall's tau by more than 0.05 and the decay alone decides.
MIN_EVIDENCE = 8
#: The Kendall tau at and above which a source keeps its full (decayed) weight.
FULL_TAU = 0.5
#: Standard deviations below 0 at which a source's Kendall tau counts as reversed beyond
#: chance (``"guarded"``): one-sided, about 2 % of unrelated sources would be dropped.
REVERSED_SIGMAS = 2.0
#: Standard deviations above 0 that a source's Kendall tau must exceed to weigh anything with
#: ``"beyond-chance"``: one-sided, about 16 % of unrelated sources pass one round, and few
#: pass every round.
CHANCE_SIGMAS = 1.0


def source_weight(n_local: int, half_life: float) -> float:
    """Weight of one source row next to a local row's 1 after `n_local` local measurements:
    halved every `half_life` of them (AutoTVM halved its history model's margin every 64)."""
    return float(0.5 ** (n_local / half_life))


def fit_judges(prior: SourceRows, make_model: Callable[[], CostModel]) -> list[CostModel | None]:
    """One cost model per source workload of `prior`, trained on that workload's rows alone
    (`make_model` makes a fresh one), in group order; None for a workload whose rows cannot
    rank anything (fewer than two, or all alike). Fit once per study: the sources do not
    change."""
    judges: list[CostModel | None] = []
    for group in range(1, len(prior.workloads) + 1):
        mine = prior.groups == group
        if mine.sum() < 2 or np.ptp(prior.targets[mine]) == 0:
            judges.append(None)
            continue
        judges.append(make_model().fit(prior.features[mine], prior.targets[mine]))
    return judges


def judge_taus(judges: Sequence[CostModel | None], X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau between each judge's predictions on the study's own feature rows `X` and
    their scaled targets `y` (1: the source orders them as measured, -1: reversed); NaN for a
    missing judge or where `y` cannot be ranked (fewer than two rows, or all alike)."""
    from tensortune.cost_model import kendall_tau

    taus = np.full(len(judges), np.nan)
    if len(y) < 2 or np.ptp(y) == 0:
        return taus
    for i, judge in enumerate(judges):
        if judge is not None:
            taus[i] = kendall_tau(judge.predict(X)[0], y)
    return taus


def local_tau(
    make_model: Callable[[], CostModel],
    X: np.ndarray,
    y: np.ndarray,
    seed: int = 0,
    prior: SourceRows | None = None,
    prior_weights: np.ndarray | None = None,
) -> float:
    """How well the study's own configs rank each other: Kendall's tau of `LOCAL_FOLDS`-fold
    cross-validated predictions (a model made by `make_model` per fold, trained on the other
    folds) against `y`; NaN where `y` cannot be ranked or is too short to fold. The folds are
    drawn with `seed` (default 0), so two calls with one seed hold out the same configs.

    With `prior` rows (default None: none), every fold trains on them too, each source
    workload's rows weighing its entry of `prior_weights` (default None: 1 each) next to a
    local row's 1; a workload at 0 is left out."""
    from tensortune.cost_model import kendall_tau

    if len(y) < 2 * LOCAL_FOLDS or np.ptp(y) == 0:
        return float("nan")
    if prior is not None and prior_weights is None:
        prior_weights = np.ones(len(prior.workloads))
    fold = np.random.default_rng(seed).permutation(len(y)) % LOCAL_FOLDS
    predicted = np.empty(len(y))
    for k in range(LOCAL_FOLDS):
        held = fold == k
        if np.ptp(y[~held]) == 0:
            return float("nan")
        model = make_model()
        if prior is not None and prior_weights is not None:
            fit_with_sources(model, X[~held], y[~held], prior, prior_weights)
        else:
            model.fit(X[~held], y[~held])
        predicted[held] = model.predict(X[held])[0]
    return kendall_tau(predicted, y)


def fit_with_sources(
    model: CostModel,
    X: np.ndarray,
    y: np.ndarray,
    prior: SourceRows,
    weights: np.ndarray,
    row_weights: np.ndarray | None = None,
) -> CostModel:
    """`model` fit on the study's rows `X`, `y` (group 0, weight 1 each) and the `prior` rows,
    each source workload's rows its own group weighing its entry of `weights`, or each row its
    entry of `row_weights` where given (default None: by workload; see `source_row_weights`);
    a row at 0 is left out, not fit at weight 0."""
    if row_weights is None:
        row_weights = weights[prior.groups - 1]  # groups count from 1
    kept = row_weights > 0
    return model.fit(
        np.vstack([X, prior.features[kept]]),
        np.concatenate([y, prior.targets[kept]]),
        groups=np.concatenate([np.zeros(len(y), np.int64), prior.groups[kept]]),
        sample_weight=np.concatenate([np.ones(len(y)), row_weights[kept]]),
    )


def faded_sources(
    weights: np.ndarray, rows: np.ndarray, n_local: int, share: float = FADED_SHARE
) -> np.ndarray:
    """Per source workload, whether its `rows` together weigh (at `weights` each) less than
    `share` (default `FADED_SHARE`) of the study's `n_local` own configs; none before the
    study measured any, and none at weight 0: the evidence ruled that one out, and a study
    whose sources all are ruled out drops them (`WarmStart.silent`)."""
    weights = np.asarray(weights)
    return (weights > 0) & (weights * np.asarray(rows) < share * n_local)


def source_row_weights(
    prior: SourceRows,
    weights: np.ndarray,
    faded: np.ndarray,
    loss: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per row of `prior`, its weight in one fit with ``"by-weight"`` source rows: 0 for a
    workload at weight 0 or `faded` (`faded_sources`); all rows at their weight for one at 1
    or more; else a random draw of its rows (with `rng`) at weight 1, the rest at 0, so that
    the fit costs what the workload's weight is worth and, over draws, weighs what it would
    have at full size. For the rank loss, which compares pairs of one workload's rows, a
    share ``sqrt(weight)`` of the rows is drawn (a pair is in with probability `weight`,
    at least one pair); for ``"reg"`` a share `weight`."""
    out = np.zeros(len(prior))
    for group, (w, gone) in enumerate(zip(weights, faded, strict=True), start=1):
        members = np.flatnonzero(prior.groups == group)
        if w <= 0 or gone or not len(members):
            continue
        if w >= 1:
            out[members] = w
            continue
        share = math.sqrt(w) if loss == "rank" else w
        least = 2 if loss == "rank" else 1
        count = min(len(members), max(least, round(share * len(members))))
        out[rng.choice(members, size=count, replace=False)] = 1.0
    return out


def chance_spread(n: int) -> float:
    """The standard deviation of Kendall's tau between unrelated rankings of `n` items (at least
    2): ``sqrt(2 (2n + 5) / (9 n (n - 1)))``, 0.29 at 8, 0.18 at 16, 0.12 at 32, 0.09 at 64."""
    return math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))


def reversed_beyond_chance(taus: np.ndarray, n: int, sigmas: float = REVERSED_SIGMAS) -> np.ndarray:
    """Per tau, whether it is more than `sigmas` (default `REVERSED_SIGMAS`) standard deviations
    (`chance_spread` of `n` items) below 0; NaN is not."""
    if n < 2:
        return np.zeros(len(taus), dtype=bool)
    return np.nan_to_num(taus, nan=0.0) < -sigmas * chance_spread(n)


def within_chance(taus: np.ndarray, n: int, sigmas: float = CHANCE_SIGMAS) -> np.ndarray:
    """Per tau, whether it is at most `sigmas` (default `CHANCE_SIGMAS`) standard deviations
    (`chance_spread` of `n` items) above 0, as an unrelated ranking's would be; NaN is not
    (nothing ranked yet), nor is any tau of fewer than 2 items."""
    if n < 2:
        return np.zeros(len(taus), dtype=bool)
    return np.nan_to_num(taus, nan=np.inf) <= sigmas * chance_spread(n)


def source_weights(
    taus: np.ndarray,
    n_local: int,
    half_life: float,
    weighting: str = SOURCE_WEIGHTINGS[0],
    min_evidence: int = MIN_EVIDENCE,
    full_tau: float = FULL_TAU,
    own_tau: float = float("nan"),
    with_sources_tau: float = float("nan"),
    rows: np.ndarray | None = None,
    chance_from: int = CHANCE_FROM,
) -> np.ndarray:
    """Weight of one row of each source workload next to a local row's 1.

    Args:
        taus: Per source workload, how well it ranks the study's own configs (`judge_taus`).
        n_local: The study's own measured configs.
        half_life: See `source_weight`, the decay every weighting starts from.
        weighting: One of `SOURCE_WEIGHTINGS`. Default ``"evidence"``: with at least
            `min_evidence` local configs, the decay times ``clip(tau / full_tau, 0, 1)``; a
            NaN tau (nothing to rank yet) keeps the decay alone. ``"relative"``: the same with
            ``max(full_tau, own_tau)`` in place of `full_tau`. ``"outranked"``: the
            evidence's weight times ``clip(2 tau / own_tau - 1, 0, 1)`` where `own_tau` is
            above 0: full while the source ranks as well as the study's own configs rank each
            other, nothing at half that or below. ``"shared"``: the evidence's weight divided
            by the number of source workloads. ``"decay"``: the decay alone. ``"guarded"``:
            the decay, 0 for a source `reversed_beyond_chance` on `n_local` configs. A source
            whose tau is near 0 keeps its weight: a ranking of 8-16 configs is too noisy to
            condemn it by its sign alone. ``"beyond-chance"``: the evidence's weight, and
            from `chance_from` local configs on 0 for a source `within_chance` on `n_local`
            configs, so that one ranking them no better than an unrelated source would stops
            steering the study (and once all do, the study drops them).
        min_evidence: Default `MIN_EVIDENCE`.
        full_tau: Default `FULL_TAU`.
        own_tau: How well the study's own configs rank each other (`local_tau`), read by
            `WEIGHTINGS_AGAINST_OWN` and ``"validated"`` only. Default NaN: not known,
            `full_tau` alone.
        with_sources_tau: The same with the sources in every fold at the evidence's weights
            (`local_tau` with ``prior``), read by ``"validated"`` only: below `own_tau`, every
            source weighs nothing. Default NaN: not known, the evidence's weights stand.
        rows: Per source workload, its number of rows, read by ``"capped"`` only: from
            `min_evidence` local configs on, the evidence's weights are scaled so that
            ``sum(weights * rows)`` is at most `n_local`. Default None: not known, no cap.
        chance_from: Read by ``"beyond-chance"`` only. Default `CHANCE_FROM`.
    """
    if weighting not in SOURCE_WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; choose one of {SOURCE_WEIGHTINGS}")
    decay = np.full(len(taus), source_weight(n_local, half_life))
    if weighting == "shared":  # split from the start, the evidence's rule on top
        decay /= max(len(taus), 1)
    if weighting == "decay" or n_local < min_evidence:
        return decay
    if weighting == "guarded":
        return np.where(reversed_beyond_chance(taus, n_local), 0.0, decay)
    bar = full_tau
    if weighting == "relative" and np.isfinite(own_tau):
        bar = max(full_tau, own_tau)
    trust = np.clip(np.nan_to_num(taus, nan=bar) / bar, 0.0, 1.0)
    if weighting == "outranked" and np.isfinite(own_tau) and own_tau > 0:
        versus_own = 2 * np.nan_to_num(taus, nan=own_tau) / own_tau - 1
        trust = np.minimum(trust, np.clip(versus_own, 0.0, 1.0))
    if weighting == VALIDATED and with_sources_tau < own_tau:  # False where either is NaN
        return np.zeros(len(taus))
    if weighting == "beyond-chance" and n_local >= chance_from:
        trust = np.where(within_chance(taus, n_local), 0.0, trust)
    weights = decay * trust
    if weighting == "capped" and rows is not None:
        mass = float(np.dot(weights, rows))
        if mass > n_local:
            weights *= n_local / mass
    return weights
