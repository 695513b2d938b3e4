"""The prior studies one `CostModelSampler` study learns from, and what it keeps of them.

`tensortune.sampler.transfer` has the plain functions (rows, judges, weights, distances); this
holds their state for one study: which studies (``"auto"`` until found), their rows and judges
(read and fitted again only when the sources change, lowering only configs not lowered before),
the last round's weights, and whether the study dropped them because none ranked its own
configs better than chance. Sources that grow (a model run's other tasks, tuned beside the
study) get a new hearing once they hold twice the trials they held when dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.trial import TrialState

from tensortune.errors import TensortuneError
from tensortune.sampler.nearest_studies import AUTO, find_sources
from tensortune.sampler.source_weighting import fit_judges
from tensortune.sampler.transfer import (
    SourceRows,
    check_sources,
    load_sources,
    project_config,
    same_space,
)

if TYPE_CHECKING:
    from tensortune.cost_model import CostModel
    from tensortune.features import FeatureExtractor
    from tensortune.sampler.history import KnobSpace
    from tensortune.templates.knobs import ChoiceKnob
    from tensortune.workloads import Workload


#: How many times the completed trials they held when dropped the sources must hold to be
#: judged again (`WarmStart.use`).
READMIT_GROWTH = 2


class WarmStart:
    """The sources of one study.

    Args:
        studies: Prior studies, or `tensortune.sampler.nearest_studies.AUTO` to find them in the
            study's own storage on first use (`resolve`).
        n_starts: How many of the sources' best configs may seed the search (`starts`).
    """

    def __init__(self, studies: Sequence[optuna.Study] | str, n_starts: int) -> None:
        #: The prior studies, or `AUTO` until they are found.
        self.studies: list[optuna.Study] | str = AUTO if isinstance(studies, str) else list(studies)
        self.n_starts = n_starts
        #: Per source workload, the weight of its rows in the last model round.
        self.weights: dict[str, float] = {}
        #: True once every source weighed nothing and the study went on cold.
        self.dropped = False
        # Whether a source left the last round's fit as faded (`record`).
        self._faded = False
        #: How many times the study dropped its sources (they may come back, see `use`).
        self.drops = 0
        self._rows: SourceRows | None = None
        self._judges: list[CostModel | None] | None = None
        # What the rows were read from (`_signature`), and the extractors that lowered them.
        self._read_from: tuple[tuple[str, int], ...] = ()
        # The sources' trials when they were last dropped: they come back at twice as many.
        self._dropped_at = 0
        self._extractors: dict[tuple[str, str, str], FeatureExtractor] = {}

    @property
    def rows(self) -> SourceRows | None:
        """The sources' rows once `load` read them; None before, without sources, or dropped."""
        return self._rows

    def use(self, studies: Sequence[optuna.Study]) -> bool:
        """Learn from `studies` from now on. Where they are not the studies the rows were read
        from, or have completed trials since, the next `load` reads the rows again and the
        judges are fitted again; configs lowered before are not lowered again.

        Returns:
            Whether dropped sources come back: the study dropped them, and `studies` hold at
            least `READMIT_GROWTH` times the completed trials they held then (a source judged
            on its first 8 trials is judged again at 16, 32, ...). The caller starts over
            with them (`reset`).
        """
        self.studies = list(studies)
        if self._rows is not None and _signature(self.studies) != self._read_from:
            self._rows = None
            self._judges = None
        if not self.dropped:
            return False
        return _completed(self.studies) >= READMIT_GROWTH * max(self._dropped_at, 1)

    def resolve(self, study: optuna.Study, workload: Workload) -> None:
        """Replace `AUTO` by the studies `tensortune.sampler.nearest_studies.find_sources` finds in
        the study's own storage (none where the study records no target)."""
        if self.studies != AUTO:
            return
        target = study.user_attrs.get("target")
        if target is None:
            self.studies = []
            return
        # No public way from a Study to its storage; Optuna's own code reads it so.
        found = find_sources(study._storage, workload, target, exclude=study.study_name)
        self.studies = [source for source, _ in found]

    def share_space(self, knobs: Sequence[ChoiceKnob]) -> bool:
        """Whether there are sources and every one searches a design space with exactly
        `knobs` (`tensortune.sampler.transfer.same_space`); False before `resolve`."""
        if isinstance(self.studies, str) or not self.studies:
            return False
        return same_space(self.studies, knobs)

    def load(
        self,
        study: optuna.Study,
        feature_set: str,
        length: int | None = None,
        processes: int = 1,
        knobs: Sequence[ChoiceKnob] | None = None,
    ) -> SourceRows | None:
        """The sources' rows in `feature_set`, read once; None without sources or dropped.
        `length`: the length of the study's own rows (default None: not checked); `processes`
        and `knobs` (the study's, for decision rows): as `load_sources`' (defaults 1 and
        None).

        Raises:
            TensortuneError: Where `study` records no target, or a source is of another
                target, has no completed trial or was not made by tensortune, or the sources'
                rows are not as long as the study's (`load_sources`).
        """
        if not self.studies or isinstance(self.studies, str) or self.dropped:
            return None
        if self._rows is None:
            target = study.user_attrs.get("target")
            if target is None:
                raise TensortuneError(
                    f"study {study.study_name!r} records no target, so its transfer sources "
                    "cannot be checked: create it with tensortune.tune or "
                    "tensortune.storage.create_study"
                )
            check_sources(self.studies, target, study.study_name)
            self._read_from = _signature(self.studies)
            self._rows = load_sources(
                self.studies, feature_set, length, processes, self._extractors, knobs
            )
        return self._rows

    def judges(self, make_model: Callable[[], CostModel]) -> list[CostModel | None]:
        """One model per source workload (`make_model()` each), fitted on its rows alone once
        per study; none before `load` or once dropped."""
        if self._rows is None:
            return []
        if self._judges is None:
            self._judges = fit_judges(self._rows, make_model)
        return self._judges

    def starts(self, space: KnobSpace) -> np.ndarray | None:
        """Up to `n_starts` of the sources' best configs that fit `space`'s knobs, as indices
        (`tensortune.sampler.transfer.project_config`); None without any."""
        if self._rows is None or not self.n_starts:
            return None
        rows: list[tuple[int, ...]] = []
        for config in self._rows.best_configs:
            moved = project_config(config, space.knobs)
            indices = space.encode(moved) if moved is not None else None
            if indices is not None and indices not in rows:
                rows.append(indices)
        rows = rows[: self.n_starts]
        return np.asarray(rows, dtype=np.int64) if rows else None

    def record(self, weights: np.ndarray, faded: np.ndarray | None = None) -> None:
        """Keep a model round's weights, one per source workload of `rows`, and which of them
        left the fit as faded (default None: none; see `Fit.source_faded`)."""
        if self._rows is not None:
            self.weights = {
                key: round(float(w), 4)
                for key, w in zip(self._rows.workloads, weights, strict=True)
            }
            self._faded = faded is not None and bool(np.any(faded))

    def silent(self) -> bool:
        """Whether the last round weighed every source at nothing by the evidence of how they
        rank the study's configs (none had faded, which the study outgrows and keeps
        searching as it was), and they are not dropped."""
        weighed_nothing = bool(self.weights) and not any(self.weights.values())
        return weighed_nothing and not self._faded and not self.dropped

    def reset(self, drop: bool = False) -> None:
        """Forget the rows and judges (a new template: they are read again); with `drop`, go
        on without sources, their weights shown at zero; without, take dropped ones back."""
        self._rows = None
        self._judges = None
        if drop and isinstance(self.studies, list):
            self.drops += 1
            self._dropped_at = _completed(self.studies)
        self.dropped = drop
        self._faded = False
        self.weights = {k: 0.0 for k in self.weights if drop}


def _signature(studies: Sequence[optuna.Study]) -> tuple[tuple[str, int], ...]:
    """Each study's name and completed trials: what the rows read from `studies` depend on."""
    states = (TrialState.COMPLETE,)
    return tuple((s.study_name, len(s.get_trials(deepcopy=False, states=states))) for s in studies)


def _completed(studies: Sequence[optuna.Study]) -> int:
    """The completed trials of `studies` in all (`_signature`'s counts summed)."""
    return sum(n for _, n in _signature(studies))
