"""Transfer: does a study warm-started from prior studies find fast kernels in fewer trials?

For each pair, the learned sampler tunes the target three ways, seed by seed, side by side:

- ``cold``: no prior (the default sampler);
- ``warm``: ``CostModelSampler(source_studies=...)`` over the sources' learned-sampler studies
  (all their seeds), read from their own storage and never copied; each source weighs by how
  well it ranks the target's own measured configs (the default ``source_weighting``);
- ``warm-relative``: the same with ``source_weighting="relative"``: a source keeps full weight
  only while it ranks the target's configs as well as they rank each other (cross-validated);
- ``warm-outranked``: the same with ``source_weighting="outranked"``: the evidence's weight,
  and none for a source that ranks the target's configs at most half as well as they rank
  each other;
- ``warm-shared``: the same with ``source_weighting="shared"``: the default's weights split
  among the source workloads, so that together they weigh as one;
- ``warm-decay``: the same with ``source_weighting="decay"``: source rows weigh by the
  half-life alone, whatever their ranking (the weighting before the evidence);
- ``warm-guarded``: the same with ``source_weighting="guarded"``: the decay, except that a
  source ranking the target's configs reversed beyond chance weighs nothing;
- ``warm-validated``: the same with ``source_weighting="validated"``: the evidence's
  weights while a model trained with them ranks held-out configs of the target's as well as
  one without;
- ``warm-capped``: the same with ``source_weighting="capped"``: the evidence's weights, scaled
  so that the sources' rows together never outweigh the target's own measured configs;
- ``warm-beyond-chance``: the same with ``source_weighting="beyond-chance"``: the evidence's
  weights, except that from the target's 16th config on a source whose Kendall tau on its
  configs is within one standard deviation of chance weighs nothing (from the 8th before
  25b2784);
- ``warm-all-rows``: the same with ``source_rows="all"``: a TreeGRU fits on every source row
  in every round, at its weight, however little that is (the warm start before 2026-12-05;
  XGBoost always does, so for it this is ``warm``);
- ``warm-by-weight``: the same with ``source_rows="by-weight"``: a TreeGRU draws a weight's
  worth of each source's rows as ``warm`` does, and drops a source once its rows weigh under a
  tenth of the target's own (the default until the evening of 2026-12-05; results written
  before then call this mode ``warm``, and today's ``warm`` ``warm-drawn``);
- ``warm-model``: the same with ``source_starts=0``: the sources train the model, but their
  best configs do not start annealing chains;
- ``warm-design``: the same with ``source_startup_share=0``: the first 16 trials are the cold
  study's start-up design, all of it, and the sources train the model from its first round;
- ``warm-yield``: the same with ``yield_to_design=True``: an early trial of the sources' model
  goes to the cold design instead while the design's fastest config beats the model's;
- ``warm-unchecked``: the same with ``drop_outpaced=False``: the sources are kept through the
  start-up even where the cold design's fastest config beats the fastest the sources' model
  chose (the default before af9e47a; the run that made it the default called the warm start
  of then ``warm`` and the new one ``warm-outpaced``);
- ``warm-keep-picks``: the same with ``keep_start_up_picks=True``: a study that dropped its
  sources keeps in its model the configs they chose during the start-up;
- ``warm-local``: the same with ``local_share=0.5``: after the start-up every other trial is
  proposed by a cold twin, a model of the study's own configs alone (knob features, the cold
  search), so that the sources' model does not steer the whole search;
- ``warm-design-local``: ``warm-design`` and ``warm-local`` at once: the whole cold design
  first, then every other trial from the cold twin, whose first rounds see the cold study's
  own history, so that it can find what the cold study's first model rounds find;
- ``warm-knob``: the same with ``feature_set="knob"``: the sources' rows and the study's own
  from the knob values (`tensortune.features.knob`, the same length for every CPU template),
  so a round scores ~10^4 configs as a cold study's does, where ``warm`` lowers ~600 through
  TVM for program features;
- ``warm-unscreened``: the same with ``screen_share=1``: every candidate of a round's search
  is lowered for its program features, none ruled out first by the knob-feature screen
  (`tensortune.sampler.screening`; the warm start before the screen);
- ``cold-program``: cold, with the program features a warm study from another design space
  uses (``feature_set`` the cost model's own, with the knob-feature screen), so that a warm
  study's loss to cold can be split between its sources and its features (for the TreeGRU,
  which always takes program features, the same as ``cold``);
- ``cold-placebo``: cold, with `PLACEBO_CONFIGS` random configs enqueued as the first trials,
  as many as a warm study's sources choose before ``drop_outpaced`` can drop them: how much
  a few configs of anyone's choosing move the cold study's path;
- ``enqueue``: cold, after Optuna's simple alternative: the sources' 8 best configs enqueued
  as the first trials. Tile splits of another shape are rarely in the target's space (none of
  C12's best is in C7's), so each is moved to the target's nearest split; configs of another
  operator have other knobs, so it runs for the pairs within conv2d.

Pairs: across shapes, ResNet-18 C12 → C7 (the replication report's experiment) and
leave-one-out over the ResNet-18 layers we tune (C2, C7, C12); across operators, matmul and
dense → batch_matmul (BERT attention) and conv2d → depthwise conv2d (MobileNet); and an
unrelated source, depthwise conv2d → matmul 1024, where a warm start should lose nothing.

Sources are the learned-sampler studies of ``sample_efficiency.py`` (``--sources``, its SQLite
file, their 64-trial studies of seeds 0-2); missing ones are run first. ``--source-trials 64 256``
runs every warm mode once per source length: the first length's modes keep their names, the
others' are suffixed (``warm-src256``), and all are re-timed with cold in one pass. Targets go to
``--work`` (default ``studies/work/transfer.db``); finished studies are skipped on a second
run. Every study measures through the benchmarks' measurement cache (``measurement_cache.py``;
``--cache``, default ``measurements.db`` beside ``--work``, the file ``sample_efficiency.py``
uses by default; ``--no-cache`` to measure afresh): a config measured before, by any mode or
any benchmark, is not measured again, so the modes differ in search, not in timing noise, and
wall seconds count reused configs as free. Writes under ``--out`` (default
``studies/results/``):

- ``transfer.csv``: per pair, mode and seed: best GFLOP/s at 16 / 32 / 64 / 128 trials (in
  longer runs also 256, 512, ... and the last trial: `transfer_report.checkpoints`) as
  found while tuning and re-timed (each mode's winner of its first n trials and the vendor
  library, timed interleaved after the pair's modes finished, `retime_pair`; with
  ``--finalists N`` each winner is the fastest of its study's N best configs by one re-timing,
  quoted by a second, as ``tensortune export --finalists N`` would pick), trials to reach
  90 % of the cold study's best (same seed), wall seconds, the configs the cache answered and
  measured;
- ``transfer_curves.csv``: best-so-far per trial; ``transfer.png``: the curves;
- ``transfer_summary.md`` (``transfer_report.py``): medians, every seed, the pooled ratio of
  each warm mode to cold with its bootstrap interval, trials to 90 % of the best known, and
  issue 20's goals.

    python studies/transfer.py                      # every pair and mode, seeds 0-4, 64 trials
    python studies/transfer.py --trials 128 --modes cold warm warm-decay
    python studies/transfer.py --pairs c12-to-c7 --seeds 0
    python studies/transfer.py --cost-model xgb treegru \\
        --pairs matmul-to-batch_matmul conv2d-to-depthwise --out studies/results/treegru_transfer

With several ``--cost-model`` values the models take turns on each pair and seed (side by
side, one run); rows and the summary then carry a ``cost_model`` column, as they do when the
one model is not the default (so that ``transfer_report.py --merge`` keeps the models apart).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import optuna
import transfer_report
from common import (
    DONE,
    RETIME,
    RETIME_ROUNDS,
    SOURCE_SEEDS,
    SOURCE_TRIALS,
    TRANSFER_PAIRS,
    TRANSFER_TRIALS,
    VENDOR,
    early_finalists,
    finished,
    first_trial,
    retime,
    retime_in_passes,
    study_name,
    transfer_study_name,
    workload_of,
)
from measurement_cache import HITS_ATTR, MISSES_ATTR, check_cache, tune_label
from results_io import best_so_far, write_csv

import tensortune
from tensortune.cost_model import COST_MODELS, DEFAULT_COST_MODEL
from tensortune.finalists import best_distinct
from tensortune.sampler.source_weighting import SOURCE_WEIGHTINGS
from tensortune.sampler.transfer import project_config
from tensortune.storage import create_study, open_storage, study_target
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate
from tensortune.trial_records import trial_config

HERE = os.path.dirname(os.path.abspath(__file__))
# The names these had here before they moved to common.py: the probes kept under results/
# import transfer.PAIRS.
PAIRS = TRANSFER_PAIRS
TRIALS = TRANSFER_TRIALS
#: What each pair transfers across, for the goals: shapes of one operator (trials to 90 % of
#: the best known >= 3x fewer than cold), other operators (>= 1.5x), or nothing related (lose
#: nothing).
KINDS = {
    "c12-to-c7": "shapes",
    "loo-c2": "shapes",
    "loo-c7": "shapes",
    "loo-c12": "shapes",
    "matmul-to-batch_matmul": "operators",
    "conv2d-to-depthwise": "operators",
    "depthwise-to-matmul": "unrelated",
    "matmul-shape": "shapes",
}
#: --quick: another matmul shape → matmul 128, 16 trials, one seed.
QUICK_PAIRS = {"matmul-shape": ("matmul-128", ("matmul-192x96x160",), True)}
#: The modes that run another source weighting than the default's, one per weighting.
WEIGHTING_OF_MODE = {f"warm-{w}": w for w in SOURCE_WEIGHTINGS if w != SOURCE_WEIGHTINGS[0]}
#: The sampler options other than the source weighting that set a mode apart from ``warm``.
OPTIONS_OF_MODE: dict[str, dict[str, object]] = {
    "warm-all-rows": {"source_rows": "all"},
    "warm-by-weight": {"source_rows": "by-weight"},
    "warm-model": {"source_starts": 0},
    "warm-design": {"source_startup_share": 0.0},
    "warm-yield": {"yield_to_design": True},
    "warm-unchecked": {"drop_outpaced": False},
    "warm-keep-picks": {"keep_start_up_picks": True},
    "warm-local": {"local_share": 0.5},
    "warm-design-local": {"source_startup_share": 0.0, "local_share": 0.5},
    "warm-knob": {"feature_set": "knob"},
    "warm-unscreened": {"screen_share": 1.0},
}
MODES = (
    "cold",
    "warm",
    *WEIGHTING_OF_MODE,
    "warm-model",
    "warm-design",
    "warm-yield",
    "warm-unchecked",
    "warm-keep-picks",
    "warm-local",
    "warm-design-local",
    "warm-knob",
    "warm-unscreened",
    "warm-all-rows",
    "warm-by-weight",
    "cold-program",
    "cold-placebo",
    "enqueue",
)


def source_mode(mode: str, source_trials: int, first: int) -> str:
    """The name of `mode` warm-started from sources of `source_trials` trials, in a run whose
    first ``--source-trials`` is `first`: `mode` itself there, suffixed for the others."""
    return mode if source_trials == first else f"{mode}-src{source_trials}"


def source_studies(
    labels: tuple[str, ...], seeds: list[int], trials: int, storage: str, cache: str | None = None
) -> list[optuna.Study]:
    """The learned-sampler studies of `labels` in `storage`, run first where missing (through
    the measurement cache `cache`, default None: none)."""
    out = []
    for label in labels:
        for seed in seeds:
            name = study_name(label, "costmodel", seed, trials)
            study = finished(storage, name)
            if study is None:
                print(f"source {name}: running it first", flush=True)
                sampler = tensortune.CostModelSampler(seed=seed)
                start = time.perf_counter()
                study = timed_tune(label, name, sampler, trials, storage, start, cache)
            out.append(study)
    return out


def best_configs(sources: list[optuna.Study], target: str, n: int = 8) -> list[dict]:
    """The sources' best configs moved into `target`'s space, best first (see
    `tensortune.sampler.transfer.project_config`)."""
    knobs = CpuTemplate(workload_of(target)).knobs
    trials = [t for s in sources for t in s.trials if t.value is not None]
    out: list[dict] = []
    for trial in sorted(trials, key=lambda t: -t.value):
        config = project_config(trial_config(trial), knobs)
        if config is not None and config not in out:
            out.append(config)
        if len(out) == n:
            break
    return out


#: ``cold-placebo``: random configs measured first, as many as a warm study's sources choose in
#: its first `tensortune.sampler.source_weighting.MIN_EVIDENCE` trials (every other one).
PLACEBO_CONFIGS = 4


def random_configs(target: str, n: int, seed: int) -> list[dict]:
    """`n` configs of `target`'s space drawn at random, seeded by `seed` and `n`."""
    knobs = CpuTemplate(workload_of(target)).knobs
    rng = np.random.default_rng([seed, n])
    return [{k.name: k.choices[int(rng.integers(len(k.choices)))] for k in knobs} for _ in range(n)]


def sampler_options(mode: str, cost_model: str = DEFAULT_COST_MODEL) -> dict[str, object]:
    """The `CostModelSampler` arguments, besides the sources, that set `mode` apart with
    `cost_model` (default `DEFAULT_COST_MODEL`)."""
    weighting = WEIGHTING_OF_MODE.get(mode, SOURCE_WEIGHTINGS[0])
    options = {"source_weighting": weighting, **OPTIONS_OF_MODE.get(mode, {})}
    if mode == "cold-program":  # the cost model's program features, whatever it is
        options["feature_set"] = COST_MODELS[cost_model]
    return options


def run_target(
    pair: str,
    target: str,
    mode: str,
    seed: int,
    trials: int,
    sources: list,
    storage: str,
    cost_model: str = "xgb",
    cache: str | None = None,
    source_trials: int = SOURCE_TRIALS,
) -> optuna.Study:
    """The finished study of `target` in `mode` (see the module docstring), run first where
    missing, with `cost_model` (default "xgb"), the measurement cache `cache` (default None:
    none) and `sources` of `source_trials` trials each (default `SOURCE_TRIALS`)."""
    name = transfer_study_name(pair, target, mode, seed, trials, cost_model, source_trials)
    study = finished(storage, name)
    if study is not None:
        return study
    sampler = tensortune.CostModelSampler(
        cost_model=cost_model,
        seed=seed,
        source_studies=sources if mode.startswith("warm") else (),
        **sampler_options(mode, cost_model),
    )
    start = time.perf_counter()
    if mode in ("enqueue", "cold-placebo"):  # a study with configs queued, which `tune` resumes
        workload, spec = workload_of(target), target_spec("llvm")
        study = create_study(open_storage(storage), name, workload, spec, None, sampler)
        if mode == "enqueue":
            configs = best_configs(sources, target)
        else:
            configs = random_configs(target, PLACEBO_CONFIGS, seed)
        for config in configs:
            study.enqueue_trial(config)
        study.set_user_attr("bench:enqueued", len(configs))
    return timed_tune(target, name, sampler, trials, storage, start, cache)


def timed_tune(
    label: str,
    name: str,
    sampler: optuna.samplers.BaseSampler,
    trials: int,
    storage: str,
    start: float,
    cache: str | None = None,
) -> optuna.Study:
    """Tune `label` for `trials` with the study settings, recording seconds since `start`.
    With `cache` (a `measurement_cache` SQLite file; default None: none) configs measured
    before are not measured again, as in ``sample_efficiency.run_ours``; the study's
    ``bench:cache_hits`` / ``bench:cache_misses`` say how many were reused / measured."""
    study = tune_label(label, name, sampler, trials, storage, cache)
    study.set_user_attr(DONE, time.perf_counter() - start)
    return study


#: The cold study's user attr (suffixed with the pair) that keeps a pair's re-timing.
RETIMED_ATTR = "bench:retimed:"


def retime_pair(
    pair: str, target: str, studies: dict[str, optuna.Study], finalists: int = 1
) -> dict[str, dict]:
    """Every mode's winner of its first n trials, for each of `transfer_report.checkpoints`
    within its trials and at its last trial, and the vendor library, re-timed interleaved:
    ``{mode: {n: GFLOP/s}}`` and ``{"vendor": {0: GFLOP/s}}``.

    With `finalists` 1 (the default) the winner is the study's best of its first n trials,
    timed over `common.RETIME_ROUNDS` rounds (`common.retime`). Above 1 it is what ``tensortune
    export --finalists N`` would pick: the fastest of the best `finalists` distinct configs by
    one pass of `common.RETIME_ROUNDS` rounds, and its figure that of a second pass,
    interleaved with the first (`common.retime_in_passes`), as a pick judged on its own
    readings is biased upward.

    Kept on the cold study (``RETIMED_ATTR + pair``, suffixed ``:finalistsN`` above 1; cold
    studies are shared by the pairs of a target), with the configs timed and, under
    ``best_gflops``, each study's own best by the same judging pass, and read back on a
    second run only if every mode is in it with the same configs: a mode whose studies were
    run again with other code finds other winners, which are timed afresh."""
    cold = studies["cold"]
    configs = {mode: _finalists(study, finalists) for mode, study in studies.items()}
    key = RETIMED_ATTR + pair + (f":finalists{finalists}" if finalists > 1 else "")
    kept = cold.user_attrs.get(key)
    if kept is not None and kept.get("configs") == json.loads(json.dumps(configs)):
        return {
            mode: {int(n): v for n, v in found.items()} for mode, found in kept["gflops"].items()
        }
    workload = workload_of(target)
    template = CpuTemplate(workload)
    library = cold.user_attrs.get("vendor_library")
    distinct: list[dict] = []  # one kernel per distinct config, whatever modes share it
    for found in configs.values():
        for early in found.values():
            distinct += [c for c in early if c not in distinct]
    if finalists > 1:
        picking, judging = retime_in_passes(
            template, distinct, target_spec("llvm"), RETIME, RETIME_ROUNDS, 2, library
        )
    else:
        kernels = {str(i): (template, c) for i, c in enumerate(distinct)}
        timed = retime(kernels, target_spec("llvm"), RETIME, RETIME_ROUNDS, library)
        judging = {VENDOR if k == VENDOR else int(k): v for k, v in timed.items()}
        picking = judging
    gflops: dict[str, dict] = {}
    best: dict[str, dict] = {}  # the study's best by the judging pass, beside the pick
    for mode, found in configs.items():
        gflops[mode], best[mode] = {}, {}
        for n, early in found.items():
            ran = [i for i in (distinct.index(c) for c in early) if i in picking and i in judging]
            if ran:
                pick = min(ran, key=picking.__getitem__)
                gflops[mode][n] = workload.flop_count / judging[pick] / 1e9
            if distinct.index(early[0]) in judging:
                best[mode][n] = workload.flop_count / judging[distinct.index(early[0])] / 1e9
    if VENDOR in judging:
        gflops["vendor"] = {0: workload.flop_count / judging[VENDOR] / 1e9}
    cold.set_user_attr(key, {"configs": configs, "gflops": gflops, "best_gflops": best})
    return gflops


def _finalists(study: optuna.Study, count: int) -> dict[int, list[dict]]:
    """The study's best `count` distinct configs among its first n trials, best first, per
    checkpoint within its trials and at its last trial."""
    early = early_finalists(study, tuple(transfer_report.checkpoints(len(study.trials))), count)
    early[len(study.trials)] = [dict(t.params) for t in best_distinct(study.trials, count)]
    return early


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="matmul shapes, 16 trials, seed 0, a temporary --work"
    )
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--trials", type=int, default=TRIALS, help=f"trials per target study (default {TRIALS})"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=MODES, default=list(MODES),
        help="default: all (cold always runs: every ratio divides by it)",
    )  # fmt: skip
    parser.add_argument("--sources", default=os.path.join(HERE, "work", "sample_efficiency.db"))
    parser.add_argument(
        "--source-trials", nargs="+", type=int, default=[SOURCE_TRIALS], metavar="N",
        help=f"trials of each source study; several run every warm mode once per length, "
        f"the first under its own name (default {SOURCE_TRIALS})",
    )  # fmt: skip
    parser.add_argument("--work", default=os.path.join(HERE, "work", "transfer.db"))
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument(
        "--cost-model",
        nargs="+",
        choices=tuple(COST_MODELS),
        default=[DEFAULT_COST_MODEL],
        help="the targets' cost models, run side by side (default xgb); the sources are the "
        "same either way",
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache", default=None, metavar="PATH",
        help="measurement cache of every study (measurement_cache.py; default: "
        "measurements.db beside --work)",
    )  # fmt: skip
    cache.add_argument(
        "--no-cache", action="store_true", help="measure every config of every study afresh"
    )
    parser.add_argument(
        "--finalists", type=int, default=1,
        help="re-time as `tensortune export --finalists N` picks: the fastest of each winner's "
        "N best configs by one pass, its figure a second pass's (default 1: the study's best)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.finalists < 1:
        parser.error(f"--finalists must be at least 1, got {args.finalists}")
    if min(args.source_trials) < 1 or len(set(args.source_trials)) < len(args.source_trials):
        parser.error(f"--source-trials must be distinct and at least 1, got {args.source_trials}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pairs = {p: PAIRS[p] for p in args.pairs}
    trials, seeds, source_seeds = args.trials, args.seeds, list(SOURCE_SEEDS)
    source_trials = args.source_trials
    if args.quick:
        pairs, trials, seeds, source_seeds, source_trials = QUICK_PAIRS, 16, [0], [0], [16]
        args.work = args.sources = os.path.join(tempfile.mkdtemp(), "transfer.db")
    folder = os.path.dirname(os.path.abspath(args.work))
    cache_path = None
    if not args.no_cache:
        cache_path = args.cache or os.path.join(folder, "measurements.db")
        try:
            check_cache(cache_path)
        except ValueError as err:
            parser.error(str(err))
    os.makedirs(folder, exist_ok=True)
    source_url, storage = f"sqlite:///{args.sources}", f"sqlite:///{args.work}"
    rows, curves = [], []
    for seed in seeds:
        for pair, (target, source_labels, enqueue) in pairs.items():
            sources = {
                n: source_studies(source_labels, source_seeds, n, source_url, cache_path)
                for n in source_trials
            }
            for model in args.cost_model:
                studies = {}
                # Enqueueing leaves the model aside: it runs with the default one only.
                with_enqueue = enqueue and model == "xgb"
                modes = [m for m in MODES if m in args.modes or m == "cold"]
                runs = [
                    (mode, n)
                    for n in source_trials
                    for mode in modes
                    if (mode != "enqueue" or with_enqueue)
                    and (mode != "cold" or n == source_trials[0])
                ]
                for mode, n in runs:
                    name = source_mode(mode, n, source_trials[0])
                    studies[name] = run_target(
                        pair, target, mode, seed, trials, sources[n], storage, model, cache_path, n
                    )
                    best = studies[name].best_value
                    print(f"{pair} {model} {name} s{seed}: {best:.1f} GFLOP/s", flush=True)
                retimed = retime_pair(pair, target, studies, args.finalists)
                pair_rows, pair_curves = summarize(pair, target, seed, studies, retimed)
                if len(args.cost_model) > 1 or model != DEFAULT_COST_MODEL:
                    for row in pair_rows + pair_curves:
                        row["cost_model"] = model
                rows += pair_rows
                curves += pair_curves
    write_csv(os.path.join(args.out, "transfer.csv"), rows)
    write_csv(os.path.join(args.out, "transfer_curves.csv"), curves)
    transfer_report.report(args.out, trials)


def summarize(
    pair: str,
    target: str,
    seed: int,
    studies: dict[str, optuna.Study],
    retimed: dict[str, dict] | None = None,
) -> tuple[list[dict], list[dict]]:
    """The CSV rows of one pair and seed, a row per mode, and their curves; with `retimed`
    (`retime_pair`, default None: not re-timed) the re-timed winners beside the values found
    while tuning."""
    retimed = retimed or {}
    retimed_vendor = retimed.get("vendor", {}).get(0)
    curves = {m: best_so_far(s, pair=pair, mode=m, seed=seed) for m, s in studies.items()}
    cold_best = curves["cold"][-1]["best_gflops"]
    rows = []
    for mode, curve in curves.items():
        attrs = studies[mode].user_attrs
        row = {"pair": pair, "kind": KINDS[pair], "target": target, "mode": mode, "seed": seed}
        # The CPU it was tuned and timed on: runs of other pairs merge only on the same one.
        row["host"] = study_target(studies[mode]).get("mcpu", "")
        checkpoints = transfer_report.checkpoints(len(curve))
        for n in checkpoints:
            row[f"best@{n}"] = round(curve[n - 1]["best_gflops"], 1) if n <= len(curve) else ""
        for n in checkpoints:
            found = retimed.get(mode, {}).get(n)
            row[f"retimed@{n}"] = round(found, 1) if found and n <= len(curve) else ""
        row["retimed_vendor"] = round(retimed_vendor, 1) if retimed_vendor else ""
        bests = [c["best_gflops"] for c in curve]
        row["trials_to_90pct_cold"] = first_trial(bests, 0.9 * cold_best)
        row["enqueued"] = attrs.get("bench:enqueued", "")
        vendor = attrs.get("vendor_gflops")  # the enqueue studies measure none
        row["vendor_gflops"] = round(vendor, 1) if vendor else ""
        row["wall_s"] = round(attrs[DONE], 1)
        # Configs the measurement cache answered / measured ('' for a study without it).
        row["cache_hits"] = attrs.get(HITS_ATTR, "")
        row["cache_misses"] = attrs.get(MISSES_ATTR, "")
        rows.append(row)
    return rows, [c for curve in curves.values() for c in curve]


if __name__ == "__main__":
    main()
