"""Prior studies as training rows for the cost model: transfer across shapes and operators.

A source study's configs are rescheduled with its own template and encoded with the same
feature set as the new study's. The relation ("curve") features do not depend on the loop
nest's length or the operator, so rows from a conv2d study can train the model of a depthwise
or a matmul study. Throughputs are scaled per source workload (to its best) and, for the rank
loss, compared only within their workload, so that no two workloads need a common scale.

Source trials stay in their own studies: they are read, never copied into the new study.

How much each source counts, round by round, is `tensortune.sampler.source_weighting`'s;
which studies ``auto`` finds, `tensortune.sampler.nearest_studies`'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import TrialState

from tensortune.errors import TensortuneError
from tensortune.sampler.history import KnobSpace, read_history, training_targets

if TYPE_CHECKING:
    from tensortune.features import FeatureExtractor
    from tensortune.templates.knobs import ChoiceKnob


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
        space = KnobSpace(extractor.template.knobs, extractor.template.check)
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
