"""A study's trial records: the configs its trials claim, its stale marks, and which trials
measured nothing.

A sampler hands a trial its config before the trial has params, so the config is recorded in
the trial's system attrs (`CONFIG_ATTR`) where other workers see it as taken. A trial Optuna
failed because its heartbeat stopped (its worker was killed) is marked on the study
(`STALE_ATTR_PREFIX`), so that its config counts as never measured (`is_abandoned`).

This module sits below both `tensortune.storage` and `tensortune.sampler`; it needs only
Optuna. It is also the one place that reaches into Optuna's private API, where Optuna offers no
public path (each use names why):

- ``study._storage`` / ``study._study_id``: study system attrs have no public reader or writer
  since Optuna 5 removed ``Study.system_attrs`` / ``Study.set_system_attr``, and a sampler
  holds a `FrozenTrial`, which has no setter for trial system attrs.
- ``FrozenTrial._trial_id``: the storage's key of a trial; Optuna exposes only its number.
- ``study._get_trials(use_cache=True)``: the trials Optuna cached for the current ``ask``, as
  Optuna's own samplers read them; `optuna.Study.get_trials` always reads the storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tensortune.errors import TensortuneError

#: Trial user attr naming how the caches stood before its timed runs where they were not warm
#: (`tensortune.measure.MeasureSettings.cache`): its costs do not compare with others.
CACHE_ATTR = "cache"
#: The same for a trial timed with flushed caches before there were other cold states
#: (True), still read.
CACHE_FLUSHED_ATTR = "cache_flushed"
#: Trial system attr holding the config a sampler handed to a trial before its params exist,
#: so that other workers see it as taken.
CONFIG_ATTR = "tensortune:config"
#: Trial system attr saying where a trial's config came from (startup / model / random share).
PROPOSAL_ATTR = "tensortune:proposal"
#: Study system attr key prefix, followed by a trial number, marking a trial Optuna failed
#: because its heartbeat stopped (its worker was killed or lost the storage), written by
#: `mark_stale`, the stale-trial callback of `tensortune.storage.open_storage`. The mark lives
#: on the study because Optuna refuses attrs on a finished trial; the trial itself keeps only
#: its FAIL state.
STALE_ATTR_PREFIX = "tensortune:stale:"

#: ``failed_stage`` values of trials that failed before a measurement.
_UNMEASURED = ("device", "interrupted")
#: Trial states of a finished trial.
_FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


def trial_config(trial: FrozenTrial) -> Mapping[str, Any]:
    """The knob values of a trial: the config it was handed, with the values it was enqueued
    with on top (Optuna's suggest gives those precedence); its params if it has neither.

    Params come last: a running trial writes them one knob at a time, and another process
    reading them half-written would not see the config as taken."""
    claimed = trial.system_attrs.get(CONFIG_ATTR) or {}
    fixed = trial.system_attrs.get("fixed_params") or {}
    if claimed or fixed:
        return {**claimed, **fixed}
    return trial.params


def claim_config(
    study: optuna.Study, trial: FrozenTrial, config: Mapping[str, Any], proposal: dict[str, Any]
) -> None:
    """Record on `trial` the `config` a sampler hands it (`CONFIG_ATTR`) and where the config
    came from (`PROPOSAL_ATTR`), before the trial has params, so other workers see it taken."""
    # A sampler holds a FrozenTrial, which cannot set system attrs: only the storage can.
    study._storage.set_trial_system_attr(trial._trial_id, CONFIG_ATTR, dict(config))
    study._storage.set_trial_system_attr(trial._trial_id, PROPOSAL_ATTR, proposal)


def steered_by_sources(trial: FrozenTrial) -> bool:
    """Whether a warm study's model chose `trial`'s config while a prior study still weighed
    something in it: its `PROPOSAL_ATTR` records a positive source weight, and the config is
    not a point of the cold start-up design (``"startup"``), which no source chose."""
    proposal = trial.system_attrs.get(PROPOSAL_ATTR) or {}
    if proposal.get("source") == "startup":
        return False
    return any(weight > 0 for weight in (proposal.get("source_weights") or {}).values())


def study_trials(study: optuna.Study, cached: bool = False) -> list[FrozenTrial]:
    """All trials of `study`, not deep-copied (never mutate them).

    Args:
        study: The study to read.
        cached: Return the trials Optuna cached for the ``ask`` under way (a sampler's view,
            one read per trial however often it looks) instead of reading the storage again.
            Default False.
    """
    if cached:
        # No public path to Optuna's per-ask trial cache; its own samplers read it this way.
        return study._get_trials(deepcopy=False, use_cache=True)
    return study.get_trials(deepcopy=False)


def mark_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """Optuna's stale-trial callback: record on the study that `trial` was failed because its
    heartbeat stopped, not by a measurement (see `is_abandoned`)."""
    # The trial is FAIL already and Optuna refuses attrs on a finished trial: the study keeps
    # the mark, one key per trial so that workers marking at once never overwrite each other.
    # Study system attrs have no public writer since Optuna 5.
    study._storage.set_study_system_attr(
        study._study_id, f"{STALE_ATTR_PREFIX}{trial.number}", "heartbeat stopped"
    )


def stale_trial_numbers(study: optuna.Study) -> set[int]:
    """Numbers of the study's trials that Optuna failed as stale (`STALE_ATTR_PREFIX` marks),
    read from the storage, not from a cache."""
    # Study system attrs have no public reader since Optuna 5.
    attrs = study._storage.get_study_system_attrs(study._study_id)
    return {
        int(key.removeprefix(STALE_ATTR_PREFIX))
        for key in attrs
        if key.startswith(STALE_ATTR_PREFIX) and key.removeprefix(STALE_ATTR_PREFIX).isdigit()
    }


def stale_among(study: optuna.Study, trials: Sequence[FrozenTrial]) -> set[int]:
    """`stale_trial_numbers`, read from the storage only when one of `trials` failed: only a
    FAIL can be stale."""
    if any(t.state == TrialState.FAIL for t in trials):
        return stale_trial_numbers(study)
    return set()


def is_abandoned(trial: FrozenTrial, stale: set[int]) -> bool:
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


def is_finished(trial: FrozenTrial) -> bool:
    """Whether `trial` is COMPLETE, FAIL or PRUNED (abandoned or not)."""
    return trial.state in _FINISHED


def count_finished(study: optuna.Study) -> int:
    """Trials of `study` that are done: COMPLETE, PRUNED, or FAIL from a measurement (a trial
    failed as stale or for want of a device, see `is_abandoned`, measured nothing)."""
    finished = [t for t in study_trials(study) if is_finished(t)]
    stale = stale_among(study, finished)
    return sum(not is_abandoned(t, stale) for t in finished)


def claimed_by_another(study: optuna.Study, trial: FrozenTrial, config: Mapping[str, Any]) -> bool:
    """Whether another trial holds `config`, read after `trial`'s claim was written.

    Another process may have chosen the same config between this one reading the study and
    writing its claim. Each process writes, then checks, and chooses again on a match: of two
    colliding claims, the one checked last sees the other, so both can't be kept. A trial
    failed as stale holds nothing: its config is free again."""
    config = dict(config)
    others = [
        t
        for t in study_trials(study)
        if t.number != trial.number and dict(trial_config(t)) == config
    ]
    stale = stale_among(study, others)
    return any(not is_abandoned(t, stale) for t in others)


def trial_cache(trial: FrozenTrial) -> str:
    """How the caches stood before `trial`'s timed runs (`CACHE_ATTR`; a trial of an older
    study flagged `CACHE_FLUSHED_ATTR` was flushed; any other, warm)."""
    if CACHE_ATTR in trial.user_attrs:
        return str(trial.user_attrs[CACHE_ATTR])
    return "flushed" if trial.user_attrs.get(CACHE_FLUSHED_ATTR) else "warm"


def timed_cache(study: optuna.Study) -> str | None:
    """How the caches stood when the study's completed trials were timed (`trial_cache`);
    None before any completed; the first completed trial decides."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return trial_cache(trial)
    return None


def check_same_timing(study: optuna.Study, cache: str) -> None:
    """Refuse to resume a study whose trials were timed with the caches in another state than
    `cache` (one of `tensortune.measure.settings.CACHE_STATES`): warm, flushed and dirty
    timings of one kernel read 3-60 % apart, and the study's best would then mix them.

    Raises:
        TensortuneError: Where the study's completed trials were timed another way.
    """
    before = timed_cache(study)
    if before is None or before == cache:
        return
    raise TensortuneError(
        f"study {study.study_name!r} was timed with {before} caches and this run would time "
        f"with {cache} ones: resume it with --cache {before}, or choose another study name"
    )
