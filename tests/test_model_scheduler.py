"""The model's task scheduler: plain functions of the tasks' states, no study."""

from __future__ import annotations

import math

import pytest

from tensortune.model.scheduler import (
    SIMILAR_REACH,
    TaskState,
    expected_gain,
    group_flops_per_s,
    model_seconds,
    next_task,
)
from tensortune.model.tasks import ModelTask


def _flat(
    best: float, trials: int, weight: int = 1, flops: float = 0.0, group: str = ""
) -> TaskState:
    """A task that found `best` seconds at its first trial and nothing better since."""
    return TaskState(weight, (best,) * trials, flops, group)


def test_every_task_gets_one_batch_first_and_a_failed_task_is_retried_first():
    states = [_flat(1e-3, 8), _flat(1e-3, 3), TaskState(1, ())]
    assert next_task(states, batch=8) == 1
    assert next_task([_flat(1e-3, 8), TaskState(1, (math.inf,) * 8)], batch=8) == 1
    with pytest.raises(ValueError):
        next_task([], batch=8)


def test_a_task_improving_now_is_preferred_to_an_equal_share_that_stalled():
    stalled = _flat(2e-3, 32)
    improving = TaskState(1, (4e-3,) * 16 + (2e-3,) * 16)
    assert next_task([stalled, improving], batch=8) == 1
    # Weight counts: the same stalled kernel run twice per model outweighs it once.
    assert expected_gain(_flat(2e-3, 32, weight=2)) == pytest.approx(2 * expected_gain(stalled))


def test_a_stalled_task_far_below_its_kind_gets_the_batch_and_a_lone_kind_gets_no_guess():
    # Two convolutions of equal FLOPs: one at 100 GFLOP/s, the other stuck at 25 after 24
    # trials; a matmul improving by 10 % in its window with twice the share of either.
    fast = _flat(1e-3, 40, flops=1e8, group="conv2d")
    stuck = _flat(4e-3, 24, flops=1e8, group="conv2d")
    matmul = TaskState(1, (8.8e-3,) * 30 + (8e-3,) * 10, 1e9, "matmul")
    reach = group_flops_per_s([fast, stuck, matmul])
    assert reach == {"conv2d": pytest.approx(1e11)}  # the matmul is alone in its kind
    assert next_task([fast, stuck, matmul], batch=8) == 1
    # Its forward term is the way to half the best FLOP/s of its kind: 4 ms -> 2 ms.
    reachable = SIMILAR_REACH * stuck.flops / reach["conv2d"]
    assert expected_gain(stuck, reach["conv2d"]) == pytest.approx(4e-3 - reachable)
    # Without the group's guess it would lose to the matmul (only 1/24 of its share).
    assert expected_gain(stuck) < expected_gain(matmul)
    # A task already within reach of its kind's best keeps the optimistic 1/trials.
    assert expected_gain(fast, reach["conv2d"]) == pytest.approx(1e-3 / 40)


def test_the_model_estimate_adds_each_share_and_is_unknown_until_every_task_ran():
    assert model_seconds([_flat(1e-3, 8, weight=2), _flat(3e-3, 8)]) == pytest.approx(5e-3)
    assert math.isinf(model_seconds([_flat(1e-3, 8), TaskState(1, ())]))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("fused_conv2d9_add7_add8_relu4", "conv2d"),
        ("fused_conv2d_add_relu", "conv2d"),
        ("fused_conv2d_winograd2_add5_add6_relu3", "conv2d_winograd"),
        ("fused_conv2d_winograd_add1_relu1", "conv2d_winograd"),
        ("fused_matmul3_add1", "matmul"),
        ("matmul2", "matmul"),
        ("layer_norm", "layer"),
    ],
)
def test_a_task_s_kind_is_its_leading_operator(name, kind):
    assert ModelTask(name, "0" * 16, 1, "").kind == kind
