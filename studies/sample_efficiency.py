"""Sample efficiency: best-so-far GFLOP/s against trials and seconds for each tuner.

The paper's main figure, with Optuna's samplers and TVM's MetaSchedule as peers. Every tuner
gets the same template (ours; MetaSchedule its own design space), the same timing settings and
the same budget. Runs go workload by workload, seed by seed, tuner by tuner, so that the
machine's drift hits every tuner alike; each study measures its own vendor baseline. When a
workload and seed are done, each tuner's best kernel is re-timed by the same measure code,
interleaved, so that no tuner keeps a lucky measurement (``remeasured`` column).

Studies are kept in an Optuna SQLite file (``--work``, default ``studies/work/``): running the
script again skips finished studies, so a budget can be spread over several runs, and
``optuna-dashboard sqlite:///studies/work/sample_efficiency.db`` shows them all. Our tuners
share a measurement cache (``measurement_cache.py``; ``--cache``, default ``measurements.db``
in the ``--work`` folder; ``--no-cache`` to measure everything afresh): a config any of them
measured before is not measured again, so the same config has the same value for every tuner.
MetaSchedule keeps its own runner, and the final re-timing is always fresh. With the cache,
wall seconds (and the curves against seconds) count reused configs as free. Writes, under
``--out`` (default ``studies/results/``), from every finished study in the file that matches
the requested trials:

- ``sample_efficiency.csv``: per workload, tuner and seed: vendor (at tuning time), best at
  each checkpoint, re-timed best and the vendor re-timed with it, wall and sampler seconds,
  the configs the measurement cache answered and measured, trials to reach 90 % of the best
  any main tuner found for that workload and seed (``trials_to_90%``) and for that workload
  over all seeds (``trials_to_90%_known``, the best known kernel);
- ``sample_efficiency_curves.csv``: every trial with its best-so-far and elapsed seconds;
- the plots and the summary of `efficiency_report` (ratios to the re-timed vendor, the pooled
  ratio to TPE with its bootstrap interval, and issue 19's goals evaluated from these rows).

    python studies/sample_efficiency.py                       # everything: 256 trials, seeds 0-2
    python studies/sample_efficiency.py --workloads resnet18-c7 --tuners costmodel tpe
    python studies/sample_efficiency.py --quick --out /tmp/q  # matmul 128, 32 trials, one seed
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import efficiency_report
import metaschedule_peer
import optuna
from common import (
    ALL_WORKLOADS,
    DONE,
    HERE,
    RETIME,
    RETIME_ROUNDS,
    SETTINGS,
    UNSEEN_WORKLOADS,
    VENDOR,
    WORKLOADS,
    TimedSampler,
    early_winners,
    finished,
    first_trial,
    retime,
    study_name,
    workload_of,
)
from efficiency_goals import POOLED_AT
from measurement_cache import HITS_ATTR, MISSES_ATTR, check_cache, tune_label
from results_io import best_so_far, write_csv

import tensortune
from tensortune.measure import Measurer
from tensortune.storage import best_summary, study_space
from tensortune.target import target_spec
from tensortune.templates import template_for

#: The workload of --quick (a label of `common.QUICK_WORKLOADS`).
QUICK_LABEL = "matmul-128"
#: Tuner name → options of `tensortune.CostModelSampler` (None: not a costmodel variant).
#: Each variant changes one thing from the default, for the ablation.
COSTMODEL_VARIANTS: dict[str, dict] = {
    "costmodel": {},
    "costmodel-reg": {"loss": "reg"},
    "costmodel-ei": {"acquisition": "ei"},
    "costmodel-ucb": {"acquisition": "ucb"},
    "costmodel-nodiv": {"diversity": 0.0},
    "costmodel-noeps": {"epsilon": 0.0},
    "costmodel-eps0.25": {"epsilon": 0.25},
    "costmodel-restart0.1": {"restart_share": 0.1},
    # No explore share: every proposal from the search that breeds from the measured best.
    "costmodel-local": {"explore_share": 0.0},
    "costmodel-treegru": {"cost_model": "treegru"},
    # A start of 8 space-filling trials instead of 16: the model proposes from trial 9.
    "costmodel-start8": {"n_startup_trials": 8},
    # The model fit every round, however long the history (the default refits as it grows).
    "costmodel-refit0": {"refit_growth": 0.0},
    # The search before issue 19: one-knob annealing over program ("curve") features.
    "costmodel-anneal": {"search": "anneal", "feature_set": "curve"},
    # Program features (every candidate lowered through TVM) where the default reads knobs.
    "costmodel-curve": {"feature_set": "curve"},
}
PEERS = ("tpe", "gp", "random", "metaschedule")
#: Tuners that search MetaSchedule's design space (`tensortune.templates.MetaScheduleTemplate`)
#: instead of the template's, by the tuner they run there: beside ``metaschedule`` they compare
#: searches over one space.
IN_METASCHEDULE_SPACE = {
    "costmodel-ms": "costmodel",
    "costmodel-ms-curve": "costmodel-curve",
    "tpe-ms": "tpe",
}
TUNERS = (*COSTMODEL_VARIANTS, *PEERS, *IN_METASCHEDULE_SPACE)
MAIN_TUNERS = ("costmodel", "tpe", "gp", "random", "metaschedule")
QUICK_TUNERS = ("costmodel", "tpe", "metaschedule")
#: CMA-ES is not among them: every knob is categorical, and Optuna's CmaEsSampler samples
#: categorical parameters independently at random, which is the random tuner.
CHECKPOINTS = (16, 32, 64, 128, 256)
RETIMED = "bench:remeasured_gflops"
RETIMED_VENDOR = "bench:remeasured_vendor_gflops"


def make_tuner(tuner: str, seed: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for `tuner` (not metaschedule)."""
    tuner = IN_METASCHEDULE_SPACE.get(tuner, tuner)
    if tuner in COSTMODEL_VARIANTS:
        return tensortune.CostModelSampler(seed=seed, **COSTMODEL_VARIANTS[tuner])
    return tensortune.make_sampler(tuner, seed)


def run_ours(
    label: str, tuner: str, seed: int, trials: int, storage: str, cache: str | None = None
) -> optuna.Study:
    """Tune with one of our tuners. With `cache` (a `measurement_cache` SQLite file; default
    None: none) configs measured before, by any tuner, are not measured again; the study's
    ``bench:cache_hits`` / ``bench:cache_misses`` say how many were reused / measured."""
    timed = TimedSampler(make_tuner(tuner, seed))
    start = time.perf_counter()
    name = study_name(label, tuner, seed, trials)
    space = "metaschedule" if tuner in IN_METASCHEDULE_SPACE else "template"
    study = tune_label(label, name, timed, trials, storage, cache, space)
    study.set_user_attr("bench:sampler_s", timed.seconds)
    study.set_user_attr(DONE, time.perf_counter() - start)
    return study


def run_metaschedule(label: str, seed: int, trials: int, storage: str) -> optuna.Study:
    """Tune with MetaSchedule and store its candidates as the trials of an Optuna study."""
    workload = workload_of(label)
    target = target_spec("llvm")
    start = time.perf_counter()
    # Like `tensortune.tune`, measure the vendor first, inside the wall time.
    with Measurer(metaschedule_peer.ScriptTemplate(workload), target, SETTINGS) as measurer:
        vendor = measurer.vendor_baseline()
    origin = datetime.datetime.now()
    with tempfile.TemporaryDirectory() as work_dir:
        run = metaschedule_peer.tune(workload, target, trials, seed, SETTINGS, work_dir)
    study = optuna.create_study(
        study_name=study_name(label, "metaschedule", seed, trials),
        storage=storage,
        direction="maximize",
    )
    for number, (value, elapsed) in enumerate(zip(run.gflops, run.elapsed_s, strict=True)):
        end = origin + datetime.timedelta(seconds=elapsed)
        study.add_trial(
            optuna.trial.FrozenTrial(
                number=number,
                trial_id=number,
                state=optuna.trial.TrialState.COMPLETE if value else optuna.trial.TrialState.FAIL,
                value=value or None,
                datetime_start=origin,
                datetime_complete=end,
                params={},
                distributions={},
                user_attrs={"gflops": value} if value else {},
                system_attrs={},
                intermediate_values={},
            )
        )
    study.set_user_attr("workload", workload.name)
    study.set_user_attr("shape", dict(workload.shape))
    if vendor:
        study.set_user_attr("vendor_library", vendor[0])
        study.set_user_attr("vendor_gflops", workload.flop_count / vendor[1] / 1e9)
    study.set_user_attr("bench:best_script", run.best_script)
    study.set_user_attr("bench:sampler_s", 0.0)
    study.set_user_attr(DONE, time.perf_counter() - start)
    return study


def retime_winners(label: str, studies: dict[str, optuna.Study]) -> None:
    """Re-time each study's best kernel and the vendor, interleaved over rounds; stores the
    median GFLOP/s (`RETIMED`, and `RETIMED_VENDOR` where the studies had a vendor). Our
    tuners' winners of their first n trials, for each of `efficiency_goals.POOLED_AT` below
    the study's trials, are re-timed in the same rounds (`RETIMED` + ``@n``), so that the
    pooled ratio at those checkpoints compares re-timed kernels too."""
    workload = workload_of(label)
    kernels: dict[str, tuple[object, dict]] = {}
    early: dict[str, dict[int, dict]] = {}  # per tuner of ours, `common.early_winners`
    for tuner, study in studies.items():
        if tuner == "metaschedule":
            script = {"script": study.user_attrs["bench:best_script"]}
            kernels[tuner] = (metaschedule_peer.ScriptTemplate(workload), script)
            continue
        best = best_summary(study)["config"]
        template = template_for(workload, target_spec("llvm"), study_space(study))
        kernels[tuner] = (template, best)
        early[tuner] = early_winners(study, POOLED_AT)
        for n, config in early[tuner].items():
            if config != best:
                kernels[f"{tuner}@{n}"] = (template, config)
    library = next((s.user_attrs["vendor_library"] for s in studies.values()
                    if "vendor_library" in s.user_attrs), None)  # fmt: skip
    seconds = retime(kernels, target_spec("llvm"), RETIME, RETIME_ROUNDS, library)
    for tuner, study in studies.items():
        if tuner in seconds:
            study.set_user_attr(RETIMED, workload.flop_count / seconds[tuner] / 1e9)
        for n in early.get(tuner, {}):
            # The same kernel as the final winner: the same re-timing.
            found = seconds.get(f"{tuner}@{n}", seconds.get(tuner))
            if found:
                study.set_user_attr(f"{RETIMED}@{n}", workload.flop_count / found / 1e9)
        if VENDOR in seconds and study.user_attrs.get("vendor_library") == library:
            study.set_user_attr(RETIMED_VENDOR, workload.flop_count / seconds[VENDOR] / 1e9)


def summarize(label: str, tuner: str, seed: int, study: optuna.Study) -> tuple[dict, list[dict]]:
    """The CSV row of one finished study (see the module docstring) and its curve
    (`results_io.best_so_far`); trials to 90 % are added by `write_results`."""
    curve = best_so_far(study, workload=label, tuner=tuner, seed=seed)
    attrs = study.user_attrs
    row: dict = {
        "workload": label,
        "tuner": tuner,
        "seed": seed,
        "trials": len(curve),
        "vendor_library": attrs.get("vendor_library", ""),
        "vendor_gflops": round(attrs.get("vendor_gflops") or 0.0, 1),
    }
    for n in CHECKPOINTS:
        if n <= len(curve):
            row[f"best@{n}"] = round(curve[n - 1]["best_gflops"], 1)
    row["remeasured"] = round(attrs[RETIMED], 1) if RETIMED in attrs else ""
    for n in POOLED_AT:
        if n < len(curve):  # the winner of the first n trials, re-timed ('' where it was not)
            row[f"remeasured@{n}"] = round(attrs.get(f"{RETIMED}@{n}", 0.0), 1) or ""
    # The vendor re-timed with the winners ('' for studies from before it was stored).
    row["remeasured_vendor"] = round(attrs[RETIMED_VENDOR], 1) if RETIMED_VENDOR in attrs else ""
    row["wall_s"] = round(attrs[DONE], 1)
    row["sampler_s"] = round(attrs.get("bench:sampler_s", 0.0), 1)
    # Configs the measurement cache answered / measured ('' without the cache: MetaSchedule).
    row["cache_hits"] = attrs.get(HITS_ATTR, "")
    row["cache_misses"] = attrs.get(MISSES_ATTR, "")
    return row, curve


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true",
        help=f"matmul 128, 32 trials, seed 0, {' '.join(QUICK_TUNERS)}, a temporary --work",
    )  # fmt: skip
    parser.add_argument("--trials", type=int, default=256, help="trials per study (default 256)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument(
        "--workloads", nargs="+", choices=[*WORKLOADS, *UNSEEN_WORKLOADS],
        default=list(WORKLOADS),
        help=f"default: the reference workloads; {', '.join(UNSEEN_WORKLOADS)} are shapes the "
        "defaults were not chosen on (run them with their own --work and --out)",
    )  # fmt: skip
    parser.add_argument(
        "--tuners", nargs="+", choices=TUNERS, default=None,
        help=f"default: {' '.join(MAIN_TUNERS)}",
    )  # fmt: skip
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    parser.add_argument(
        "--work", default=None, help=f"study storage folder (default {os.path.join(HERE, 'work')})"
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache", default=None, metavar="PATH",
        help="measurement cache of our tuners, shared by all of them (measurement_cache.py; "
        "default: measurements.db in the --work folder)",
    )  # fmt: skip
    cache.add_argument(
        "--no-cache", action="store_true", help="measure every config of every study afresh"
    )
    args = parser.parse_args()
    if args.quick:
        labels, trials, seeds = [QUICK_LABEL], 32, [0]
        tuners = args.tuners or list(QUICK_TUNERS)
        work = args.work or tempfile.mkdtemp(prefix="sample-efficiency-")
    else:
        labels, trials, seeds = args.workloads, args.trials, args.seeds
        tuners = args.tuners or list(MAIN_TUNERS)
        work = args.work or os.path.join(HERE, "work")
    if trials < CHECKPOINTS[0]:
        parser.error(f"--trials must be at least {CHECKPOINTS[0]}")
    cache_path = None if args.no_cache else args.cache or os.path.join(work, "measurements.db")
    if cache_path is not None:
        try:
            check_cache(cache_path)
        except ValueError as err:
            parser.error(str(err))
    os.makedirs(work, exist_ok=True)
    storage = f"sqlite:///{os.path.join(work, 'sample_efficiency.db')}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for label in labels:
        for seed in seeds:
            studies = {}
            for tuner in tuners:
                study = finished(storage, study_name(label, tuner, seed, trials))
                if study is None:
                    start = time.perf_counter()
                    if tuner == "metaschedule":
                        study = run_metaschedule(label, seed, trials, storage)
                    else:
                        study = run_ours(label, tuner, seed, trials, storage, cache_path)
                    reused = ""
                    if HITS_ATTR in study.user_attrs:
                        hits, misses = study.user_attrs[HITS_ATTR], study.user_attrs[MISSES_ATTR]
                        reused = f" ({hits} configs from the cache, {misses} measured)"
                    print(
                        f"{label} {tuner} seed {seed}: best {study.best_value:.1f} GFLOP/s, "
                        f"{time.perf_counter() - start:.0f} s{reused}",
                        flush=True,
                    )
                studies[tuner] = study
            fresh = {t: s for t, s in studies.items() if RETIMED not in s.user_attrs}
            if fresh:
                retime_winners(label, fresh)
    write_results(storage, trials, args.out)


def write_results(storage: str, trials: int, out: str) -> None:
    """CSV, plots and summary of every finished study in `storage` with `trials` trials."""
    groups: dict[tuple[str, int], list[tuple[dict, list[dict]]]] = {}
    for summary in optuna.get_all_study_summaries(storage):
        label, tuner, seed_text, size = summary.study_name.split("/")
        if summary.user_attrs.get(DONE) is None or size != f"n{trials}":
            continue
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        seed = int(seed_text.removeprefix("s"))
        groups.setdefault((label, seed), []).append(summarize(label, tuner, seed, study))
    rows, curves = [], []
    order = {label: i for i, label in enumerate(ALL_WORKLOADS)}
    for _, results in sorted(groups.items(), key=lambda g: (order.get(g[0][0], len(order)), g[0])):
        # The reference is the main tuners' best, so that adding variants moves nothing.
        main = [r for r in results if r[0]["tuner"] in MAIN_TUNERS] or results
        top = max(curve[-1]["best_gflops"] for _, curve in main)
        results.sort(key=lambda result: efficiency_report.tuner_order(result[0]["tuner"]))
        for row, curve in results:
            bests = [c["best_gflops"] for c in curve]
            row["trials_to_90%"] = first_trial(bests, 0.9 * top)
            rows.append(row)
            curves.extend(curve)
    if not rows:
        print("no finished studies yet")
        return
    efficiency_report.add_trials_to_known(rows, curves)
    write_csv(os.path.join(out, "sample_efficiency.csv"), rows)
    write_csv(os.path.join(out, "sample_efficiency_curves.csv"), curves)
    efficiency_report.report(rows, curves, out)


if __name__ == "__main__":
    main()
