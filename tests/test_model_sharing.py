"""Tasks of one design space share their best configs (`tensortune.model.sharing`) or their
trials (``warm_sources="twins"``): the pure picks, then a model whose two convolutions differ
only in their epilogue, tuned for real."""

from __future__ import annotations

import optuna
import pytest

from tensortune.model.sharing import same_space_twins, untried_bests
from tensortune.sampler.source_weighting import MIN_EVIDENCE
from tensortune.templates.knobs import ChoiceKnob
from tensortune.trial_records import PROPOSAL_ATTR

#: tune-model's flags for a model's functions as TVM fuses them (`AS_FUSED` of the CLI).
AS_FUSED_FLAGS = ("--no-channels-last", "--no-winograd", "--no-prepack-weights")


def test_twins_are_tasks_with_equal_knobs_in_order():
    a = [ChoiceKnob("tile", (1, 2, 4)), ChoiceKnob("unroll", (0, 16))]
    other_choices = [ChoiceKnob("tile", (1, 2, 8)), ChoiceKnob("unroll", (0, 16))]
    reordered = list(reversed(a))
    spaces = [a, list(a), other_choices, reordered, [], []]
    assert same_space_twins(spaces) == [[1], [0], [], [], [], []]


def _study(name: str, rows: list[tuple[dict, float | None]]) -> optuna.Study:
    study = optuna.create_study(study_name=name, direction="maximize")
    dist = {"tile": optuna.distributions.CategoricalDistribution((1, 2, 4))}
    states = optuna.trial.TrialState
    for params, value in rows:
        state = states.COMPLETE if value is not None else states.FAIL
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=dist, value=value, state=state)
        )
    return study


def test_untried_bests_hands_over_each_twins_best_once():
    own = _study("own", [({"tile": 1}, 5.0)])
    twin = _study("twin", [({"tile": 2}, 9.0), ({"tile": 4}, 3.0), ({"tile": 1}, None)])
    empty = _study("empty", [({"tile": 4}, None)])
    same_best = _study("same", [({"tile": 2}, 7.0)])
    assert untried_bests(own, [twin, empty, same_best]) == [("twin", {"tile": 2})]
    own.enqueue_trial({"tile": 2})  # waiting counts as tried: not handed over twice
    assert untried_bests(own, [twin]) == []
    assert untried_bests(_study("other", [({"tile": 2}, 1.0)]), [twin]) == []


@pytest.mark.slow
def test_twin_tasks_run_each_others_best_and_the_model_still_matches(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tensortune.cli import main
    from tensortune.model import load_onnx, parse_input
    from tensortune.model.tuning import model_tuning
    from tests.test_model import AS_FUSED

    class TwinConvs(torch.nn.Module):
        """Two 3x3 convolutions of one shape: the second adds the input back (a shortcut)."""

        def __init__(self) -> None:
            super().__init__()
            self.first = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.second = torch.nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.relu(self.second(torch.relu(self.first(x))) + x)

    torch.manual_seed(0)
    onnx_file = str(tmp_path / "twins.onnx")
    torch.onnx.export(
        TwinConvs().eval(), (torch.randn(1, 8, 8, 8),), onnx_file, input_names=["x"],
        dynamo=False,
    )  # fmt: skip
    storage = f"sqlite:///{tmp_path / 'model.db'}"
    # Without rewrites (NCHW, direct, unpacked): the two convolutions are the only tasks. The
    # export checks the built model's outputs against ONNX Runtime's.
    code = main(["tune-model", onnx_file, "--input", "x:1x8x8x8", "--trials", "24",
                 "--sampler", "random", "--storage", storage, *AS_FUSED_FLAGS, "--share-bests",
                 "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 0 and (tmp_path / "out").is_dir()
    program = load_onnx(onnx_file, [parse_input("x:1x8x8x8")])
    tuning = model_tuning(program, "llvm", storage, **AS_FUSED)
    studies = [s for s in tuning.studies if s is not None]
    assert len(studies) == 2 and same_space_twins([t.knobs for t in tuning.templates]) == [[1], [0]]
    # Their samplers are seeded apart: with one seed they proposed the same first batch, so
    # the twin's best was one the task had run already.
    firsts = [[t.params for t in sorted(s.trials, key=lambda t: t.number)[:8]] for s in studies]
    assert firsts[0] != firsts[1]
    shared = 0
    for study, twin in ((studies[0], studies[1]), (studies[1], studies[0])):
        trials = sorted(study.trials, key=lambda t: t.number)
        for i, trial in enumerate(trials):
            if "shared_from" not in trial.user_attrs:
                continue
            shared += 1
            assert trial.user_attrs["shared_from"] == twin.study_name
            # The config is one the twin had measured, new to this task, run here as it was.
            assert trial.params in [t.params for t in twin.trials if t.value is not None]
            assert trial.params not in [t.params for t in trials[:i]]
            assert trial.state == optuna.trial.TrialState.COMPLETE
    # A task gets its twin's best from its second batch on (a config handed over that
    # becomes the taker's best too is not handed back).
    assert shared >= 1
    assert sum(len(s.trials) for s in studies) == 24  # shared trials count in the budget

    # Warm-started from their twins instead: each task's model learns from the other's trials
    # once it has some, in the decision features of a cold study (nothing lowered).
    twins_storage = f"sqlite:///{tmp_path / 'twins.db'}"
    code = main(["tune-model", onnx_file, "--input", "x:1x8x8x8", "--trials", "32",
                 "--storage", twins_storage, *AS_FUSED_FLAGS, "--warm-start-tasks",
                 "--warm-sources", "twins", "-o", str(tmp_path / "twins-out")])  # fmt: skip
    assert code == 0
    tuning = model_tuning(program, "llvm", twins_storage, **AS_FUSED)
    studies = [s for s in tuning.studies if s is not None]
    # The task tuned second has its twin's trials from its first batch on; the first has them
    # once the scheduler gives it a second batch.
    assert "transfer_sources" in studies[1].user_attrs
    for study, twin in ((studies[0], studies[1]), (studies[1], studies[0])):
        if "transfer_sources" not in study.user_attrs:
            continue
        assert study.user_attrs["transfer_sources"] == [twin.study_name]
        key = f"{twin.study_name.split('@')[0]} in metaschedule"
        proposals = [(t.number, t.system_attrs[PROPOSAL_ATTR]) for t in study.trials]
        weighed = sorted((n, p["source_weights"][key]) for n, p in proposals
                         if "source_weights" in p)  # fmt: skip
        # The decay alone, from 1 with nothing measured of its own: never 0 by the twin's
        # ranking. It shows 0 only once the study dropped its twin because the twin's start-up
        # picks lost to the design's (`drop_outpaced`), judged on MIN_EVIDENCE of its configs.
        assert weighed and 0 < weighed[0][1] <= 1
        assert all(0 < w <= 1 or (w == 0 and n >= MIN_EVIDENCE) for n, w in weighed)
    assert sum(len(s.trials) for s in studies) == 32
