"""Finalists of one study: its best few distinct configs, built once and timed again in turns,
the fastest by its median chosen (`tensortune.finalists`)."""

from __future__ import annotations

import math

import optuna

import tensortune
from tensortune.finalists import fastest, finalist_trials, round_orders, time_finalists
from tensortune.measure import MeasureSettings
from tensortune.measure.measurer import Measurer, MeasureResult
from tensortune.target import target_spec


def _study_with(values: list[tuple[int, float | None]]) -> optuna.Study:
    """An in-memory study of one knob: (knob value, GFLOP/s or None for a failure) per trial."""
    study = optuna.create_study(direction="maximize")
    space = {"tile": optuna.distributions.IntDistribution(0, 9)}
    for tile, value in values:
        state = (
            optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        )
        study.add_trial(
            optuna.trial.create_trial(params={"tile": tile}, distributions=space, value=value,
                                      state=state)
        )  # fmt: skip
    return study


def test_finalists_are_the_best_distinct_configs_best_first():
    study = _study_with([(1, 10.0), (2, 30.0), (3, None), (2, 25.0), (4, 20.0), (5, 5.0)])
    chosen = finalist_trials(study, 3)
    # Config 2 was measured twice: it counts once, at its better value; the failure is out.
    assert [t.params["tile"] for t in chosen] == [2, 4, 1]
    assert [t.value for t in chosen] == [30.0, 20.0, 10.0]
    assert [t.params["tile"] for t in finalist_trials(study, 10)] == [2, 4, 1, 5]
    assert finalist_trials(_study_with([(1, None)]), 4) == []


def test_rounds_alternate_and_the_lowest_median_wins():
    assert round_orders(3, 3) == [[0, 1, 2], [2, 1, 0], [0, 1, 2]]
    assert round_orders(2, 1) == [[0, 1]]
    # The median decides, not one lucky reading; a finalist that failed (no costs) is out.
    assert fastest([[1.0, 5.0, 5.0], [2.0, 2.0, 3.0], []]) == 1
    assert fastest([[], []]) is None


def test_a_studys_finalists_are_timed_now_and_the_fastest_picked():
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", M=32, N=32, K=32))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for value in (3.0, 2.0, 1.0):  # made-up values: the best first by trial number
        trial = study.ask()
        template.suggest(trial)
        study.tell(trial, value)
    trials = finalist_trials(study, 3)
    with Measurer(template, target_spec("llvm"), MeasureSettings(repeat=2)) as measurer:
        pick = time_finalists(measurer, template, trials, rounds=3)
    assert pick is not None
    assert [n for n, _ in pick.finalists] == [t.number for t in trials]
    timed = [s for _, s in pick.finalists if math.isfinite(s)]
    # Real seconds timed now, and the pick the fastest of them by its median.
    assert timed and all(0 < s < 0.1 for s in timed)
    assert pick.seconds == min(timed)
    assert pick.config == study.trials[pick.trial].params


def test_a_failed_result_is_not_timed_again():
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", M=16, N=16, K=16))
    with Measurer(template, target_spec("llvm"), MeasureSettings(repeat=2)) as measurer:
        failed = MeasureResult(error="wrong result", stage="check")
        measurer.time_again([failed])
        assert failed.error == "wrong result" and failed.costs == []
