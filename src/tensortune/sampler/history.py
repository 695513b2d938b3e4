"""What a study has measured and has in flight, read from its trials, as knob indices."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import TrialState

if TYPE_CHECKING:
    from tensortune.templates.knobs import ChoiceKnob

#: Trial system attr holding the config a sampler handed to a trial before its params exist,
#: so that other workers see it as taken.
CONFIG_ATTR = "tensortune:config"
#: Trial system attr saying where a trial's config came from (startup / model / random share).
PROPOSAL_ATTR = "tensortune:proposal"
#: Study system attr key prefix, followed by a trial number, marking a trial Optuna failed
#: because its heartbeat stopped (its worker was killed or lost the storage), written by
#: `tensortune.storage.open_storage`'s stale-trial callback. The mark lives on the study because
#: Optuna refuses attrs on a finished trial; the trial itself keeps only its FAIL state.
STALE_ATTR_PREFIX = "tensortune:stale:"


class KnobSpace:
    """A template's knobs as a grid of choice indices.

    Args:
        knobs: The template's knobs, in its order.
    """

    def __init__(self, knobs: Sequence[ChoiceKnob]) -> None:
        self.knobs = list(knobs)
        self.sizes = [len(k.choices) for k in self.knobs]
        self._index = [{v: i for i, v in enumerate(k.choices)} for k in self.knobs]

    def encode(self, config: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Choice indices of `config`, or None if it misses a knob or a value is outside it."""
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

    Trials failed as stale (see `is_abandoned`) are in none of these: they measured nothing.

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


def trial_config(trial: optuna.trial.FrozenTrial) -> Mapping[str, Any]:
    """The knob values of a trial: the config it was handed, with the values it was enqueued
    with on top (Optuna's suggest gives those precedence); its params if it has neither.

    Params come last: a running trial writes them one knob at a time, and another process
    reading them half-written would not see the config as taken."""
    claimed = trial.system_attrs.get(CONFIG_ATTR) or {}
    fixed = trial.system_attrs.get("fixed_params") or {}
    if claimed or fixed:
        return {**claimed, **fixed}
    return trial.params


def stale_trial_numbers(study: optuna.Study) -> set[int]:
    """Numbers of the study's trials that Optuna failed as stale (`STALE_ATTR_PREFIX` marks),
    read from the storage, not from a cache."""
    attrs = study._storage.get_study_system_attrs(study._study_id)
    return {
        int(key.removeprefix(STALE_ATTR_PREFIX))
        for key in attrs
        if key.startswith(STALE_ATTR_PREFIX) and key.removeprefix(STALE_ATTR_PREFIX).isdigit()
    }


def stale_among(study: optuna.Study, trials: Sequence[optuna.trial.FrozenTrial]) -> set[int]:
    """`stale_trial_numbers`, read from the storage only when one of `trials` failed: only a
    FAIL can be stale."""
    if any(t.state == TrialState.FAIL for t in trials):
        return stale_trial_numbers(study)
    return set()


#: ``failed_stage`` values of trials that failed before a measurement.
_UNMEASURED = ("device", "interrupted")


def is_abandoned(trial: optuna.trial.FrozenTrial, stale: set[int]) -> bool:
    """Whether `trial` failed without a measurement: as stale, for want of a remote device
    (``failed_stage`` ``"device"``), or in a batch interrupted by Ctrl-C or an error
    (``"interrupted"``). It holds no config and is no failure to learn from, so its config may
    be proposed again.

    Args:
        trial: A trial of the study.
        stale: The study's `stale_trial_numbers`.
    """
    # The mark is written after Optuna's FAIL; checking the state too means no mark can ever
    # hide a measured result.
    if trial.state != TrialState.FAIL:
        return False
    return trial.number in stale or trial.user_attrs.get("failed_stage") in _UNMEASURED


def count_finished(study: optuna.Study) -> int:
    """Trials of `study` that are done: COMPLETE, PRUNED, or FAIL from a measurement (a trial
    failed as stale or for want of a device, see `is_abandoned`, measured nothing)."""
    trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
    done = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    finished = [t for t in trials if t.state in done]
    stale = stale_among(study, finished)
    return sum(not is_abandoned(t, stale) for t in finished)


def read_history(study: optuna.Study, space: KnobSpace, fresh: bool = False) -> History:
    """The study's trials as a `History` over `space`.

    Args:
        study: The study to read.
        space: The knob space its configs are encoded in.
        fresh: Read the storage again instead of the trials Optuna cached for this `ask`.
            Default False; True after another process's claim was found, which the cache
            may predate.
    """
    finished_states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    trials = study._get_trials(deepcopy=False, use_cache=not fresh)
    stale = stale_among(study, trials)
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    configs, values, taken = [], [], set()
    n_finished = 0
    for trial in trials:
        if is_abandoned(trial, stale):
            continue  # its worker died before measuring: the config is free again
        indices = space.encode(trial_config(trial))
        if trial.state in finished_states:
            n_finished += 1
        if indices is None:
            continue
        taken.add(indices)
        if trial.state in finished_states:
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
