"""A model's finalists: each task's best few configs timed again in turns, the fastest of them
written to the model's database in place of its study's best."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import optuna
import pytest

from tensortune.errors import TensortuneError
from tensortune.finalists import Pick, finalist_trials

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from tensortune.model import build, check_outputs, from_torch, run, write_database  # noqa: E402
from tensortune.model.database import RECORDS_FILE  # noqa: E402
from tensortune.model.finalists import pick_finalists  # noqa: E402
from tensortune.model.tuning import model_tuning  # noqa: E402
from tests.test_model import AS_FUSED, SmallNet  # noqa: E402  (a conv and a linear layer)


def _seeded_tuning(tmp_path, per_task: int = 3):  # type: ignore[no-untyped-def]
    """The model's tuning state with `per_task` random configs of each tunable task recorded
    in its study at made-up values, best first by trial number; nothing measured yet."""
    torch.manual_seed(0)
    program = from_torch(SmallNet().eval(), [torch.randn(1, 3, 8, 8)], name="small")
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    tuning = model_tuning(program, "llvm", storage, create=True, **AS_FUSED)
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


def test_bad_finalists_are_one_line_and_write_nothing(tmp_path):
    from tensortune.model.export import export_model

    tuning = _seeded_tuning(tmp_path, per_task=1)
    with pytest.raises(TensortuneError, match="finalists must be at least 1"):
        export_model(tuning, str(tmp_path / "out"), finalists=0)
    assert not (tmp_path / "out").exists()
