"""Where a model's trial budget goes: the task whose next batch should buy the most end-to-end
time, after Ansor's gradient-based task scheduler.

A task's share of one model run is ``weight × best seconds``. Each next batch goes to the task
with the largest expected gain: its share times the relative improvement it made over its last
`WINDOW` trials (the backward gradient), plus an optimistic ``share / trials`` term that keeps
young tasks from starving (Ansor uses the analogous forward term). Every task first gets one
batch. Plain functions of the tasks' states; no study in here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

#: Trials over which a task's recent improvement is measured.
WINDOW = 16


@dataclasses.dataclass(frozen=True)
class TaskState:
    """What the scheduler knows of a task.

    Attributes:
        weight: Calls per model run.
        bests: Best seconds after each finished trial so far (``inf`` until one succeeds).
    """

    weight: int
    bests: tuple[float, ...]

    @property
    def trials(self) -> int:
        return len(self.bests)

    @property
    def best(self) -> float:
        return self.bests[-1] if self.bests else math.inf


def expected_gain(state: TaskState, window: int = WINDOW) -> float:
    """Seconds of one model run the task's next batch is expected to save (a score: only the
    order matters); ``inf`` for a task that has no successful trial yet.

    Args:
        state: The task.
        window: Trials of the backward gradient. Default `WINDOW`.
    """
    if not math.isfinite(state.best):
        return math.inf
    share = state.weight * state.best
    before = state.bests[-window - 1] if state.trials > window else state.bests[0]
    improvement = (before - state.best) / before if math.isfinite(before) else 1.0
    return share * (improvement + 1.0 / state.trials)


def next_task(states: Sequence[TaskState], batch: int) -> int:
    """Index of the task to tune next: the first with fewer than `batch` trials (each task gets
    one batch first), else the one with the largest `expected_gain` (the first among equals)."""
    if not states:
        raise ValueError("no task to schedule")
    for index, state in enumerate(states):
        if state.trials < batch:
            return index
    gains = [expected_gain(s) for s in states]
    return max(range(len(states)), key=lambda i: gains[i])


def model_seconds(states: Sequence[TaskState]) -> float:
    """The model's run time as its tasks' best kernels add up (``Σ weight × best``); ``inf``
    while a task has no successful trial."""
    return sum(s.weight * s.best for s in states)
