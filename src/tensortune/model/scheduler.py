"""Where a model's trial budget goes: the task whose next batch should buy the most end-to-end
time, after Ansor's gradient-based task scheduler.

A task's share of one model run is ``weight × best seconds``. Each next batch goes to the task
with the largest expected gain: its share times the relative improvement it made over its last
`WINDOW` trials (the backward gradient), plus a forward term, the larger of two guesses of what
more trials will bring (Ansor's two): an optimistic ``1 / trials`` that keeps young tasks from
starving, and the distance to what tasks of its kind already reach, a task at under
``1 / SIMILAR_REACH`` of the best FLOP/s of its group (the model's other convolutions, say)
being expected to get there. That second guess is what sends trials to a heavy task that
stalled on a poor kernel: ResNet-18's 512-channel 3x3 convolution once kept a third of the
FLOP/s of the 256-channel one after 24 trials while the first guess alone gave it no more.
It also keeps a small task that cannot reach its kind's rate in play (a 1x1 convolution took
164 of ResNet-18's 1000 trials); fading the guess as ``WINDOW / trials`` stopped that, but left
the model's estimate 12-18 % behind at 500 trials on two seeds (``studies/README.md``).
Comparing a task only with those of its kind that reduce no more terms per output (a 1x1
convolution then has no 3x3 peers) put the estimate 4-5 % ahead at 1000 trials on two seeds,
but its builds timed 0.66-0.91x the old ones side by side: reverted too.
Every task first gets one batch. Plain functions of the tasks' states; no study in here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

#: Trials over which a task's recent improvement is measured.
WINDOW = 16
#: A task is expected to reach the best FLOP/s of its group divided by this (Ansor's beta, 2:
#: tasks of one kind differ in shape, and some shapes run slower at their best).
SIMILAR_REACH = 2.0


@dataclasses.dataclass(frozen=True)
class TaskState:
    """What the scheduler knows of a task.

    Attributes:
        weight: Calls per model run.
        bests: Best seconds after each finished trial so far (``inf`` until one succeeds).
        flops: Floating-point operations of one call. Default 0: unknown, no group guess.
        group: The kind of task (see `tensortune.model.tasks.ModelTask.kind`) whose best
            FLOP/s this one is expected to approach. Default ``""``: none.
    """

    weight: int
    bests: tuple[float, ...]
    flops: float = 0.0
    group: str = ""

    @property
    def trials(self) -> int:
        return len(self.bests)

    @property
    def best(self) -> float:
        return self.bests[-1] if self.bests else math.inf

    @property
    def flops_per_s(self) -> float:
        """FLOP/s of its best kernel (0 while unknown)."""
        return self.flops / self.best if self.flops > 0 and math.isfinite(self.best) else 0.0


def expected_gain(state: TaskState, group_flops_per_s: float = 0.0, window: int = WINDOW) -> float:
    """Seconds of one model run the task's next batch is expected to save (a score: only the
    order matters); ``inf`` for a task that has no successful trial yet.

    Args:
        state: The task.
        group_flops_per_s: The best FLOP/s among the tasks of its group. Default 0: no guess
            from the group.
        window: Trials of the backward gradient. Default `WINDOW`.
    """
    if not math.isfinite(state.best):
        return math.inf
    share = state.weight * state.best
    before = state.bests[-window - 1] if state.trials > window else state.bests[0]
    improvement = (before - state.best) / before if math.isfinite(before) else 1.0
    forward = 1.0 / state.trials
    if state.flops > 0 and group_flops_per_s > 0:
        reachable_s = SIMILAR_REACH * state.flops / group_flops_per_s
        forward = max(forward, (state.best - reachable_s) / state.best)
    return share * (improvement + forward)


def group_flops_per_s(states: Sequence[TaskState]) -> dict[str, float]:
    """Per group of two or more tasks, the best FLOP/s any of them reached (a task alone in
    its group has nothing to compare with)."""
    members: dict[str, list[TaskState]] = {}
    for state in states:
        if state.group:
            members.setdefault(state.group, []).append(state)
    return {
        group: max(s.flops_per_s for s in alike)
        for group, alike in members.items()
        if len(alike) > 1
    }


def next_task(states: Sequence[TaskState], batch: int) -> int:
    """Index of the task to tune next: the first with fewer than `batch` trials (each task gets
    one batch first), else the one with the largest `expected_gain` (the first among equals)."""
    if not states:
        raise ValueError("no task to schedule")
    for index, state in enumerate(states):
        if state.trials < batch:
            return index
    reach = group_flops_per_s(states)
    gains = [expected_gain(s, reach.get(s.group, 0.0)) for s in states]
    return max(range(len(states)), key=lambda i: gains[i])


def model_seconds(states: Sequence[TaskState]) -> float:
    """The model's run time as its tasks' best kernels add up (``Σ weight × best``); ``inf``
    while a task has no successful trial."""
    return sum(s.weight * s.best for s in states)
