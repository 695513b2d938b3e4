"""Timing a candidate in turns with a reference kernel, and scaling its costs by the reference.

Why: the speed of a cloud guest swings while a study runs. On a 2-vCPU Emerald Rapids guest
NumPy's sgemm flipped between about 195 and 300 GFLOP/s every second or two, and a study's
best configs re-timed after tuning read 0.8-2.6x what tuning had recorded. A candidate's
costs, timed in a tenth of a second, then say as much about the moment as about the config,
and the search learns from, and the study reports, whichever config was timed in a fast
moment. Timed in turns with a fixed kernel of the same workload, each cost is scaled by how
fast that kernel ran just before and just after it (`scaled_costs`), so that what remains is
the candidate's speed relative to the reference, expressed on the scale of the reference's
own recorded cost.

The reference is the fastest kernel the measurer has timed so far (`Reference`): close to the
candidates that matter, so it reacts to the machine's state as they do, and fast, so that its
runs cost little. Its recorded cost is itself scaled when it was timed against the one before
it, so every cost of a measurer shares the scale of the first kernel it timed. A candidate
that beats the reference is timed against it a second time, and that timing's costs are
recorded and become the new reference's: the first timing was picked for being fast, and a
chain of such picks drifted the scale on a 2-vCPU guest until a matmul's recorded GFLOP/s
exceeded the guest's peak (449 against 204-250 for the vendor, re-timed).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tensortune.templates.weight_packing import PackedWeight


@dataclasses.dataclass(frozen=True)
class Reference:
    """The kernel candidates are timed against.

    Attributes:
        library: Path of its compiled kernel (a file of the measurer's folder).
        packed: The arguments its kernel takes packed (see `tensortune.measure.worker_tasks`).
        cost: Its recorded median cost in seconds, on the measurer's scale.
    """

    library: str
    packed: tuple[PackedWeight, ...]
    cost: float


def runs_per_cost(seconds: float, number: int, min_repeat_ms: float) -> int:
    """Runs of a kernel of about `seconds` per run in one cost: at least `number`, and enough
    to span `min_repeat_ms`. Fixed once per kernel, because TVM's `time_evaluator` would grow
    them from `number` again on each call, which costs about 2.6 times `min_repeat_ms` per call
    when a timing in turns makes a call per cost."""
    if min_repeat_ms <= 0 or seconds <= 0:
        return number
    return max(number, math.ceil(min_repeat_ms / 1000 / seconds))


def time_in_turns(
    candidate: Callable[[], float], reference: Callable[[], float], repeat: int
) -> tuple[list[float], list[float]]:
    """Time the reference, then the candidate and the reference again, `repeat` times: each
    call returns one cost in seconds. Returns the candidate's `repeat` costs and the
    reference's ``repeat + 1``, so that every candidate cost has a reference cost on each
    side."""
    references = [reference()]
    costs = []
    for _ in range(repeat):
        costs.append(candidate())
        references.append(reference())
    return costs, references


def scaled_costs(
    costs: Sequence[float], reference_costs: Sequence[float], reference_cost: float
) -> list[float]:
    """Each of `costs` times `reference_cost` over the mean of the reference's costs timed
    just before and just after it (`reference_costs`, one more than `costs`, as
    `time_in_turns` returns them): the cost the candidate would have had had the machine run
    the reference at its recorded cost."""
    if len(reference_costs) != len(costs) + 1:
        raise ValueError(
            f"need one more reference cost than costs, got {len(reference_costs)} and {len(costs)}"
        )
    return [
        cost * reference_cost / ((before + after) / 2)
        for cost, before, after in zip(costs, reference_costs, reference_costs[1:], strict=False)
    ]


def machine_speed(reference_costs: Sequence[float], reference_cost: float) -> float:
    """How fast the machine ran the reference beside a candidate, relative to its recorded
    cost: above 1 when faster. The median over the reference's runs."""
    return reference_cost / statistics.median(reference_costs)
