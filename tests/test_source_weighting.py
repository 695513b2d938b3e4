"""Warm starts weigh each source by the evidence, and ``auto`` finds the sources itself: a
source that misleads stops counting, studies of other targets are never taken."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna_dashboard import get_note

import tensortune
from tensortune.cli import main
from tensortune.cost_model import make_cost_model
from tensortune.dashboard import source_weight_rounds, study_note
from tensortune.features import FeatureExtractor
from tensortune.sampler import CostModelSampler, proposals
from tensortune.sampler.history import History, KnobSpace, design_leads, read_history
from tensortune.sampler.nearest_studies import find_sources, program_distance
from tensortune.sampler.source_weighting import (
    CHANCE_FROM,
    FADED_SHARE,
    FULL_TAU,
    MIN_EVIDENCE,
    SOURCE_WEIGHTINGS,
    WEIGHTINGS_AGAINST_OWN,
    faded_sources,
    local_tau,
    reversed_beyond_chance,
    source_row_weights,
    source_weight,
    source_weights,
    within_chance,
)
from tensortune.sampler.transfer import SourceRows
from tensortune.sampler.warm_start import WarmStart
from tensortune.search import space_filling
from tensortune.storage import create_study, open_storage, target_key
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate
from tensortune.trial_records import PROPOSAL_ATTR, steered_by_sources
from tensortune.workloads import PRESETS

LLVM = target_spec("llvm")


def workload(M: int, N: int, K: int):
    return tensortune.get_workload("matmul", M=M, N=N, K=K)


def test_source_weights_follow_the_evidence():
    taus = np.array([0.9, FULL_TAU / 2, 0.0, -0.6, np.nan])
    decay = source_weight(MIN_EVIDENCE, 32.0)
    found = source_weights(taus, MIN_EVIDENCE, 32.0)
    # Full weight from FULL_TAU up, in proportion below, none for chance or reversed, the
    # decay alone where nothing could be ranked.
    assert found == pytest.approx([decay, decay / 2, 0.0, 0.0, decay])
    # Too few local configs to judge by: the decay alone, whatever the taus.
    early = source_weights(taus, MIN_EVIDENCE - 1, 32.0)
    assert early == pytest.approx([source_weight(MIN_EVIDENCE - 1, 32.0)] * 5)
    assert source_weights(taus, 40, 32.0, "decay") == pytest.approx([0.5 ** (40 / 32)] * 5)
    # Guarded: the decay, nothing for a source reversed beyond chance (on 8 configs, tau below
    # -2 x 0.289); at chance it keeps its weight.
    guarded = source_weights(taus, MIN_EVIDENCE, 32.0, "guarded")
    assert guarded == pytest.approx([decay, decay, decay, 0.0, decay])
    assert list(reversed_beyond_chance(np.array([-0.5, -0.6]), 8)) == [False, True]
    assert list(reversed_beyond_chance(np.array([-0.3, -0.4]), 32)) == [True, True]
    # Beyond chance: the evidence's, and from CHANCE_FROM configs on nothing for a tau within
    # one standard deviation of 0 (0.289 on 8 configs, 0.183 on 16, 0.086 on 64): 0.15 weighs
    # nothing on 16 configs and 0.3 of the decay on 64; on 8 the evidence's alone.
    taus[1] = 0.15
    assert source_weights(taus, MIN_EVIDENCE, 32.0, "beyond-chance") == pytest.approx(
        source_weights(taus, MIN_EVIDENCE, 32.0)
    )
    beyond = source_weights(taus, CHANCE_FROM, 32.0, "beyond-chance")
    decay = source_weight(CHANCE_FROM, 32.0)
    assert beyond == pytest.approx([decay, 0.0, 0.0, 0.0, decay])
    from_eight = source_weights(taus, MIN_EVIDENCE, 32.0, "beyond-chance", chance_from=8)
    assert from_eight[1] == 0.0
    later = source_weights(taus, 64, 32.0, "beyond-chance")
    assert later == pytest.approx(source_weights(taus, 64, 32.0))
    assert later[1] == pytest.approx(source_weight(64, 32.0) * 0.3)
    assert list(within_chance(np.array([0.28, 0.3, np.nan]), 8)) == [True, False, False]
    with pytest.raises(ValueError, match="unknown weighting 'trust'"):
        source_weights(taus, 40, 32.0, "trust")


def test_relative_weights_ask_a_source_to_rank_as_well_as_the_studys_own_configs():
    taus = np.array([0.9, 0.4, 0.0])
    decay = source_weight(40, 32.0)
    # Own configs that rank each other at 0.8: a source at 0.4 keeps half, not 80 %.
    found = source_weights(taus, 40, 32.0, "relative", own_tau=0.8)
    assert found == pytest.approx([decay, decay / 2, 0.0])
    # Below FULL_TAU, or unknown, the bar stays FULL_TAU: "evidence" as it was.
    for own in (0.2, float("nan")):
        assert source_weights(taus, 40, 32.0, "relative", own_tau=own) == pytest.approx(
            source_weights(taus, 40, 32.0, "evidence")
        )


def test_outranked_weights_drop_a_source_the_studys_own_configs_rank_twice_as_well():
    taus = np.array([0.9, 0.6, 0.45, 0.3, float("nan")])
    decay = source_weight(40, 32.0)
    # Own configs at 0.6: a source at 0.6 or above keeps the evidence's weight, one at 0.45
    # half of it (2 x 0.45 / 0.6 - 1), one at 0.3 (half of 0.6) none; unknown keeps it.
    found = source_weights(taus, 40, 32.0, "outranked", own_tau=0.6)
    assert found == pytest.approx([decay, decay, decay / 2, 0.0, decay])
    # Own configs that rank each other at chance or worse, or not known yet: the evidence alone.
    for own in (0.0, -0.2, float("nan")):
        assert source_weights(taus, 40, 32.0, "outranked", own_tau=own) == pytest.approx(
            source_weights(taus, 40, 32.0, "evidence")
        )
    # Own configs ranking each other worse than the source does: still the evidence's weight.
    assert source_weights(taus, 40, 32.0, "outranked", own_tau=0.1) == pytest.approx(
        [decay, decay, decay * 0.9, decay * 0.6, decay]
    )


def test_shared_weights_split_the_evidence_among_the_source_workloads():
    taus = np.array([0.9, 0.25, -0.1, float("nan")])
    assert source_weights(taus, 40, 32.0, "shared") == pytest.approx(
        source_weights(taus, 40, 32.0, "evidence") / 4
    )
    # Before the evidence: the decay, split as well.
    assert source_weights(taus, 4, 32.0, "shared") == pytest.approx(
        [source_weight(4, 32.0) / 4] * 4
    )


def test_capped_weights_never_let_the_sources_outweigh_the_studys_own_rows():
    taus = np.array([0.9, 0.25, -0.1])
    rows = np.array([192, 64, 64])
    evidence = source_weights(taus, 16, 32.0, "evidence")
    capped = source_weights(taus, 16, 32.0, "capped", rows=rows)
    # 192 rows at 0.71 and 64 at 0.35 outweigh 16 local rows: scaled down alike to weigh 16.
    assert np.dot(capped, rows) == pytest.approx(16.0)
    assert capped == pytest.approx(evidence * 16.0 / np.dot(evidence, rows))
    # Sources already lighter than the study's own rows keep the evidence's weights.
    assert source_weights(taus, 160, 32.0, "capped", rows=rows) == pytest.approx(
        source_weights(taus, 160, 32.0, "evidence")
    )
    # Before the evidence (the sources are all the model has) and without row counts: no cap.
    assert source_weights(taus, 4, 32.0, "capped", rows=rows) == pytest.approx(
        [source_weight(4, 32.0)] * 3
    )
    assert source_weights(taus, 16, 32.0, "capped") == pytest.approx(evidence)


def test_a_source_fades_once_its_rows_weigh_under_a_tenth_of_the_studys_own():
    rows = np.array([192, 192])
    # 192 rows at 0.05 weigh 9.6: above a tenth of 88 configs, below a tenth of 104.
    assert not faded_sources(np.array([0.05, 0.05]), rows, 88).any()
    assert faded_sources(np.array([0.05, 0.05]), rows, 104).all()
    assert FADED_SHARE == 0.1
    # Before the study measured anything no source has faded, whatever its weight.
    assert not faded_sources(np.array([0.0, 1e-6]), rows, 0).any()
    # Weighing nothing by the evidence is not fading: such sources are dropped, not outgrown.
    assert faded_sources(np.array([0.0, 0.05]), rows, 104).tolist() == [False, True]


def test_by_weight_source_rows_draw_a_weights_worth_of_each_source():
    groups = np.repeat([1, 2, 3, 4], [100, 100, 100, 100])
    prior = SourceRows(np.zeros((400, 2)), np.linspace(0, 1, 400), groups, list("abcd"), ["s"])
    weights = np.array([0.25, 1.0, 0.0, 0.25])
    faded = np.array([False, False, False, True])
    rank = source_row_weights(prior, weights, faded, "rank", np.random.default_rng(0))
    # sqrt(0.25) of the rows, each at 1: a pair of them is in with probability 0.25.
    assert (rank[:100] == 1).sum() == 50 and set(rank[:100]) == {0.0, 1.0}
    assert (rank[100:200] == 1.0).all()  # full weight: every row at it
    assert not rank[200:].any()  # weighing nothing, or faded: none
    reg = source_row_weights(prior, weights, faded, "reg", np.random.default_rng(0))
    assert (reg[:100] == 1).sum() == 25  # the squared error counts rows: a share 0.25
    # Another draw takes other rows; a tiny weight keeps a pair to rank.
    other = source_row_weights(prior, weights, faded, "rank", np.random.default_rng(1))
    assert not np.array_equal(other[:100], rank[:100])
    tiny = source_row_weights(
        prior, np.array([1e-6, 0, 0, 0]), np.zeros(4, bool), "rank", np.random.default_rng(0)
    )
    assert (tiny == 1).sum() == 2


def test_a_faded_source_is_not_silent():
    warm = WarmStart([], 0)
    warm._rows = SourceRows(np.zeros((2, 1)), np.ones(2), np.ones(2, np.int64), ["w"], ["s"])
    warm.record(np.zeros(1), np.array([True]))
    assert warm.weights == {"w": 0.0} and not warm.silent()  # outgrown: the study goes on
    warm.record(np.zeros(1), np.array([False]))
    assert warm.silent()  # the evidence weighs it at nothing: the study drops it


@pytest.mark.parametrize("command", ["tune", "tune-model"])
def test_the_help_names_every_source_weighting(command, capsys, monkeypatch):
    # Wide enough that argparse wraps no line: it would break "beyond-chance" at its hyphen.
    monkeypatch.setenv("COLUMNS", "10000")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name in SOURCE_WEIGHTINGS:
        assert f"{name}: " in help_text, name


def test_local_tau_is_how_well_the_studys_own_rows_predict_each_other():
    from tensortune.cost_model import BootstrapXGBModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 3))
    make = lambda: BootstrapXGBModel(n_models=1, seed=0)  # noqa: E731
    # Throughput that follows the first feature ranks well out of fold; noise does not.
    assert local_tau(make, X, X[:, 0] + 0.1 * rng.normal(size=64)) > 0.6
    assert abs(local_tau(make, X, rng.normal(size=64))) < 0.3
    # Too short to fold, or all alike: nothing to say.
    assert math.isnan(local_tau(make, X[:5], X[:5, 0]))
    assert math.isnan(local_tau(make, X, np.ones(64)))


def test_validated_weights_keep_sources_only_while_the_model_ranks_better_with_them():
    taus = np.array([0.9, 0.25])
    evidence = source_weights(taus, 40, 32.0, "evidence")
    # With the sources the held-out configs rank as well or better: the evidence's weights.
    for own, with_sources in ((0.5, 0.5), (0.5, 0.7), (float("nan"), 0.2), (0.5, float("nan"))):
        found = source_weights(taus, 40, 32.0, "validated", own_tau=own,
                               with_sources_tau=with_sources)  # fmt: skip
        assert found == pytest.approx(evidence), (own, with_sources)
    # Worse with them: nothing, whatever each ranks alone.
    assert not source_weights(taus, 40, 32.0, "validated", own_tau=0.5, with_sources_tau=0.45).any()
    # Before the evidence: the decay, as every judged weighting.
    assert source_weights(taus, 4, 32.0, "validated", own_tau=0.5, with_sources_tau=0.0) == (
        pytest.approx([source_weight(4, 32.0)] * 2)
    )


def test_local_tau_with_sources_trains_every_fold_on_them():
    from tensortune.cost_model import BootstrapXGBModel
    from tensortune.sampler.transfer import SourceRows

    rng = np.random.default_rng(1)
    X = rng.normal(size=(16, 3))
    y = X[:, 0]
    make = lambda: BootstrapXGBModel(n_models=1, seed=0)  # noqa: E731
    source = rng.normal(size=(200, 3))

    def rows(sign: float) -> SourceRows:
        targets = sign * source[:, 0]
        targets = (targets - targets.min()) / np.ptp(targets)
        return SourceRows(source, targets, np.ones(200, np.int64), ["src"], ["s"])

    alone = local_tau(make, X, y, seed=0)
    # 200 rows that order the feature as the study does help 12 of its own; reversed ones,
    # weighing 10 local rows each, turn the held-out ranking around.
    assert local_tau(make, X, y, 0, rows(1.0), np.array([1.0])) >= alone
    assert local_tau(make, X, y, 0, rows(-1.0), np.array([10.0])) < min(alone, 0.0)
    # A source at weight 0 is left out: the folds train on the study's rows alone.
    assert local_tau(make, X, y, 0, rows(-1.0), np.array([0.0])) == pytest.approx(alone)


def test_program_distance_puts_the_same_operator_and_sizes_first():
    base = workload(1024, 1024, 1024)
    assert program_distance(base, workload(1024, 1024, 1024)) == 0.0
    near, far = workload(512, 512, 512), workload(64, 64, 64)
    assert 0 < program_distance(base, near) < program_distance(base, far)
    assert program_distance(base, near) == program_distance(near, base)
    op, shape = PRESETS["resnet18-c7"]
    conv = tensortune.get_workload(op, **shape)
    # Another operator with another loop nest is farther than any matmul.
    assert program_distance(base, conv) > program_distance(base, far)
    # A dense layer's fused bias and relu do not hide its matmul: it is near a matmul.
    dense = tensortune.get_workload("dense_bias_relu", M=1024, N=1024, K=1024)
    assert program_distance(base, dense) == 1.0


def _synthetic(config: dict) -> float:
    """A deterministic stand-in for GFLOP/s over the matmul template's knobs, one term per
    knob so that a model can learn it from a few dozen configs."""
    inner = [int(f) for f in str(config["tile_j"]).split("x")][-1]
    unroll = int(config["unroll"])
    return math.log2(inner) + 0.5 * math.log2(unroll + 1) + (config["order"] == "S0 S1 R0 S2 R1 S3")


def _source_study(db, name: str, shape: tuple[int, int, int], sign: float, target=LLVM):
    """A tensortune study of matmul `shape` with 48 random configs valued `sign` x
    `_synthetic` (sign -1: a source whose every ranking is reversed)."""
    template = CpuTemplate(workload(*shape))
    study = create_study(db, name, template.workload, target, None, None)
    _add_configs(study, template, 48, sign, seed=0)
    return study


def _add_configs(study, template, n: int, sign: float, seed: int) -> list[tuple]:
    """`n` random configs of `template` added to `study` as completed trials valued `sign` x
    `_synthetic`; their values, knob by knob."""
    rng = np.random.default_rng(seed)
    distributions = {k.name: CategoricalDistribution(k.choices) for k in template.knobs}
    added = []
    for _ in range(n):
        config = {k.name: k.choices[rng.integers(len(k.choices))] for k in template.knobs}
        value = sign * _synthetic(config) + 20.0  # positive, as GFLOP/s are
        study.add_trial(optuna.trial.create_trial(params=config, distributions=distributions,
                                                  value=value))  # fmt: skip
        added.append(tuple(config[k.name] for k in template.knobs))
    return added


def _tuned(
    db,
    name: str,
    sources,
    seed: int,
    n_trials: int = 32,
    weighting: str = "evidence",
    batch: int = 1,
    **options,
) -> optuna.Study:
    """A study of matmul 64 tuned on `_synthetic`, `batch` trials at a time given their
    configs before any is told, as `tensortune.tune` does (default 1: one by one)."""
    template = CpuTemplate(workload(64, 64, 64))
    create_study(db, name, template.workload, LLVM, None, None)
    sampler = CostModelSampler(
        template, source_studies=sources, seed=seed, source_weighting=weighting, **options
    )
    study = optuna.load_study(study_name=name, storage=db, sampler=sampler)
    if batch == 1:
        study.optimize(lambda trial: _synthetic(template.suggest(trial)), n_trials=n_trials)
        return study
    for _ in range(n_trials // batch):
        asked = [study.ask() for _ in range(batch)]
        configs = [template.suggest(trial) for trial in asked]
        for trial, config in zip(asked, configs, strict=True):
            study.tell(trial, _synthetic(config))
    return study


def test_sources_that_grow_are_read_again_lowering_only_their_new_configs(tmp_path, monkeypatch):
    """A model run hands each task's sampler its kin's studies every batch (`use`): they are
    read again only where they changed, and a config lowered before is not lowered again."""
    db = open_storage(f"sqlite:///{tmp_path / 'g.db'}")
    source = _source_study(db, "growing", (96, 64, 80), 1.0)
    target = create_study(db, "target", workload(64, 64, 64), LLVM, None, None)
    lowered: list[tuple] = []
    extract = FeatureExtractor._extract

    def counted(self, configs):
        lowered.extend(self.key(c) for c in configs)
        return extract(self, configs)

    monkeypatch.setattr(FeatureExtractor, "_extract", counted)
    warm = WarmStart([source], n_starts=0)
    first = warm.load(target, "curve")
    assert first is not None and len(first) == 48
    knobs = CpuTemplate(workload(96, 64, 80)).knobs
    assert sorted(lowered) == sorted(
        {tuple(t.params[k.name] for k in knobs) for t in source.trials}
    )
    judges = warm.judges(lambda: make_cost_model("xgb", "rank", 1, 0))
    warm.use([source])  # the same studies, nothing new: the rows and judges stand
    assert warm.load(target, "curve") is first
    assert warm.judges(lambda: make_cost_model("xgb", "rank", 1, 0)) is judges
    before = set(lowered)
    new = _add_configs(source, CpuTemplate(workload(96, 64, 80)), 8, 1.0, seed=1)
    warm.use([optuna.load_study(study_name="growing", storage=db)])
    second = warm.load(target, "curve")
    assert second is not None and len(second) == 56
    # Only the configs not seen before were lowered, each once.
    assert sorted(lowered[len(before) :]) == sorted(set(new) - before)
    assert warm.judges(lambda: make_cost_model("xgb", "rank", 1, 0)) is not judges


@pytest.mark.slow  # 3 seeds x 3 studies x 3 model rounds of XGBoost: about 40 s
def test_a_misleading_source_stops_counting_and_does_not_hurt(tmp_path):
    db = open_storage(f"sqlite:///{tmp_path / 'w.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    honest = _source_study(db, "honest", (96, 64, 80), sign=1.0)
    bests: dict[str, list[float]] = {"cold": [], "inverted": [], "honest": []}
    for seed in range(3):
        for mode, sources in (("cold", []), ("inverted", [inverted]), ("honest", [honest])):
            study = _tuned(db, f"{mode}{seed}", sources, seed, n_trials=48)
            bests[mode].append(study.best_value)
            if mode == "inverted":
                rounds = source_weight_rounds(study)
                (history,) = rounds.values()
                # Judged on the study's own configs, the reversed source weighs nothing.
                assert history[-1][1] == 0.0, history
                assert history[0][1] > 0.0, history  # before there was evidence
    # Same seeds: warm-starting from a reversed source ends no worse than a cold start on the
    # median, the benchmark's criterion (studies/transfer.py), and an honest source helps. Not
    # seed by seed: 4 of the warm study's first 8 configs are the source's, so its path differs
    # from the cold one's from there on, and either may end a knob step ahead (a CI run:
    # inverted 8.5 / 11.5 / 9.5 against cold 9.5 / 11.5 / 9.5; a local one with another
    # tie-break: 8.5 / 11.5 / 9.5 against 9.5 / 11.5 / 8.5).
    assert np.median(bests["inverted"]) >= np.median(bests["cold"]), bests
    assert np.median(bests["honest"]) >= np.median(bests["cold"]), bests


def test_a_design_first_warm_start_measures_the_cold_design_then_lets_the_sources_in(tmp_path):
    """``source_startup_share=0``: the first 16 trials are the cold study's, config for config;
    the sources train the model from its first round on."""
    db = open_storage(f"sqlite:///{tmp_path / 'd.db'}")
    honest = _source_study(db, "honest", (96, 64, 80), sign=1.0)
    cold = _tuned(db, "cold", [], seed=3, n_trials=16)
    warm = _tuned(db, "warm", [honest], seed=3, n_trials=24, source_startup_share=0.0)
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in warm.trials]
    assert kinds[:16] == ["startup"] * 16 and "startup" not in kinds[16:], kinds
    assert [t.params for t in warm.trials[:16]] == [t.params for t in cold.trials]
    (history,) = source_weight_rounds(warm).values()
    assert history and history[0][1] > 0.0, history
    quarter = _tuned(db, "quarter", [honest], seed=3, n_trials=8, source_startup_share=0.25)
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in quarter.trials]
    assert [k == "startup" for k in kinds] == [False, True, True, True] * 2, kinds
    with pytest.raises(ValueError, match="source_startup_share must be within"):
        CostModelSampler(source_startup_share=1.5)


def test_a_warm_start_yields_its_early_trials_to_a_design_that_leads(tmp_path):
    """``yield_to_design=True``: an early trial of the sources' model goes to the cold design
    whenever the design's fastest measured config beats the model's; a misleading source's
    picks lose to the design, so its model gives up trials it holds without the rule."""
    db = open_storage(f"sqlite:///{tmp_path / 'y.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    plain = _tuned(db, "plain", [inverted], seed=1, n_trials=8)
    ruled = _tuned(db, "ruled", [inverted], seed=1, n_trials=8, yield_to_design=True)
    template = CpuTemplate(workload(64, 64, 64))
    space = KnobSpace(template.knobs)
    design = space_filling(space.sizes, 16, np.random.default_rng(1))
    kinds = {name: [t.system_attrs[PROPOSAL_ATTR]["source"] for t in s.trials]
             for name, s in (("plain", plain), ("ruled", ruled))}  # fmt: skip
    assert kinds["plain"][0::2] == ["model"] * 4 and kinds["plain"][1::2] == ["startup"] * 4
    yielded = 0
    for trial in ruled.trials:
        before = [t for t in ruled.trials if t.number < trial.number]
        history = History(
            configs=np.array([space.encode(t.params) for t in before], np.int64).reshape(
                -1, len(space.sizes)
            ),
            values=np.array([t.value for t in before], float),
            taken=set(),
            n_finished=len(before),
        )
        leads = design_leads(history, design)
        kind = kinds["ruled"][trial.number]
        if trial.number % 2 == 0 and leads:
            yielded += 1
            assert kind == "startup" and space.encode(trial.params) in map(tuple, design.tolist())
        elif trial.number % 2 == 0:
            assert kind == "model", (trial.number, kinds["ruled"])
    assert yielded >= 2, kinds["ruled"]
    # The design's points come in the cold study's order, whoever's slot they fill.
    ruled_design = [
        t.params for t, k in zip(ruled.trials, kinds["ruled"], strict=True) if k == "startup"
    ]
    cold = _tuned(db, "cold", [], seed=1, n_trials=len(ruled_design))
    assert ruled_design == [t.params for t in cold.trials]


def test_a_cold_twin_proposes_the_local_share_of_a_warm_study(tmp_path):
    """``local_share=0.5``: past the start-up, every other config comes from a model of the
    study's own configs alone, the rest from the source-trained one."""
    db = open_storage(f"sqlite:///{tmp_path / 't.db'}")
    honest = _source_study(db, "honest", (96, 64, 80), sign=1.0)
    study = _tuned(db, "twin", [honest], seed=0, n_trials=32, local_share=0.5)
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials]
    local = [kind.startswith("local ") for kind in kinds]
    assert not any(local[:16]) and local[16:] == [True, False] * 8, kinds
    assert {kind.split()[-1] for kind in kinds[16:]} <= {"model", "explore", "random"}, kinds
    assert len({tuple(sorted(t.params.items())) for t in study.trials}) == 32  # none twice
    with pytest.raises(ValueError, match="local_share must be within"):
        CostModelSampler(local_share=-0.1)


@pytest.mark.parametrize("weighting", ["relative", "outranked", "guarded", "beyond-chance"])
def test_judged_weightings_drop_a_reversed_source_and_finish_the_design(
    tmp_path, monkeypatch, weighting
):
    """``"relative"``, ``"outranked"``, ``"guarded"`` and ``"beyond-chance"`` judge their
    sources, unlike the decay alone: a reversed source weighs nothing once the study has
    configs of its own to rank. The study then goes on cold and first measures every point of
    the start-up design it skipped."""
    events: list[tuple] = []  # each round's judging, and any cross-validation after it
    judge, cross_validate = proposals.judge_taus, proposals.local_tau

    def judged(judges, X, y):
        taus = judge(judges, X, y)
        events.append(("judged", len(y), taus))
        return taus

    def cross_validated(make, X, y, seed=0):
        events.append(("cross-validated", len(y)))
        return cross_validate(make, X, y, seed)

    monkeypatch.setattr(proposals, "judge_taus", judged)
    monkeypatch.setattr(proposals, "local_tau", cross_validated)
    db = open_storage(f"sqlite:///{tmp_path / 'r.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    # Kept through the start-up even where its picks lose to the design: the weighting alone
    # is under test.
    study = _tuned(
        db, "judged", [inverted], seed=0, n_trials=24, weighting=weighting, drop_outpaced=False
    )
    (history,) = source_weight_rounds(study).values()
    assert history[0][1] > 0.0, history
    assert history[-1][1] == 0.0, history
    # The study's own ranking can only cut a source further: in a round where the evidence
    # gave the reversed source nothing, no cross-validation is fitted to compare it with.
    misled = [
        i
        for i, event in enumerate(events)
        if event[0] == "judged" and event[1] >= MIN_EVIDENCE and np.all(event[2] <= 0)
    ]
    assert misled, events
    assert all(events[i + 1][0] != "cross-validated" for i in misled if i + 1 < len(events))
    if weighting not in WEIGHTINGS_AGAINST_OWN:
        assert not any(event[0] == "cross-validated" for event in events)
    space = KnobSpace(CpuTemplate(workload(64, 64, 64)).knobs)
    design = space_filling(space.sizes, 16, np.random.default_rng(0))
    measured = {space.encode(t.params) for t in study.trials}
    missing = [row for row in design.tolist() if tuple(row) not in measured]
    assert not missing, f"{len(missing)} of the 16 design points never measured"


def test_a_study_that_dropped_its_sources_goes_on_as_the_cold_study_of_its_seed(tmp_path):
    """Once a reversed source weighs nothing, the study measures the rest of the design and
    its model leaves out the configs the source steered it to: from there it proposes, config
    for config, what the cold study of its seed proposes (until an explore round, which keeps
    away from every measured config, the source's too)."""
    db = open_storage(f"sqlite:///{tmp_path / 'c.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    warm = _tuned(db, "warm", [inverted], seed=0, n_trials=32)
    cold = _tuned(db, "cold", [], seed=0, n_trials=28)
    steered = [steered_by_sources(t) for t in warm.trials]
    assert steered[0], steered  # the source's model chose the first config
    dropped = len(steered) - steered[::-1].index(True)  # the first trial after its last
    assert dropped <= 16, steered
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in warm.trials]
    assert "model" in kinds[dropped + 12 :], kinds  # its own model's rounds
    cold_configs = [t.params for t in cold.trials]
    unsteered = [t.params for t, s in zip(warm.trials, steered, strict=True) if not s]
    assert len(unsteered) >= 24 and unsteered == cold_configs[: len(unsteered)]
    # Without the source's configs left out, its model would have learned from them.
    history = read_history(warm, KnobSpace(CpuTemplate(workload(64, 64, 64)).knobs))
    kept = read_history(
        warm, KnobSpace(CpuTemplate(workload(64, 64, 64)).knobs), leave_out=steered_by_sources
    )
    assert len(history.configs) - len(kept.configs) == sum(steered) > 0
    assert kept.taken == history.taken and kept.n_finished == len(kept.configs)


def test_a_study_that_drops_its_sources_mid_batch_finishes_the_design_then_its_model_proposes(
    tmp_path,
):
    """Asked in batches of 8, as `tensortune.tune` asks, a study that dropped its sources at
    its 8th config takes the rest of the cold design and then its model's proposals, even
    while the design's last points are still being measured: no random config fills the
    batch in their place, and the design it measures is the cold study's, all of it."""
    db = open_storage(f"sqlite:///{tmp_path / 'b.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    warm = _tuned(db, "warm", [inverted], seed=0, n_trials=32, weighting="decay", batch=8)
    cold = _tuned(db, "cold", [], seed=0, n_trials=16, batch=8)
    steered = [steered_by_sources(t) for t in warm.trials]
    assert steered[:MIN_EVIDENCE:2] == [True] * (MIN_EVIDENCE // 2)
    assert not any(steered[MIN_EVIDENCE:]), steered
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in warm.trials]
    design = [t.params for t, s in zip(warm.trials, steered, strict=True) if not s][:16]
    assert design == [t.params for t in cold.trials]  # the cold study's start-up, in order
    assert kinds[:20].count("startup") == 16 and "startup" not in kinds[20:], kinds


def test_sources_whose_picks_lose_to_the_design_are_dropped_during_the_start_up(tmp_path):
    """``drop_outpaced`` (the default): once the study has measured `MIN_EVIDENCE` configs, a
    source whose model's picks lose to the cold design's points is dropped, whatever its
    weighting says (the decay alone here, which never zeroes a source); with
    ``drop_outpaced=False`` it is kept; an honest source, whose picks lead, is kept."""
    db = open_storage(f"sqlite:///{tmp_path / 'o.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    honest = _source_study(db, "honest", (96, 64, 80), sign=1.0)
    dropped = _tuned(db, "dropped", [inverted], seed=0, n_trials=12, weighting="decay")
    steered = [steered_by_sources(t) for t in dropped.trials]
    assert steered[:MIN_EVIDENCE:2] == [True] * (MIN_EVIDENCE // 2), steered
    assert not any(steered[MIN_EVIDENCE:]), steered
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in dropped.trials]
    assert kinds[MIN_EVIDENCE:] == ["startup"] * (12 - MIN_EVIDENCE), kinds
    unchecked = _tuned(
        db, "unchecked", [inverted], seed=0, n_trials=12, weighting="decay", drop_outpaced=False
    )
    assert any(steered_by_sources(t) for t in unchecked.trials[MIN_EVIDENCE:])
    # A new process resuming the dropped study past its start-up drops the source again.
    template = CpuTemplate(workload(64, 64, 64))
    for _ in range(2):
        sampler = CostModelSampler(
            template, source_studies=[inverted], seed=0, source_weighting="decay"
        )
        study = optuna.load_study(study_name="dropped", storage=db, sampler=sampler)
        study.optimize(lambda trial: _synthetic(template.suggest(trial)), n_trials=6)
    assert len(study.trials) == 24 and not any(map(steered_by_sources, study.trials[8:]))
    kept = _tuned(db, "kept", [honest], seed=0, n_trials=20, weighting="decay")
    (history,) = source_weight_rounds(kept).values()
    assert all(weight > 0 for _, weight in history), history


def test_keep_start_up_picks_keeps_the_sources_early_configs_in_a_dropped_studys_model(tmp_path):
    """``keep_start_up_picks=True``: a study that dropped its sources leaves out of its model
    only the configs they steered after the start-up, so the four they chose first stay in."""
    db = open_storage(f"sqlite:///{tmp_path / 'k.db'}")
    inverted = _source_study(db, "inverted", (96, 64, 80), sign=-1.0)
    picks = _tuned(db, "picks", [inverted], seed=0, n_trials=20, keep_start_up_picks=True)
    steered = [steered_by_sources(t) for t in picks.trials]
    assert sum(steered) == MIN_EVIDENCE // 2 and not any(steered[MIN_EVIDENCE:]), steered
    template = CpuTemplate(workload(64, 64, 64))
    space = KnobSpace(template.knobs)
    for keep, rows in ((True, 20), (False, 20 - MIN_EVIDENCE // 2)):
        sampler = CostModelSampler(template, source_studies=[inverted], keep_start_up_picks=keep)
        history = read_history(picks, space, leave_out=sampler._steered_after_start_up)
        assert len(history.configs) == rows


def test_auto_finds_same_target_studies_nearest_first(tmp_path):
    db = open_storage(f"sqlite:///{tmp_path / 'a.db'}")
    other_target = target_spec({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    _source_study(db, "mm-far", (64, 64, 64), 1.0)
    _source_study(db, "mm-near", (512, 512, 256), 1.0)
    _source_study(db, "mm-elsewhere", (512, 512, 512), 1.0, target=other_target)
    empty = create_study(db, "mm-empty", workload(512, 512, 512), LLVM, None, None)
    empty.tell(empty.ask(), state=optuna.trial.TrialState.FAIL)
    optuna.create_study(study_name="foreign", storage=db).optimize(lambda t: 1.0, n_trials=1)
    found = find_sources(db, workload(512, 512, 512), target_key(LLVM))
    assert [s.study_name for s, _ in found] == ["mm-near", "mm-far"]
    assert found[0][1] < found[1][1]
    assert [s.study_name for s, _ in find_sources(db, workload(512, 512, 512), target_key(LLVM),
                                                  limit=1)] == ["mm-near"]  # fmt: skip
    assert find_sources(db, workload(512, 512, 512), target_key(other_target))[0][0].study_name \
        == "mm-elsewhere"  # fmt: skip
    assert (
        find_sources(db, workload(512, 512, 256), target_key(LLVM), exclude="mm-near")[0][
            0
        ].study_name
        == "mm-far"
    )


@pytest.mark.slow
def test_cli_transfer_from_auto(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'auto.db'}"
    db = open_storage(url)
    _source_study(db, "prior", (96, 64, 80), 1.0)
    argv = ["tune", "matmul", "--shape", "64,64,64", "--trials", "16", "--storage", url]
    argv += ["--study", "mm", "--seed", "0", "--no-progress", "--repeat", "2"]
    argv += ["--min-repeat-ms", "2", "--transfer-from", "auto", "--source-weighting", "outranked"]
    assert main(argv) == 0
    study = optuna.load_study(study_name="mm", storage=url)
    assert study.user_attrs["transfer_sources"] == ["prior"]
    note = get_note(study)
    assert "source_weighting=outranked" in note, note  # the CLI's choice reached the sampler
    kinds = [t.system_attrs[PROPOSAL_ATTR]["source"] for t in study.trials]
    assert kinds[0] == "model" and "startup" in kinds, kinds  # every other early trial
    # The note and the dashboard's plot say how much the source weighed, round by round.
    rounds = source_weight_rounds(study)
    assert list(rounds) == [workload(96, 64, 80).key] and len(rounds[workload(96, 64, 80).key]) >= 2
    assert all(0 <= w <= 1 for _, w in rounds[workload(96, 64, 80).key])
    assert "source weights" in study_note(study, study.sampler)
    # A cold storage: auto finds nothing and the study starts cold.
    cold_url = f"sqlite:///{tmp_path / 'cold.db'}"
    argv[argv.index(url)] = cold_url
    assert main(argv) == 0
    cold = optuna.load_study(study_name="mm", storage=cold_url)
    assert "transfer_sources" not in cold.user_attrs
    assert cold.trials[0].system_attrs[PROPOSAL_ATTR]["source"] == "startup"
    capsys.readouterr()
    assert main([*argv, "--transfer-from", "prior"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "auto finds the studies itself" in err, err
    assert math.isfinite(study.best_value)


def test_a_dropped_source_is_judged_again_once_it_has_grown(tmp_path):
    """A model run's sources grow while a task is tuned: one dropped on its first trials (here
    reversed) comes back once it holds twice the trials it held then, and is judged again; one
    that has not grown enough stays dropped."""
    db = open_storage(f"sqlite:///{tmp_path / 'r.db'}")
    source = _source_study(db, "growing", (96, 64, 80), sign=-1.0)
    template = CpuTemplate(workload(64, 64, 64))
    create_study(db, "target", template.workload, LLVM, None, None)
    sampler = CostModelSampler(template, source_studies=[source], seed=0)
    study = optuna.load_study(study_name="target", storage=db, sampler=sampler)
    objective = lambda trial: _synthetic(template.suggest(trial))  # noqa: E731
    study.optimize(objective, n_trials=24)
    assert sampler.warm.dropped and sampler.warm.drops == 1
    n_dropped = len(study.trials)
    _add_configs(source, CpuTemplate(workload(96, 64, 80)), 40, 1.0, seed=1)
    sampler.source_studies = [optuna.load_study(study_name="growing", storage=db)]
    assert sampler.warm.dropped, "88 trials are not twice the 48 held when dropped"
    _add_configs(source, CpuTemplate(workload(96, 64, 80)), 104, 1.0, seed=2)
    sampler.source_studies = [optuna.load_study(study_name="growing", storage=db)]
    assert not sampler.warm.dropped
    study.optimize(objective, n_trials=16)
    rounds = [
        t.system_attrs[PROPOSAL_ATTR].get("source_weights")
        for t in study.trials[n_dropped:]
        if t.system_attrs[PROPOSAL_ATTR]["source"] != "startup"
    ]
    # Mostly honest now, the grown source ranks the study's configs and weighs again.
    assert any(w and max(w.values()) > 0 for w in rounds), rounds
