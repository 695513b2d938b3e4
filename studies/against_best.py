"""Timing against the best kernel so far (`MeasureSettings.against_best`) side by side with plain
timing: are a study's bests faster, and its recorded values truer, on a guest whose speed swings?

Per seed, two learned-sampler studies of one workload (the default `CostModelSampler`, the
benchmarks' `common.SETTINGS`, one with ``against_best=True``), run one after the other, the
first mode alternating with the seed, with no measurement cache: each times its own configs
at its own moments. Then every study's best distinct configs (its 8 best overall and its best
among the first 16 and 32 trials) are built once and timed with the vendor library in two
interleaved passes (`common.retime_in_passes`):

- a study's winner at 16, 32 and the last trial is its best recorded config, read on pass 2;
  against ÷ plain per seed, pooled as a geometric mean with a 95 % bootstrap interval;
- how true its recorded values are: the Kendall tau between the recorded values of its 8 best
  configs and their pass-1 readings, and its best config's recorded ÷ pass-1 GFLOP/s.

    python studies/against_best.py --label matmul-1024 --seeds 0 1 2 3 4 --trials 64 \\
        --work W/against_best.db --out studies/results/against-best-<host>

Writes ``against_best.csv`` (a row per study) and ``against_best_summary.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time

import optuna
from common import (
    ALL_WORKLOADS,
    RETIME,
    RETIME_ROUNDS,
    SETTINGS,
    VENDOR,
    early_finalists,
    finished,
    retime_in_passes,
    workload_of,
)
from efficiency_goals import geomean_interval
from results_io import write_csv
from scipy.stats import kendalltau

import tensortune
from tensortune.finalists import best_distinct
from tensortune.target import target_spec

MODES = ("plain", "against-best")
#: The checkpoints whose winners are compared, besides the last trial.
CHECKPOINTS = (16, 32)
#: How many of a study's best distinct configs judge its recorded values.
TOP = 8


def run_study(label: str, mode: str, seed: int, trials: int, storage: str) -> optuna.Study:
    """The study of `label` in `mode` for `seed`, tuned to `trials` where not finished."""
    name = f"{label}/{mode}/s{seed}/n{trials}"
    study = finished(storage, name)
    if study is not None:
        return study
    settings = dataclasses.replace(SETTINGS, against_best=mode == "against-best")
    start = time.perf_counter()
    study = tensortune.tune(
        workload_of(label), "llvm", trials, storage=storage, study_name=name,
        sampler=tensortune.CostModelSampler(seed=seed), settings=settings, show_progress=False,
    )  # fmt: skip
    study.set_user_attr("bench:wall_s", time.perf_counter() - start)
    return study


def judged_configs(study: optuna.Study, trials: int) -> dict[str, list[dict]]:
    """The configs of `study` to time again: its `TOP` best, and its best among the first n
    trials for each of `CHECKPOINTS`."""
    found = {"top": [dict(t.params) for t in best_distinct(study.trials, TOP)]}
    for n, configs in early_finalists(study, CHECKPOINTS, 1).items():
        found[f"@{n}"] = configs
    found[f"@{trials}"] = found["top"][:1]
    return found


def seed_rows(label: str, seed: int, studies: dict[str, optuna.Study], trials: int) -> list[dict]:
    """Both modes' studies of `seed` timed again together: a row per study."""
    workload = workload_of(label)
    chosen = {mode: judged_configs(study, trials) for mode, study in studies.items()}
    configs: list[dict] = []
    for per_mode in chosen.values():
        for found in per_mode.values():
            configs += [c for c in found if c not in configs]
    vendor = next(iter(studies.values())).user_attrs.get("vendor_library")
    passes = retime_in_passes(
        tensortune.CpuTemplate(workload), configs, target_spec("llvm"), RETIME, RETIME_ROUNDS,
        vendor_library=vendor,
    )  # fmt: skip

    def gflops(seconds: float | None) -> float:
        return workload.flop_count / seconds / 1e9 if seconds else math.nan

    rows = []
    for mode, study in studies.items():
        recorded: dict[str, float] = {}
        for t in study.trials:
            if t.value is not None:
                key = str(sorted(t.params.items()))
                recorded[key] = max(t.value, recorded.get(key, t.value))
        top = chosen[mode]["top"]
        first = [gflops(passes[0].get(configs.index(c))) for c in top]
        values = [recorded[str(sorted(c.items()))] for c in top]
        row = {
            "workload": label, "mode": mode, "seed": seed, "trials": trials,
            "wall_s": round(study.user_attrs.get("bench:wall_s", math.nan), 1),
            "tau_recorded_vs_retimed": round(float(kendalltau(values, first)[0]), 3),
            "best_recorded": round(values[0], 1),
            "best_recorded_over_retimed": round(values[0] / first[0], 3),
            "vendor_retimed": round(gflops(passes[1].get(VENDOR)), 1),
        }  # fmt: skip
        for n in (*CHECKPOINTS, trials):
            config = chosen[mode].get(f"@{n}", [None])[0]
            seconds = passes[1].get(configs.index(config)) if config else None
            row[f"retimed@{n}"] = round(gflops(seconds), 1)
        rows.append(row)
    return rows


def summary(rows: list[dict], trials: int) -> str:
    """Per-seed winners and the pooled against ÷ plain ratios, as markdown."""
    by = {(r["mode"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    points = (*CHECKPOINTS, trials)
    lines = [
        "| mode | " + " | ".join(f"re-timed @{n} (per seed)" for n in points)
        + " | tau recorded vs re-timed (top 8) | best recorded ÷ re-timed | wall s |",
        "|---" * (len(points) + 4) + "|",
    ]  # fmt: skip
    for mode in MODES:
        mine = [by[(mode, s)] for s in seeds if (mode, s) in by]
        cells = []
        for n in points:
            values = [r[f"retimed@{n}"] for r in mine]
            per_seed = "/".join(f"{v:.0f}" for v in values)
            cells.append(f"{statistics.median(values):.0f} ({per_seed})")
        taus = "/".join(f"{r['tau_recorded_vs_retimed']:.2f}" for r in mine)
        inflation = "/".join(f"{r['best_recorded_over_retimed']:.2f}" for r in mine)
        walls = statistics.median(r["wall_s"] for r in mine)
        tail = f" | {taus} | {inflation} | {walls:.0f} |"
        lines.append(f"| {mode} | " + " | ".join(cells) + tail)
    lines += ["", "| against ÷ plain | " + " | ".join(f"@{n}" for n in points) + " |",
              "|---" * (len(points) + 1) + "|"]  # fmt: skip
    cells = []
    for n in points:
        logs = [
            math.log(by[("against-best", s)][f"retimed@{n}"] / by[("plain", s)][f"retimed@{n}"])
            for s in seeds
            if ("against-best", s) in by and ("plain", s) in by
        ]
        pooled = geomean_interval([v for v in logs if math.isfinite(v)])
        if pooled is None:
            cells.append("-")
        else:
            cells.append(f"{pooled['geomean']:.2f} [{pooled['low']:.2f}, {pooled['high']:.2f}]")
    lines.append("| geometric mean [95 %] | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--label", default="matmul-1024", help="workload (default matmul-1024)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--trials", type=int, default=64, help="trials per study (default 64)")
    parser.add_argument("--work", required=True, help="SQLite file of the studies")
    parser.add_argument("--out", required=True, help="folder of the results")
    args = parser.parse_args(argv)
    wrong = None
    if args.label not in ALL_WORKLOADS:
        wrong = f"unknown --label {args.label!r}; choose one of {', '.join(ALL_WORKLOADS)}"
    elif args.trials <= max(CHECKPOINTS):
        wrong = f"--trials must exceed {max(CHECKPOINTS)}, got {args.trials}"
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{os.path.abspath(args.work)}"
    rows = []
    for seed in args.seeds:
        order = MODES if seed % 2 == 0 else MODES[::-1]
        studies = {mode: run_study(args.label, mode, seed, args.trials, storage) for mode in order}
        for mode, study in studies.items():
            print(f"{args.label} {mode} s{seed}: {study.best_value:.1f} GFLOP/s", flush=True)
        rows += seed_rows(args.label, seed, studies, args.trials)
        os.makedirs(args.out, exist_ok=True)
        write_csv(os.path.join(args.out, "against_best.csv"), rows)
    with open(os.path.join(args.out, "against_best_summary.md"), "w") as f:
        f.write(summary(rows, args.trials))
    print(summary(rows, args.trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
