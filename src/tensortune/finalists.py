"""Finalists: a study's best few configs built once and timed again in turns, side by side.

A study's best trial is the fastest of up to hundreds of timings taken minutes apart. On a
machine whose speed drifts (a cloud VM and its neighbours), that best is partly the luck of
when it was timed, and the order among a study's top configs can change when they are timed
again. Timing the top configs in turns, within seconds of each other, compares them under the
same conditions. This module holds the choice for one study; `tensortune.model.finalists`
applies it to every task of a model.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import optuna

from tensortune.measure import Measurer, MeasureSettings
from tensortune.measure.settings import CACHE_STATES
from tensortune.trial_records import trial_cache

#: Configs of a study timed again when finalists are asked for (its best few). The model
#: export's default is 1, none: on ResNet-18 (two seeds, 2026-11-29, ``studies/README.md``)
#: builds with finalists ran 1.01x those of the studies' bests, 95 % interval 0.98-1.04, a tie.
#: On 20 single-operator studies each pick, judged by a second re-timing, ran 1.03x the
#: study's best (0.98-1.10, a tie; ``studies/finalists_operators.py``), and on the 90 studies
#: of the transfer pairs at 128 trials 1.01x (0.99-1.03; ``studies/transfer.py --finalists``),
#: so the single-operator export takes the study's best unless asked (``--finalists``).
FINALISTS = 4
#: Times each finalist is timed, the order reversed each time, so that a drift of the machine's
#: speed during the rounds favours none.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Pick:
    """The config chosen among a study's finalists.

    Attributes:
        config: Its config.
        seconds: Its median seconds over the re-timing rounds.
        trial: Its trial's number in the study.
        finalists: ``(trial number, median seconds)`` of every finalist timed again, in the
            study's order (best first); ``nan`` seconds for one that failed now.
    """

    config: dict[str, Any]
    seconds: float
    trial: int
    finalists: tuple[tuple[int, float], ...]


def finalist_trials(study: Any, count: int) -> list[optuna.trial.FrozenTrial]:
    """The complete trials of `study` with the `count` highest values, one per config (a
    config measured twice counts once, at its better value), best first."""
    return best_distinct(study.get_trials(deepcopy=False), count)


def best_distinct(
    trials: Iterable[optuna.trial.FrozenTrial], count: int
) -> list[optuna.trial.FrozenTrial]:
    """The complete ones of `trials` with the `count` highest values, one per config (at its
    better value; the earlier trial on a tie), best first."""
    done = [
        (t.value, t)
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None
    ]
    ranked = [t for _, t in sorted(done, key=lambda vt: (-vt[0], vt[1].number))]
    seen: set[tuple] = set()
    chosen = []
    for trial in ranked:
        key = tuple(sorted(trial.params.items()))
        if key in seen:
            continue
        seen.add(key)
        chosen.append(trial)
        if len(chosen) == count:
            break
    return chosen


def round_orders(count: int, rounds: int) -> list[list[int]]:
    """The order of `count` finalists in each of `rounds` rounds: forward, backward, forward..."""
    forward = list(range(count))
    return [forward if r % 2 == 0 else forward[::-1] for r in range(rounds)]


def fastest(costs: Sequence[Sequence[float]]) -> int | None:
    """Index of the finalist with the lowest median of its `costs` (seconds); None when every
    one's are empty (all failed)."""
    medians = [(statistics.median(c), i) for i, c in enumerate(costs) if c]
    return min(medians)[1] if medians else None


def retiming_settings(trials: Iterable[optuna.trial.FrozenTrial]) -> MeasureSettings:
    """How finalists are timed again: `MeasureSettings`' defaults, with the caches as the
    first of `trials` found them before each run (`trial_cache`; a study's trials share
    one state: `tensortune.trial_records.check_same_timing`), since costs of one state do
    not compare with another's."""
    return MeasureSettings(cache=next((trial_cache(t) for t in trials), CACHE_STATES[0]))


def time_finalists(
    measurer: Measurer,
    template: Any,
    trials: Sequence[optuna.trial.FrozenTrial],
    rounds: int = ROUNDS,
) -> Pick | None:
    """The fastest of `trials`' configs (a study's finalists, best first): each built once
    with `measurer` and timed `rounds` times in turns (`round_orders`).

    Args:
        measurer: An open measurer for the study's target; it is switched to `template`.
        template: The study's template.
        trials: The finalists (`finalist_trials`).
        rounds: Timings of each finalist. Default `ROUNDS`.

    Returns:
        The `Pick`, or None when none of them can be built and timed now.
    """
    measurer.use_template(template)
    results = measurer.measure([dict(t.params) for t in trials])  # built once, timed in order
    costs = [list(r.costs) for r in results]
    for order in round_orders(len(trials), rounds)[1:]:
        measurer.time_again([results[i] for i in order])
        for i in order:
            costs[i] = costs[i] + list(results[i].costs) if results[i].error is None else []
    best = fastest(costs)
    if best is None:
        return None
    medians = [statistics.median(c) if c else float("nan") for c in costs]
    return Pick(
        dict(trials[best].params),
        medians[best],
        trials[best].number,
        tuple((t.number, m) for t, m in zip(trials, medians, strict=True)),
    )


def pick_study_finalist(
    study: Any,
    template: Any,
    target: dict[str, Any],
    count: int = FINALISTS,
    rounds: int = ROUNDS,
) -> Pick | None:
    """The fastest of `study`'s best `count` configs (`finalist_trials`), each built for
    `target` and timed again `rounds` times in turns on this host (`time_finalists`, with
    `retiming_settings`).

    Args:
        study: A tensortune study.
        template: The study's template (`tensortune.templates.template_for`).
        target: The study's target (`tensortune.storage.study_target`).
        count: Finalists. Default `FINALISTS`.
        rounds: Timings of each finalist. Default `ROUNDS`.

    Returns:
        The `Pick`; None where there is nothing to choose (``count < 2``, or fewer than two
        distinct configs measured) or none of the finalists can be built and timed here now.
    """
    trials = finalist_trials(study, count) if count > 1 else []
    if len(trials) < 2:
        return None
    with Measurer(template, target, retiming_settings(trials)) as measurer:
        return time_finalists(measurer, template, trials, rounds)
