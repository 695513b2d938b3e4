"""Transfer from prior studies: a warm start proposes faster kernels than a cold one, under a
measurement of their own; bad sources are refused before anything is written."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import optuna
import pytest

import tensortune
from tensortune import MeasureSettings, TensortuneError
from tensortune.cli import main
from tensortune.dashboard import model_restart_rounds, source_weights_figure
from tensortune.sampler import CostModelSampler
from tensortune.storage import create_study, open_storage
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate
from tensortune.trial_records import PROPOSAL_ATTR

TARGET = dict(M=128, N=128, K=128)
# The sources: `source_url` (conftest), a prior study of matmul 192x96x160, another shape.


def _prior(url: str) -> optuna.Study:
    return optuna.load_study(study_name="prior", storage=url)


@pytest.mark.slow
def test_warm_first_proposals_beat_cold_ones(
    source_url, storage_url, fast_settings, retimed_medians
):
    workload = tensortune.get_workload("matmul", **TARGET)
    template = CpuTemplate(workload)
    batches: dict[str, list[dict]] = {"cold": [], "warm": []}
    warm_kinds: set[str] = set()
    for seed in range(2):
        for mode, sources in (("cold", []), ("warm", [_prior(source_url)])):
            study = tensortune.tune(
                workload,
                n_trials=8,
                storage=storage_url,
                study_name=f"{mode}{seed}",
                sampler=CostModelSampler(template, source_studies=sources, seed=seed),
                settings=fast_settings,
                show_progress=False,
            )
            kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials]
            # Warm: the model proposes from the first trial, every other early trial comes
            # from the cold start's design; cold: start-up trials only.
            if mode == "warm":
                assert kinds[0] == "model" and kinds[1] == "startup", kinds
                assert set(kinds) <= {"model", "explore", "random", "startup"}, kinds
            else:
                assert set(kinds) == {"startup"}, kinds
            warm_kinds |= set(kinds) if mode == "warm" else set()
            # What the sources taught: the warm study's model proposals against cold ones.
            batches[mode] += [t.params for t, kind in zip(study.trials, kinds, strict=True)
                              if kind != "startup" or mode == "cold"]  # fmt: skip
    assert "model" in warm_kinds

    # Held out: every proposed config timed again, in one process, the two groups interleaved.
    medians = retimed_medians(template, batches, MeasureSettings(repeat=3, min_repeat_ms=10))
    cold, warm = medians["cold"], medians["warm"]
    # Measured here (2 seeds): warm 49, cold 10 GFLOP/s; earlier, 3 seeds: warm 96-166
    # against cold 27-43 per seed. A transfer that
    # learnt nothing proposes configs no better than random ones (ratio near 1).
    print(f"\nheld-out medians: warm {warm:.1f}, cold {cold:.1f} GFLOP/s")
    assert warm >= 2.0 * cold, (warm, cold)

    # The sources are read, never written: the target studies hold only their own trials.
    assert len(_prior(source_url).trials) == 24
    assert json.loads(
        json.dumps(optuna.load_study(study_name="warm0", storage=storage_url).user_attrs)
    )["transfer_sources"] == ["prior"]


@pytest.mark.slow
def test_treegru_warm_starts_from_loop_trees_of_another_shape(
    source_url, storage_url, fast_settings
):
    """The TreeGRU reads the prior study as loop trees and proposes from the first trial."""
    study = tensortune.tune(
        "matmul",
        shape=TARGET,
        n_trials=8,
        storage=storage_url,
        study_name="treegru-warm",
        sampler=CostModelSampler(cost_model="treegru", source_studies=[_prior(source_url)], seed=0),
        # Its first proposals unroll 512 steps with i vectorised: 25 s to compile on a loaded
        # 2-core machine, two at a time, and past fast_settings' 60 s when others share it.
        settings=dataclasses.replace(fast_settings, build_timeout=600.0),
        show_progress=False,
    )
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials]
    assert kinds[0] == "model" and set(kinds) <= {"model", "explore", "random", "startup"}, kinds
    failed = [(t.number, t.user_attrs.get("error")) for t in study.trials if not t.value]
    assert not failed, failed


@pytest.mark.slow
def test_a_treegru_whose_source_fades_begins_fresh_networks_and_the_dashboard_marks_it(
    source_url, storage_url, fast_settings
):
    """A source that halves every 2 trials weighs 1 in the first round and 0.25 in the next,
    under half what it weighed when the networks began: the second round starts afresh."""
    sampler = CostModelSampler(
        cost_model="treegru", source_studies=[_prior(source_url)], seed=0, n_startup_trials=0,
        batch_size=4, source_half_life=2.0, source_weighting="decay",
    )  # fmt: skip
    study = tensortune.tune(
        "matmul", shape=TARGET, n_trials=12, storage=storage_url, study_name="treegru-fades",
        sampler=sampler, batch_size=4, show_progress=False,
        settings=dataclasses.replace(fast_settings, build_timeout=600.0),  # as above
    )  # fmt: skip
    restarts = model_restart_rounds(study)
    assert restarts and 0 not in restarts, restarts  # the first round had nothing to go on from
    figure = source_weights_figure(study)
    assert figure is not None and len(figure.layout.shapes) == len(restarts)


@pytest.mark.slow
def test_cli_warm_starts_from_another_storage(source_url, storage_url):
    argv = ["tune", "matmul", "--shape", "64,64,64", "--trials", "4", "--batch-size", "4"]
    argv += ["--storage", storage_url, "--study", "mm", "--seed", "0", "--no-progress"]
    argv += ["--repeat", "2", "--min-repeat-ms", "2"]
    argv += ["--transfer-from", "prior", "--transfer-storage", source_url]
    assert main(argv) == 0
    study = optuna.load_study(study_name="mm", storage=storage_url)
    assert len(study.trials) == 4
    kinds = {t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials}
    assert kinds <= {"model", "explore", "random", "startup"} and "model" in kinds


def _bad_sources(url: str) -> dict[str, str]:
    """Source study name → the words its refusal must contain."""
    db = open_storage(url)
    workload = tensortune.get_workload("matmul", M=32, N=32, K=32)
    other = target_spec({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    study = create_study(db, "elsewhere", workload, other, None, None)
    trial = study.ask()
    study.tell(trial, 1.0)
    empty = create_study(db, "empty", workload, target_spec("llvm"), None, None)
    empty.tell(empty.ask(), state=optuna.trial.TrialState.FAIL)
    optuna.create_study(study_name="foreign", storage=db).optimize(lambda t: 1.0, n_trials=1)
    return {
        "elsewhere": "measured on",
        "empty": "no completed trials",
        "foreign": "not made by tensortune",
        "missing": "no study named 'missing'",
    }


def test_bad_sources_are_refused_before_anything_is_written(tmp_path, storage_url, capsys):
    source_url = f"sqlite:///{tmp_path / 'bad.db'}"
    for name, words in _bad_sources(source_url).items():
        argv = ["tune", "matmul", "--shape", "32,32,32", "--storage", storage_url]
        argv += ["--transfer-from", name, "--transfer-storage", source_url, "--no-progress"]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and words in err, err
        assert optuna.study.get_all_study_names(storage_url) == []
        if name != "missing":
            source = optuna.load_study(study_name=name, storage=source_url)
            with pytest.raises(TensortuneError, match=words):
                tensortune.tune(
                    "matmul",
                    shape=dict(M=32, N=32, K=32),
                    storage=storage_url,
                    sampler=CostModelSampler(source_studies=[source]),
                    show_progress=False,
                )
    assert optuna.study.get_all_study_names(storage_url) == []

    assert main(["tune", "matmul", "--shape", "32,32,32", "--storage", storage_url,
                 "--sampler", "tpe", "--transfer-from", "empty",
                 "--transfer-storage", source_url]) == 2  # fmt: skip
    assert "costmodel" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"sequence of optuna\.Study"):
        CostModelSampler(source_studies="prior")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source_half_life"):
        CostModelSampler(source_half_life=0)


@pytest.mark.slow
def test_a_study_cannot_learn_from_itself(storage_url, fast_settings):
    study = tensortune.tune(
        "matmul",
        shape=dict(M=32, N=32, K=32),
        n_trials=2,
        storage=storage_url,
        study_name="self",
        sampler="random",
        settings=fast_settings,
        show_progress=False,
    )
    with pytest.raises(TensortuneError, match="its own transfer source"):
        tensortune.tune(
            "matmul",
            shape=dict(M=32, N=32, K=32),
            n_trials=2,
            storage=storage_url,
            study_name="self",
            sampler=CostModelSampler(source_studies=[study]),
            show_progress=False,
        )
    assert len(optuna.load_study(study_name="self", storage=storage_url).trials) == 2


def test_configs_move_to_the_nearest_split_of_another_shape():
    from tensortune.sampler.transfer import project_config
    from tensortune.workloads import PRESETS

    def knobs(preset):
        op, shape = PRESETS[preset]
        return CpuTemplate(tensortune.get_workload(op, **shape)).knobs

    c7, c12 = knobs("resnet18-c7"), knobs("resnet18-c12")
    config = {k.name: k.choices[-1] for k in c12}
    moved = project_config(config, c7)
    assert moved is not None and set(moved) == {k.name for k in c7}
    for knob in c7:
        assert moved[knob.name] in knob.choices
    # Values C7 offers stay; C12's 7x1x1x1 row split becomes one of C7's nearest 14-wide ones.
    assert moved["tile_ry"] == config["tile_ry"] and moved["order"] == config["order"]
    assert config["tile_x"] == "7x1x1x1"
    assert moved["tile_x"] in ("7x1x1x2", "7x1x2x1", "7x2x1x1", "14x1x1x1")
    # Another operator's config lacks this one's knobs: nothing to move.
    matmul = CpuTemplate(tensortune.get_workload("matmul", M=64, N=64, K=64)).knobs
    assert project_config({k.name: k.choices[0] for k in matmul}, c7) is None


def test_the_sources_best_configs_start_chains_until_the_study_has_enough_of_its_own():
    from tensortune.sampler.history import History
    from tensortune.sampler.proposals import chain_starts

    # 4 restart slots; in a space this large a random chain is a prior start about once in
    # 700 draws, and the rng is seeded, so the test is deterministic.
    sizes, n_chains, share = [20, 20, 20], 8, 0.5
    priors = np.array([[19, 19, 19], [19, 19, 18], [19, 18, 19]])

    def starts(n_own: int) -> set[tuple[int, ...]]:
        own = np.array([[i, 0, 0] for i in range(n_own)]).reshape(n_own, 3)
        history = History(own, np.arange(float(n_own)), {tuple(r) for r in own}, n_own)
        rng = np.random.default_rng(0)
        found = chain_starts(None, history, sizes, n_chains, share, rng, prior_starts=priors)
        return {tuple(int(v) for v in row) for row in found}

    prior_rows = {tuple(r) for r in priors.tolist()}
    # No config of its own: every prior start takes a slot.
    assert prior_rows <= starts(0)
    # One of its own (the best first), then the sources' best in the slots left.
    assert {(0, 0, 0)} | prior_rows <= starts(1)
    # As many good configs as slots: the study restarts from its own best, the 4 highest.
    own = starts(6)
    assert {(5, 0, 0), (4, 0, 0), (3, 0, 0), (2, 0, 0)} <= own
    assert not prior_rows & own
