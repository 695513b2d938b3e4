"""Each task's kernel for the build, picked by timing its best few configs again, side by side.

A study's best trial is the fastest of up to hundreds of timings taken minutes apart. On a
machine whose speed drifts (a cloud VM and its neighbours), that best is partly the luck of
when it was timed: on a 2-vCPU guest, ResNet-18's best kernels took 1.3-1.9x their tuning-time
seconds when timed again, and the order among a task's top configs changed. Timing a task's
top configs again in turns, within seconds of each other, compares them under the same
conditions; the build takes the fastest of them.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from tensortune.measure import Measurer, MeasureSettings
from tensortune.model.tuning import ModelTuning
from tensortune.trial_records import CACHE_FLUSHED_ATTR

#: Configs of each task `pick_finalists` times again (its study's best few). The export's own
#: default is 1, none: on ResNet-18 (two seeds, 2026-11-29, ``studies/README.md``) builds with
#: finalists ran 1.01x those of the studies' bests, 95 % interval 0.98-1.04, a tie.
FINALISTS = 4
#: Times each finalist is timed, the order reversed each time, so that a drift of the machine's
#: speed during the rounds favours none.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Pick:
    """The kernel a task is built with.

    Attributes:
        config: Its config.
        seconds: Its median seconds over the re-timing rounds.
        trial: Its trial's number in the task's study.
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
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ranked = sorted(
        (t for t in complete if t.value is not None), key=lambda t: (-t.value, t.number)
    )
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


def pick_finalists(
    tuning: ModelTuning,
    studies: Sequence[Any] | None = None,
    count: int = FINALISTS,
    rounds: int = ROUNDS,
    settings: MeasureSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Pick | None]:
    """Per task, its kernel for the build: the fastest of its study's best `count` configs
    (`finalist_trials`), each built once and timed `rounds` times in turns (`round_orders`).

    Args:
        tuning: The model's tasks, templates and target (`tensortune.model.tuning`).
        studies: Per task, its study, None for an untuned one. Default None: `tuning`'s own.
            A benchmark passes its studies as they stood at a smaller budget.
        count: Finalists per task. Default `FINALISTS`.
        rounds: Timings of each finalist. Default `ROUNDS`.
        settings: How they are built and timed. Default None: `MeasureSettings()`, with the
            caches flushed before each run where the studies' trials were timed so.
        progress: Called with a line per task. Default None: printed to stderr.

    Returns:
        Per task, its `Pick`; None where there is nothing to choose (no study, fewer than two
        configs measured, or ``count < 2``): the build takes the study's best as it stands.
        A task none of whose finalists can be timed now also gets None.
    """
    studies = list(tuning.studies if studies is None else studies)
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    finalists = [finalist_trials(s, count) if s is not None and count > 1 else [] for s in studies]
    todo = [i for i, trials in enumerate(finalists) if len(trials) > 1]
    picks: list[Pick | None] = [None] * len(studies)
    if not todo:
        return picks
    if settings is None:
        cold = any(t.user_attrs.get(CACHE_FLUSHED_ATTR) for i in todo for t in finalists[i])
        settings = MeasureSettings(flush_cache=cold)
    with Measurer(tuning.templates[todo[0]], tuning.target, settings) as measurer:
        for done, index in enumerate(todo, 1):
            picks[index] = _pick(measurer, tuning.templates[index], finalists[index], rounds)
            say(_line(done, len(todo), tuning.tasks[index].name, finalists[index], picks[index]))
    return picks


def _pick(
    measurer: Measurer, template: Any, trials: list[optuna.trial.FrozenTrial], rounds: int
) -> Pick | None:
    measurer.use_template(template)
    orders = round_orders(len(trials), rounds)
    results = measurer.measure([dict(t.params) for t in trials])  # built once, timed in order
    costs = [list(r.costs) for r in results]
    for order in orders[1:]:
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


def _line(
    done: int, total: int, name: str, trials: list[optuna.trial.FrozenTrial], pick: Pick | None
) -> str:
    head = f"[finalists {done}/{total}] {name}:"
    if pick is None:
        return f"{head} none of its {len(trials)} best configs ran again; its study's best is built"
    best = pick.finalists[0]
    if pick.trial == best[0]:
        return f"{head} its study's best, trial {pick.trial}, stays ({pick.seconds * 1e6:.1f} us)"
    return (
        f"{head} trial {pick.trial} ({pick.seconds * 1e6:.1f} us) over its study's best, "
        f"trial {best[0]} ({best[1] * 1e6:.1f} us timed again)"
    )
