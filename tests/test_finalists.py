"""Finalists: a task's best few configs built once and timed again in turns, the fastest of
them written to the model's database in place of its study's best."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import optuna
import pytest

from tensortune.errors import TensortuneError
from tensortune.finalists import Pick, fastest, finalist_trials, round_orders
from tensortune.measure import MeasureSettings
from tensortune.measure.measurer import Measurer, MeasureResult

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from tensortune.model import build, check_outputs, from_torch, run, write_database  # noqa: E402
from tensortune.model.database import RECORDS_FILE  # noqa: E402
from tensortune.model.finalists import pick_finalists  # noqa: E402
from tensortune.model.tuning import model_tuning  # noqa: E402
from tests.test_model import SmallNet  # noqa: E402  (a conv and a linear layer: two tasks)


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


def _seeded_tuning(tmp_path, per_task: int = 3):  # type: ignore[no-untyped-def]
    """The model's tuning state with `per_task` random configs of each tunable task recorded
    in its study at made-up values, best first by trial number; nothing measured yet."""
    torch.manual_seed(0)
    program = from_torch(SmallNet().eval(), [torch.randn(1, 3, 8, 8)], name="small")
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    tuning = model_tuning(program, "llvm", storage, create=True, channels_last=False)
    for index, template in enumerate(tuning.templates):
        if not template.knobs:
            continue
        study = optuna.create_study(
            study_name=tuning.study_names[index], storage=storage, direction="maximize",
            sampler=optuna.samplers.RandomSampler(seed=index),
        )  # fmt: skip
        for rank in range(per_task):
            trial = study.ask()
            template.suggest(trial)
            trial.set_user_attr("cost_s", 1e-3 * (rank + 1))
            study.tell(trial, 100.0 - rank)
        tuning.studies[index] = study
    return tuning


def test_finalists_are_timed_again_and_the_fastest_is_built(tmp_path):
    tuning = _seeded_tuning(tmp_path)
    tuned = [i for i, s in enumerate(tuning.studies) if s is not None]
    assert len(tuned) == 2
    lines: list[str] = []
    picks = pick_finalists(tuning, count=3, rounds=2, progress=lines.append)
    assert len(lines) == 2 and all(line.startswith("[finalists ") for line in lines)
    for index, pick in enumerate(picks):
        if index not in tuned:
            assert pick is None
            continue
        assert pick is not None
        numbers = [t.number for t in finalist_trials(tuning.studies[index], 3)]
        assert [n for n, _ in pick.finalists] == numbers
        assert pick.trial in numbers
        # Timed now: real seconds, not the made-up 1-3 ms, and the pick the fastest of them.
        timed = [s for _, s in pick.finalists if math.isfinite(s)]
        assert 0 < pick.seconds == min(timed) < 1e-3
        chosen = tuning.studies[index].trials[pick.trial]
        assert pick.config == chosen.params
    # One finalist (or none asked for): nothing to choose, the study's best stands.
    assert pick_finalists(tuning, count=1) == [None] * len(picks)

    folder = str(tmp_path / "db")
    assert write_database(tuning.tasks, tuning.studies, tuning.target, folder, picks) == 3
    program = tuning.program
    executable = build(program, tuning.target, folder)
    x = program.inputs[0].random(np.random.default_rng(0))
    check_outputs(run(executable, [x]), program.reference([x]))


def test_the_database_holds_the_pick_not_the_studys_best(tmp_path):
    tuning = _seeded_tuning(tmp_path)
    index = next(i for i, s in enumerate(tuning.studies) if s is not None)
    last = tuning.studies[index].trials[-1]  # the study's worst
    picks: list[Pick | None] = [None] * len(tuning.tasks)
    picks[index] = Pick(dict(last.params), 0.0123, last.number, ((0, 1.0), (last.number, 0.0123)))
    folder = str(tmp_path / "db")
    write_database(tuning.tasks, tuning.studies, tuning.target, folder, picks)
    with open(os.path.join(folder, RECORDS_FILE)) as f:
        records = [json.loads(line) for line in f]
    seconds = sorted(record[1][1][0] for record in records)
    # The pick's seconds for its task; the other task's study best (1 ms) as before.
    assert 0.0123 in seconds and 1e-3 in seconds


def test_a_failed_result_is_not_timed_again():
    import tensortune
    from tensortune.target import target_spec

    template = tensortune.CpuTemplate(tensortune.get_workload("matmul", M=16, N=16, K=16))
    with Measurer(template, target_spec("llvm"), MeasureSettings(repeat=2)) as measurer:
        failed = MeasureResult(error="wrong result", stage="check")
        measurer.time_again([failed])
        assert failed.error == "wrong result" and failed.costs == []


def test_bad_finalists_are_one_line_and_write_nothing(tmp_path):
    from tensortune.model.export import export_model

    tuning = _seeded_tuning(tmp_path, per_task=1)
    with pytest.raises(TensortuneError, match="finalists must be at least 1"):
        export_model(tuning, str(tmp_path / "out"), finalists=0)
    assert not (tmp_path / "out").exists()
