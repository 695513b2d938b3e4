"""MeasureSettings.against_best: each candidate timed in turns with the fastest kernel so far."""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest

import tensortune
from tensortune.cli import main
from tensortune.measure import Measurer, MeasureSettings
from tensortune.measure.against_best import (
    machine_speed,
    runs_per_cost,
    scaled_costs,
    time_in_turns,
)
from tensortune.target import target_spec

CONFIG_64 = {
    "tile_i": "2x2x2x8",
    "tile_j": "1x1x4x16",
    "tile_k": "8x8",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 2,
    "unroll": 16,
    "accumulate": "off",
}


def test_costs_timed_while_the_machine_halved_its_speed_are_scaled_back():
    # The reference's recorded cost is 1 s; the machine runs it at 1 s, then at 2 s.
    costs = scaled_costs([3.0, 5.0, 6.0], [1.0, 1.0, 2.0, 2.0], reference_cost=1.0)
    assert costs == pytest.approx([3.0, 5.0 / 1.5, 3.0])
    assert machine_speed([1.0, 1.0, 2.0, 2.0], 1.0) == pytest.approx(1 / 1.5)
    with pytest.raises(ValueError, match="one more reference cost"):
        scaled_costs([1.0, 1.0], [1.0, 1.0], reference_cost=1.0)


def test_runs_per_cost_span_min_repeat_ms_and_never_fall_below_number():
    assert runs_per_cost(0.004, number=1, min_repeat_ms=30) == 8  # 8 x 4 ms spans 30 ms
    assert runs_per_cost(0.1, number=1, min_repeat_ms=30) == 1
    assert runs_per_cost(0.001, number=50, min_repeat_ms=30) == 50
    assert runs_per_cost(0.001, number=2, min_repeat_ms=0) == 2


def test_time_in_turns_puts_a_reference_run_on_each_side_of_every_candidate_run():
    calls: list[str] = []

    def candidate() -> float:
        calls.append("c")
        return 2.0

    def reference() -> float:
        calls.append("r")
        return 1.0

    costs, references = time_in_turns(candidate, reference, repeat=3)
    assert "".join(calls) == "rcrcrcr"
    assert costs == [2.0] * 3 and references == [1.0] * 4


def test_a_kernel_timed_against_itself_keeps_its_recorded_cost(fast_settings):
    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", 64, 64, 64))
    settings = dataclasses.replace(fast_settings, repeat=5, against_best=True)
    with Measurer(template, target_spec("llvm"), settings) as measurer:
        (first,) = measurer.measure([CONFIG_64])
        (second,) = measurer.measure([CONFIG_64])  # another build, timed against the first
    assert first.error is None and second.error is None, (first.error, second.error)
    assert math.isnan(first.machine_speed)  # nothing to time it against yet
    assert second.machine_speed > 0
    # Same code, timed in turns with it: scaled, its cost is the first one's give or take noise.
    assert 0.5 < second.cost / first.cost < 2.0, (second.costs, first.costs)


def test_trials_timed_against_the_best_record_the_machine_speed(storage_url):
    code = main(["tune", "matmul", "--shape", "16,16,16", "--trials", "4", "--repeat", "2",
                 "--min-repeat-ms", "2", "--storage", storage_url, "--sampler", "random",
                 "--seed", "0", "--against-best"])  # fmt: skip
    assert code == 0
    (summary,) = optuna.get_all_study_summaries(storage_url)
    study = optuna.load_study(study_name=summary.study_name, storage=storage_url)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 2
    # The first completed trial is the first reference; every later one is timed against one.
    assert "machine_speed" not in done[0].user_attrs
    assert all(t.user_attrs["machine_speed"] > 0 for t in done[1:])


def test_a_resumed_study_times_its_first_candidate_against_its_best(storage_url):
    settings = MeasureSettings(repeat=2, min_repeat_ms=2, against_best=True)

    def tuned(n_trials: int) -> optuna.Study:
        return tensortune.tune(
            "matmul", shape=dict(M=16, N=16, K=16), n_trials=n_trials, storage=storage_url,
            sampler="random", seed=0, settings=settings, show_progress=False,
        )  # fmt: skip

    def complete(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
        return [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]

    done = complete(tuned(3).trials)
    # A new study: its first kernel is the first reference, the others are timed against one.
    assert ["machine_speed" in t.user_attrs for t in done] == [False] + [True] * (len(done) - 1)
    again = tuned(2)
    assert len(again.trials) == 5 and complete(again.trials[3:])
    # Resumed, the study's best is built again and every new trial is timed against it.
    assert all(t.user_attrs["machine_speed"] > 0 for t in complete(again.trials[3:]))
