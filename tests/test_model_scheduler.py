"""The model's task scheduler: plain functions of the tasks' states, no study."""

from __future__ import annotations

import math

import pytest

from tensortune.model.scheduler import (
    SIMILAR_REACH,
    TaskState,
    expected_gain,
    model_seconds,
    next_task,
    peer_flops_per_s,
)
from tensortune.model.tasks import ModelTask


def _flat(
    best: float,
    trials: int,
    weight: int = 1,
    flops: float = 0.0,
    group: str = "",
    reduction: int = 0,
) -> TaskState:
    """A task that found `best` seconds at its first trial and nothing better since."""
    return TaskState(weight, (best,) * trials, flops, group, reduction)


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
    reach = peer_flops_per_s([fast, stuck, matmul])
    assert reach == [pytest.approx(1e11)] * 2 + [0.0]  # the matmul is alone in its kind
    assert next_task([fast, stuck, matmul], batch=8) == 1
    # Its forward term is the way to half the best FLOP/s of its kind: 4 ms -> 2 ms.
    reachable = SIMILAR_REACH * stuck.flops / reach[1]
    assert expected_gain(stuck, reach[1]) == pytest.approx(4e-3 - reachable)
    # Without the group's guess it would lose to the matmul (only 1/24 of its share).
    assert expected_gain(stuck) < expected_gain(matmul)
    # A task already within reach of its kind's best keeps the optimistic 1/trials.
    assert expected_gain(fast, reach[0]) == pytest.approx(1e-3 / 40)


def test_a_task_is_measured_only_against_peers_that_reduce_no_more_terms():
    # ResNet-18's case: a 1x1 convolution over 64 channels at 40 GFLOP/s beside 3x3 ones over
    # 576 and 4608 terms at 130 and 120, and a 3x3 one stuck at 30.
    one_by_one = _flat(0.32e-3, 120, flops=12.8e6, group="conv2d", reduction=64)
    early = _flat(1.78e-3, 80, flops=231e6, group="conv2d", reduction=576)
    late = _flat(1.93e-3, 80, flops=231e6, group="conv2d", reduction=4608)
    stuck = _flat(7.7e-3, 24, flops=231e6, group="conv2d", reduction=2304)
    reach = peer_flops_per_s([one_by_one, early, late, stuck])
    # The 1x1 one is its own only peer: no guess beyond 1/trials, where against the whole
    # kind it was expected to gain (0.32 - 0.098) / 0.32 of its time.
    assert reach[0] == pytest.approx(one_by_one.flops_per_s)
    assert expected_gain(one_by_one, reach[0]) == pytest.approx(0.32e-3 / 120)
    # The longest reduction is measured against every one of its kind, the stuck task against
    # the shorter ones, the 576-term one itself among them: their guesses are as before.
    assert reach[1] == reach[2] == reach[3] == pytest.approx(early.flops_per_s)
    assert next_task([one_by_one, early, late, stuck], batch=8) == 3
    # Where either reduction is unknown, the whole kind is compared, as before.
    unknown = _flat(0.32e-3, 120, flops=12.8e6, group="conv2d")
    assert peer_flops_per_s([unknown, early])[0] == pytest.approx(early.flops_per_s)


def test_the_model_estimate_adds_each_share_and_is_unknown_until_every_task_ran():
    assert model_seconds([_flat(1e-3, 8, weight=2), _flat(3e-3, 8)]) == pytest.approx(5e-3)
    assert math.isinf(model_seconds([_flat(1e-3, 8), TaskState(1, ())]))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("fused_conv2d9_add7_add8_relu4", "conv2d"),
        ("fused_conv2d_add_relu", "conv2d"),
        ("fused_matmul3_add1", "matmul"),
        ("matmul2", "matmul"),
        ("layer_norm", "layer"),
    ],
)
def test_a_task_s_kind_is_its_leading_operator(name, kind):
    assert ModelTask(name, "0" * 16, 1, "").kind == kind
