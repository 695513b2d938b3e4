"""Each task's kernel for the build, picked among its study's finalists (`tensortune.finalists`).

On a 2-vCPU guest, ResNet-18's best kernels took 1.3-1.9x their tuning-time seconds when timed
again, and the order among a task's top configs changed. Each task's top configs are timed
again in turns, within seconds of each other, and the build takes the fastest of them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from tensortune.finalists import (
    FINALISTS,
    ROUNDS,
    Pick,
    finalist_trials,
    retiming_settings,
    time_finalists,
)
from tensortune.measure import Measurer, MeasureSettings
from tensortune.model.tuning import ModelTuning


def pick_finalists(
    tuning: ModelTuning,
    studies: Sequence[Any] | None = None,
    count: int = FINALISTS,
    rounds: int = ROUNDS,
    settings: MeasureSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Pick | None]:
    """Per task, its kernel for the build: the fastest of its study's best `count` configs
    (`finalist_trials`), each built once and timed `rounds` times in turns
    (`tensortune.finalists.time_finalists`).

    Args:
        tuning: The model's tasks, templates and target (`tensortune.model.tuning`).
        studies: Per task, its study, None for an untuned one. Default None: `tuning`'s own.
            A benchmark passes its studies as they stood at a smaller budget.
        count: Finalists per task. Default `FINALISTS`.
        rounds: Timings of each finalist. Default `ROUNDS`.
        settings: How they are built and timed. Default None: `MeasureSettings()`, with the
            caches as the studies' trials found them before each run
            (`tensortune.finalists.retiming_settings`).
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
        settings = retiming_settings(t for i in todo for t in finalists[i])
    with Measurer(tuning.templates[todo[0]], tuning.target, settings) as measurer:
        for done, index in enumerate(todo, 1):
            picks[index] = time_finalists(
                measurer, tuning.templates[index], finalists[index], rounds
            )
            say(_line(done, len(todo), tuning.tasks[index].name, finalists[index], picks[index]))
    return picks


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
