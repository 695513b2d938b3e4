"""Prior studies as training rows for the cost model: transfer across shapes and operators.

A source study's configs are rescheduled with its own template and encoded with the same
feature set as the new study's. The relation ("curve") features do not depend on the loop
nest's length or the operator, so rows from a conv2d study can train the model of a depthwise
or a matmul study. Throughputs are scaled per source workload (to its best) and, for the rank
loss, compared only within their workload, so that no two workloads need a common scale.

Source trials stay in their own studies: they are read, never copied into the new study.

How much a source counts follows the evidence (`source_weights`): once the study has measured
`MIN_EVIDENCE` configs of its own, a model trained on one source workload alone (its judge,
`fit_judges`) ranks them, and the source weighs in proportion to that ranking's Kendall tau,
down to nothing for a source whose ranking is no better than chance or reversed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import TrialState

from tensortune.errors import TensortuneError
from tensortune.sampler.history import KnobSpace, read_history, training_targets

if TYPE_CHECKING:
    from tensortune.cost_model import CostModel
    from tensortune.features import FeatureExtractor
    from tensortune.templates.knobs import ChoiceKnob
    from tensortune.workloads import Workload

#: How source rows weigh next to the study's own, each with the one line the CLIs show; the
#: first is the default. The rules themselves are `source_weights`'; why each exists:
#: ``"relative"`` lets a source fade once the study knows more than it does; ``"outranked"``
#: stops a source that orders the study's configs coarsely but not its best ones from steering
#: the search; ``"shared"`` lost to the evidence from three conv2d shapes to depthwise (the
#: count of source rows was not what hurt); ``"validated"`` keeps sources only while they help
#: the model itself; ``"capped"`` keeps a few hundred source rows at a third of a local row's
#: weight each from outvoting 8-48 measured configs of the study's own.
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
}
SOURCE_WEIGHTINGS = tuple(SOURCE_WEIGHTING_SUMMARIES)


def weighting_choices() -> str:
    """Every source weighting with its line (`SOURCE_WEIGHTING_SUMMARIES`), for a CLI's help."""
    return "; ".join(f"{name}: {line}" for name, line in SOURCE_WEIGHTING_SUMMARIES.items())


#: Which source rows a cost model that goes on training from round to round (the TreeGRU:
#: each fit costs passes over every row it is given) trains on, each with what it means; the
#: first is the default. The rule is `source_row_weights`'. ``"all"`` is the warm start before
#: 2026-12-05; where a source had faded to a few hundredths of a local row, its rows still
#: cost a warm TreeGRU study as much training time as at full weight.
SOURCE_ROWS_SUMMARIES = {
    "by-weight": "a share of each source's rows per fit as its weight is worth, none once its "
    "rows together weigh under a tenth of the study's own",
    "all": "every source row in every fit, at its weight",
}
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


@dataclasses.dataclass(frozen=True)
class SourceRows:
    """Measured configs of prior studies as feature rows.

    Attributes:
        features: ``(n, d)`` feature rows (configs that could not be scheduled left out).
        targets: ``(n,)`` throughput scaled to the best of its workload, failed configs at 0.
        groups: ``(n,)`` group id per row, 1 for the first source workload, 2 for the next.
        workloads: Workload key of each group, in id order.
        studies: Names of the studies read.
        best_configs: The sources' best configs, best first (by throughput relative to their
            workload's best, so every workload's winner comes early), at most 32.
    """

    features: np.ndarray
    targets: np.ndarray
    groups: np.ndarray
    workloads: list[str]
    studies: list[str]
    best_configs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def rows_per_workload(self) -> np.ndarray:
        """``(len(workloads),)`` rows of each source workload, in group order."""
        return np.bincount(self.groups - 1, minlength=len(self.workloads))  # groups count from 1


def check_sources(
    sources: Sequence[optuna.Study], target: str | None, study_name: str | None = None
) -> None:
    """Refuse sources that cannot warm-start a study of `target` (a JSON target key).

    Raises:
        TensortuneError: If a source was not made by tensortune, was measured on another
            target, has no completed trial, or is the study itself (`study_name`).
    """
    for source in sources:
        name = source.study_name
        attrs = source.user_attrs
        if "workload" not in attrs or "target" not in attrs:
            raise TensortuneError(
                f"source study {name!r} was not made by tensortune: it records no workload "
                "and target to rebuild its programs from"
            )
        if target is not None and attrs["target"] != target:
            raise TensortuneError(
                f"source study {name!r} was measured on {attrs['target']}, not on {target}: "
                "timings from another target would mislead the cost model"
            )
        if name == study_name:
            raise TensortuneError(f"study {name!r} cannot be its own transfer source")
        complete = source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not complete:
            raise TensortuneError(
                f"source study {name!r} has no completed trials: there is nothing to learn from"
            )


def same_space(sources: Sequence[optuna.Study], knobs: Sequence[ChoiceKnob]) -> bool:
    """Whether every one of `sources` (at least one) searches a design space with exactly
    `knobs`, names and choices in order, so that its configs are the study's own decisions
    (ResNet-18's 3x3 convolutions with and without the shortcut add, say). Makes each source's
    template (about 0.1 s for a MetaSchedule design space)."""
    from tensortune.storage import study_space, study_target, study_workload
    from tensortune.templates import template_for

    wanted = list(knobs)
    return bool(sources) and all(
        list(template_for(study_workload(s), study_target(s), study_space(s)).knobs) == wanted
        for s in sources
    )


#: Best source configs kept in `SourceRows.best_configs`.
_N_BEST = 32


def load_sources(
    sources: Sequence[optuna.Study],
    feature_set: str,
    length: int | None = None,
    processes: int = 1,
    extractors: dict[tuple[str, str, str], FeatureExtractor] | None = None,
    knobs: Sequence[ChoiceKnob] | None = None,
) -> SourceRows:
    """The measured configs of `sources` as feature rows (check them with `check_sources`).

    Studies of one workload are pooled into one group and scaled together.

    Args:
        sources: Prior tensortune studies, from any storage.
        feature_set: One of `tensortune.features.FEATURE_SETS`, the new study's.
        length: The length of the new study's own rows. Default None: not checked.
        processes: Processes that lower the sources' configs, this one included (see
            `tensortune.features.FeatureExtractor`). Default 1.
        extractors: The extractors of earlier calls, by workload key, space and feature
            set, used again and added to, so that a config lowered before is not lowered
            again (a study whose sources grow reads them again every batch). Default None:
            new ones, kept nowhere.
        knobs: The new study's knobs. Where given, rows of another length than
            `feature_set`'s usual one (decision features, ``"knob"`` on any template but the
            CPU one) are read from sources whose design space has these very knobs (names
            and choices, in order; `same_space`): each such row describes the same decisions
            as the study's own. Default None: rows of the usual length only.

    Raises:
        TensortuneError: If the new study's rows or a source's are not `feature_set`'s
            length (`tensortune.features.feature_length`), and not decision rows of a source
            with the study's `knobs`: decision features describe their own template's knobs
            only. The study's length is checked before any source is read.
    """
    from tensortune.features import FeatureExtractor, feature_length
    from tensortune.storage import study_space, study_target, study_workload
    from tensortune.templates import template_for

    expected = feature_length(feature_set)
    # Decision rows: comparable between studies of one design space, not beyond it.
    decisions = knobs is not None and length is not None and length != expected
    if decisions:
        assert length is not None
        expected = length
    elif length is not None and length != expected:
        raise TensortuneError(
            f"this study's {feature_set!r} rows describe its own decisions, which no source's "
            "compare with: transfer to it with feature_set='curve'"
        )

    # One group per workload and search space: the studies of a group share their knobs.
    by_workload: dict[tuple[str, str], list[optuna.Study]] = {}
    for source in sources:
        key = (source.user_attrs["workload"], study_space(source))
        by_workload.setdefault(key, []).append(source)
    features, targets, groups = [], [], []
    ranked: list[tuple[float, dict[str, Any]]] = []
    for group, (workload_space, studies) in enumerate(by_workload.items(), start=1):
        first = studies[0]
        memo_key = (*workload_space, feature_set)
        extractor = (extractors or {}).get(memo_key)
        if extractor is None:
            template = template_for(study_workload(first), study_target(first), study_space(first))
            extractor = FeatureExtractor(template, feature_set, processes=processes)
            if extractors is not None:
                extractors[memo_key] = extractor
        space = KnobSpace(extractor.template.knobs)
        if extractor.length != expected or (decisions and space.knobs != list(knobs or ())):
            raise TensortuneError(
                f"the {feature_set!r} rows of source study {first.study_name!r} "
                f"({study_space(first)} space) do not compare with another study's: "
                "transfer from it with feature_set='curve'"
            )
        configs, values = [], []
        for study in studies:
            history = read_history(study, space)
            configs.append(history.configs)
            values.append(history.values)
        decoded = [space.decode(r) for r in np.concatenate(configs)]
        scaled = training_targets(np.concatenate(values))
        rows = extractor(decoded)
        usable = ~np.isnan(rows).any(axis=1)
        features.append(rows[usable])
        targets.append(scaled[usable])
        ranked += [(float(scaled[i]), decoded[i]) for i in np.argsort(-scaled)[:_N_BEST]]
        groups.append(np.full(int(usable.sum()), group, dtype=np.int64))
    return SourceRows(
        features=np.concatenate(features) if features else np.empty((0, expected), np.float32),
        targets=np.concatenate(targets) if targets else np.empty(0),
        groups=np.concatenate(groups) if groups else np.empty(0, np.int64),
        workloads=[w if space == "template" else f"{w} in {space}" for w, space in by_workload],
        studies=[s.study_name for s in sources],
        best_configs=[c for _, c in sorted(ranked, key=lambda r: -r[0])[:_N_BEST]],
    )


def project_config(config: Mapping[str, Any], knobs: Sequence[ChoiceKnob]) -> dict | None:
    """`config` of another workload moved into `knobs`' space, or None where it cannot be.

    A value the target offers is kept; a tile split it does not offer becomes its nearest
    split with as many parts (by the distance of the factors' logarithms), since splits of
    another shape are rarely valid here; a missing knob or another value gives None.
    """
    out: dict[str, Any] = {}
    for knob in knobs:
        value = config.get(knob.name)
        if value in knob.choices:
            out[knob.name] = value
            continue
        if not (isinstance(value, str) and "x" in value):
            return None
        parts = value.count("x")
        splits = [c for c in knob.choices if isinstance(c, str) and c.count("x") == parts]
        if not splits:
            return None
        logs = _log_factors(value)
        out[knob.name] = min(splits, key=lambda c: float(np.abs(_log_factors(c) - logs).sum()))
    return out


def _log_factors(split: str) -> np.ndarray:
    return np.log([int(f) for f in split.split("x")])


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


def reversed_beyond_chance(taus: np.ndarray, n: int, sigmas: float = REVERSED_SIGMAS) -> np.ndarray:
    """Per tau, whether it is more than `sigmas` (default `REVERSED_SIGMAS`) standard deviations
    below 0, the spread of Kendall's tau between unrelated rankings of `n` items
    (``sqrt(2 (2n + 5) / (9 n (n - 1)))``: 0.29 at 8, 0.18 at 16, 0.12 at 32); NaN is not."""
    if n < 2:
        return np.zeros(len(taus), dtype=bool)
    spread = math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))
    return np.nan_to_num(taus, nan=0.0) < -sigmas * spread


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
            condemn it by its sign alone.
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
    weights = decay * trust
    if weighting == "capped" and rows is not None:
        mass = float(np.dot(weights, rows))
        if mass > n_local:
            weights *= n_local / mass
    return weights


#: What `source_studies` / ``--transfer-from`` take to find the sources by themselves.
AUTO = "auto"
#: Prior studies `find_sources` returns at most by default: a few close ones teach the model
#: the most, and each costs its rows' features once per new study.
AUTO_SOURCES = 4


def loop_extents(workload: Workload) -> tuple[list[int], list[int]]:
    """The extents of the spatial loops and of the reduction loops of the workload's main
    computation: the one with a reduction and the most iterations (the output's where none
    reduces), so that a fused bias or activation does not hide a dense layer's matmul."""
    try:
        tensors = workload.tensors()
    except TensortuneError:  # defined as a TIR function: read its blocks
        return _block_extents(workload)
    seen, stack, ops = set(), [tensors[-1].op], []
    while stack:
        op = stack.pop()
        if op.name in seen or not hasattr(op, "axis"):
            continue  # visited, or a placeholder
        seen.add(op.name)
        spatial = [int(axis.dom.extent) for axis in op.axis]
        reduction = [int(axis.dom.extent) for axis in op.reduce_axis]
        ops.append((bool(reduction), math.prod(spatial + reduction), spatial, reduction))
        stack.extend(t.op for t in op.input_tensors)
    _, _, spatial, reduction = max(ops, key=lambda o: o[:2])
    return spatial, reduction


def _block_extents(workload: Workload) -> tuple[list[int], list[int]]:
    """`loop_extents` of a workload's TIR blocks (for one defined as a ``PrimFunc``)."""
    from tvm import s_tir

    sch = s_tir.Schedule(workload.prim_func())
    blocks, ops = list(sch.get_child_blocks(sch.get_sblock("root"))), []
    while blocks:
        block = sch.get(blocks.pop())
        spatial = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 0]
        reduction = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 2]
        ops.append((bool(reduction), math.prod(spatial + reduction), spatial, reduction))
    _, _, spatial, reduction = max(ops, key=lambda o: o[:2])
    return spatial, reduction


def program_distance(a: Workload, b: Workload) -> float:
    """How unlike the programs of two workloads are: 0 for the same operator and loop nest.
    Another operator adds 1, each spatial or reduction loop one has and the other lacks adds
    1, and each of the two loop kinds adds the mean |log2| ratio of their extents, largest
    matched with largest."""
    distance = 0.0 if a.name == b.name else 1.0
    for mine, theirs in zip(loop_extents(a), loop_extents(b), strict=True):
        distance += abs(len(mine) - len(theirs))
        n = max(len(mine), len(theirs))
        if n:
            x = np.log2(sorted(mine, reverse=True) + [1] * (n - len(mine)))
            y = np.log2(sorted(theirs, reverse=True) + [1] * (n - len(theirs)))
            distance += float(np.abs(x - y).mean())
    return distance


def find_sources(
    storage: optuna.storages.BaseStorage,
    workload: Workload,
    target: str,
    limit: int = AUTO_SOURCES,
    exclude: str | None = None,
) -> list[tuple[optuna.Study, float]]:
    """The tensortune studies in `storage` measured on `target` (a JSON target key), nearest
    program first (`program_distance` to `workload`; more completed trials first among equals),
    with their distance: what ``--transfer-from auto`` warm-starts from.

    Studies of another target, not made by tensortune, of a workload not registered in this
    process, without a completed trial, or named `exclude` (the new study itself; default
    None) are passed over.

    Args:
        storage: Where to look.
        workload: The new study's workload.
        target: The new study's target key (`tensortune.storage.target_key`).
        limit: At most this many. Default `AUTO_SOURCES`.
        exclude: A study name to leave out. Default None.
    """
    from tensortune.storage import study_workload

    found = []
    for frozen in storage.get_all_studies():
        attrs = frozen.user_attrs
        if frozen.study_name == exclude or attrs.get("target") != target:
            continue
        if "workload" not in attrs:
            continue
        study = optuna.load_study(study_name=frozen.study_name, storage=storage)
        try:
            other = study_workload(study)
        except (KeyError, TensortuneError):
            continue
        n_complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        if n_complete:
            found.append((program_distance(workload, other), -n_complete, study.study_name, study))
    found.sort(key=lambda f: f[:3])
    return [(study, distance) for distance, _, _, study in found[:limit]]
