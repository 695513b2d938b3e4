"""What a study has measured and has in flight, read from its trials, as knob indices."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from tensortune.trial_records import is_abandoned, stale_among, study_trials, trial_config

if TYPE_CHECKING:
    from tensortune.templates.knobs import ChoiceKnob


class KnobSpace:
    """A template's knobs as a grid of choice indices.

    Args:
        knobs: The template's knobs, in its order.
        complete: Called on a config that misses a knob, to name a value for it where the
            template can (a config stored before the template gained knobs, see
            `tensortune.templates.MetaScheduleTemplate.check`); a `ValueError` from it leaves
            the config out. Default None: such a config is left out.
    """

    def __init__(
        self,
        knobs: Sequence[ChoiceKnob],
        complete: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    ) -> None:
        self.knobs = list(knobs)
        self.sizes = [len(k.choices) for k in self.knobs]
        self._index = [{v: i for i, v in enumerate(k.choices)} for k in self.knobs]
        self._complete = complete

    def encode(self, config: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Choice indices of `config`, or None if it misses a knob (that `complete` cannot
        fill) or a value is outside it."""
        if self._complete is not None and any(k.name not in config for k in self.knobs):
            try:
                config = self._complete(config)
            except ValueError:
                return None
        try:
            return tuple(
                index[config[k.name]] for k, index in zip(self.knobs, self._index, strict=True)
            )
        except (KeyError, TypeError):
            return None

    def decode(self, indices: Sequence[int]) -> dict[str, Any]:
        return {k.name: k.choices[int(i)] for k, i in zip(self.knobs, indices, strict=True)}

    def names(self) -> set[str]:
        return {k.name for k in self.knobs}


@dataclasses.dataclass
class History:
    """Measured and pending configs of a study.

    Trials failed as stale (see `tensortune.trial_records.is_abandoned`) are in none of
    these: they measured nothing.

    Attributes:
        configs: ``(n, m)`` indices of finished configs (completed or failed).
        values: Objective values of `configs`, oriented so that higher is better; NaN for failed.
        taken: Every config finished, running or waiting, never to be proposed again.
        n_finished: Finished trials of the study, counted whether or not their params fit.
    """

    configs: np.ndarray
    values: np.ndarray
    taken: set[tuple[int, ...]]
    n_finished: int


def read_history(
    study: optuna.Study,
    space: KnobSpace,
    fresh: bool = False,
    memo: dict[int, tuple[int, ...] | None] | None = None,
    leave_out: Callable[[FrozenTrial], bool] | None = None,
) -> History:
    """The study's trials as a `History` over `space`.

    Args:
        study: The study to read.
        space: The knob space its configs are encoded in.
        fresh: Read the storage again instead of the trials Optuna cached for this `ask`.
            Default False; True after another process's claim was found, which the cache
            may predate.
        memo: Encoded configs of finished trials by trial number, of this study and `space`
            only, read and filled here: a finished trial's config never changes, so a sampler
            that keeps it encodes each trial once instead of once per ask (with 1000 trials,
            7 ms an ask). Default None: encode every trial.
        leave_out: Finished trials for which it returns True are only `taken`: not in
            `configs`, `values` or `n_finished`, as if another study had measured them.
            Default None: none left out.
    """
    finished_states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    trials = study_trials(study, cached=not fresh)
    stale = stale_among(study, trials)
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    configs, values, taken = [], [], set()
    n_finished = 0
    for trial in trials:
        if is_abandoned(trial, stale):
            continue  # its worker died before measuring: the config is free again
        finished = trial.state in finished_states
        if memo is not None and finished and trial.number in memo:
            indices = memo[trial.number]
        else:
            indices = space.encode(trial_config(trial))
            if memo is not None and finished:
                memo[trial.number] = indices
        left_out = finished and leave_out is not None and leave_out(trial)
        if finished and not left_out:
            n_finished += 1
        if indices is None:
            continue
        taken.add(indices)
        if finished and not left_out:
            configs.append(indices)
            value = trial.value if trial.state == TrialState.COMPLETE else None
            values.append(np.nan if value is None else (value if maximize else -value))
    m = len(space.sizes)
    return History(
        configs=np.asarray(configs, dtype=np.int64).reshape(-1, m),
        values=np.asarray(values, dtype=np.float64),
        taken=taken,
        n_finished=n_finished,
    )


def design_leads(history: History, design: np.ndarray) -> bool:
    """Whether the fastest config `history` measured from `design` beats the fastest it
    measured elsewhere (a failed config counts as slowest); False until each side has one.

    Args:
        history: The study's measured configs.
        design: ``(d, m)`` knob indices of the start-up design.
    """
    if not len(history.configs):
        return False
    from_design = (history.configs[:, None, :] == design[None, :, :]).all(axis=2).any(axis=1)
    if from_design.all() or not from_design.any():
        return False
    values = np.where(np.isfinite(history.values), history.values, -np.inf)
    return bool(values[from_design].max() > values[~from_design].max())


def training_targets(values: np.ndarray) -> np.ndarray:
    """Values scaled to [0, 1] with failed configs at 0: relative throughput for a positive
    objective such as GFLOP/s (AutoTVM's normalisation), min-max scaled otherwise."""
    ok = np.isfinite(values)
    out = np.zeros_like(values, dtype=np.float64)
    if not ok.any():
        return out
    good = values[ok]
    if good.min() >= 0:
        top = good.max()
        out[ok] = good / top if top > 0 else 0.0
    else:
        span = good.max() - good.min()
        out[ok] = (good - good.min()) / span if span > 0 else 1.0
    return out
