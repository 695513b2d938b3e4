"""The learned sampler against Optuna's TPE and random search, side by side.

Tunes matmul 1024 and conv2d ResNet-18 C7 with each sampler on the same template and budget,
interleaved (seed by seed, workload by workload, sampler by sampler) so that the machine's
drift hits every sampler alike. Each study measures its own vendor baseline at the start.
Writes, under ``studies/results/``:

- ``sampler_comparison.csv``: one row per workload, sampler and seed: best GFLOP/s at 32, 64
  and 128 trials, the vendor baseline, trials to reach 90 % of the best any sampler found
  for that workload and seed, and the wall time (tuning and sampler time apart);
- ``sampler_comparison_curves.csv``: every trial with its best-so-far and elapsed seconds;
- ``sampler_comparison.png``: median best-so-far against trials and against seconds, with the
  min-max band over seeds and the vendor line.

    python studies/sampler_comparison.py                  # 128 trials, seeds 0 1 2
    python studies/sampler_comparison.py --quick --out /tmp
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import optuna
from results_io import write_csv

import tensortune
from tensortune.measure import MeasureSettings

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAMPLERS = ("costmodel", "tpe", "random")
CHECKPOINTS = (32, 64, 128)
FULL = [
    ("matmul-1024", "matmul", dict(M=1024, N=1024, K=1024)),
    ("conv2d-c7", "conv2d", dict(N=1, C=128, H=28, W=28, OC=256, KH=3, KW=3, stride=2, pad=1)),
]
QUICK = [("matmul-64", "matmul", dict(M=64, N=64, K=64))]
#: Three timed costs of at least 30 ms each: enough to rank kernels, and the 18 studies fit in
#: about an hour here.
SETTINGS = MeasureSettings(repeat=3, min_repeat_ms=30)


class TimedSampler(optuna.samplers.BaseSampler):
    """Passes everything to `inner` and adds up the seconds it spends choosing params."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner
        self.seconds = 0.0

    def _timed(self, method: str, *args: object) -> object:
        start = time.perf_counter()
        try:
            return getattr(self.inner, method)(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def infer_relative_search_space(self, study, trial):  # type: ignore[no-untyped-def]
        return self._timed("infer_relative_search_space", study, trial)

    def sample_relative(self, study, trial, search_space):  # type: ignore[no-untyped-def]
        return self._timed("sample_relative", study, trial, search_space)

    def sample_independent(self, study, trial, name, distribution):  # type: ignore[no-untyped-def]
        return self._timed("sample_independent", study, trial, name, distribution)

    def before_trial(self, study, trial):  # type: ignore[no-untyped-def]
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):  # type: ignore[no-untyped-def]
        self.inner.after_trial(study, trial, state, values)


def run(label: str, name: str, shape: dict, sampler: str, seed: int, trials: int, storage: str):
    timed = TimedSampler(tensortune.make_sampler(sampler, seed))
    start = time.perf_counter()
    study = tensortune.tune(
        name,
        shape=shape,
        n_trials=trials,
        storage=storage,
        study_name=f"{label}-{sampler}-s{seed}",
        sampler=timed,
        settings=SETTINGS,
        show_progress=False,
    )
    wall = time.perf_counter() - start
    curve, best = [], 0.0
    for trial in sorted(study.trials, key=lambda t: t.number):
        best = max(best, trial.value or 0.0)
        elapsed = (trial.datetime_complete - study.trials[0].datetime_start).total_seconds()
        curve.append(
            {
                "workload": label,
                "sampler": sampler,
                "seed": seed,
                "trial": trial.number + 1,
                "gflops": round(trial.value, 3) if trial.value is not None else "",
                "best_gflops": round(best, 3),
                "elapsed_s": round(elapsed, 2),
            }
        )
    row = {
        "workload": label,
        "sampler": sampler,
        "seed": seed,
        "vendor_library": study.user_attrs.get("vendor_library", ""),
        "vendor_gflops": round(study.user_attrs.get("vendor_gflops") or 0.0, 1),
        "wall_s": round(wall, 1),
        "sampler_s": round(timed.seconds, 1),
    }
    for n in CHECKPOINTS:
        if n <= trials:
            row[f"best@{n}"] = round(curve[n - 1]["best_gflops"], 1)
    return row, curve


def trials_to(curve: list[dict], level: float) -> int | str:
    """First trial whose best-so-far reaches `level` ('' if none does)."""
    return next((c["trial"] for c in curve if c["best_gflops"] >= level), "")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="matmul 64, 32 trials, one seed")
    parser.add_argument("--trials", type=int, default=128, help="trials per study (default 128)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    args = parser.parse_args()
    cases, trials, seeds = (QUICK, 32, [0]) if args.quick else (FULL, args.trials, args.seeds)
    if trials < CHECKPOINTS[0]:
        parser.error(f"--trials must be at least {CHECKPOINTS[0]}")
    os.makedirs(args.out, exist_ok=True)
    storage = f"sqlite:///{tempfile.mkdtemp()}/comparison.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows, curves = [], []
    for seed in seeds:
        for label, name, shape in cases:
            runs = [run(label, name, shape, s, seed, trials, storage) for s in SAMPLERS]
            top = max(c[-1]["best_gflops"] for _, c in runs)
            for row, curve in runs:
                row["trials_to_90%"] = trials_to(curve, 0.9 * top)
                rows.append(row)
                curves.extend(curve)
                print(row, flush=True)
    write_csv(os.path.join(args.out, "sampler_comparison.csv"), rows)
    write_csv(os.path.join(args.out, "sampler_comparison_curves.csv"), curves)
    _plot(os.path.join(args.out, "sampler_comparison.png"), cases, rows, curves)
    last = max(n for n in CHECKPOINTS if n <= trials)
    for label, _, _ in cases:
        for sampler in SAMPLERS:
            mine = [r for r in rows if r["workload"] == label and r["sampler"] == sampler]
            reached = [r["trials_to_90%"] for r in mine if r["trials_to_90%"] != ""]
            print(
                f"{label} {sampler}: median best@{last} "
                f"{statistics.median(r[f'best@{last}'] for r in mine):.1f}, "
                f"trials to 90%: {sorted(reached)} (missing {len(mine) - len(reached)})"
            )


def _plot(path: str, cases: list, rows: list[dict], curves: list[dict]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(2, len(cases), figsize=(5.5 * len(cases), 7), squeeze=False)
    for col, (label, _, _) in enumerate(cases):
        for sampler in SAMPLERS:
            series = _series(curves, label, sampler)
            n = min(len(s) for s in series)
            for row, key in ((0, "trial"), (1, "elapsed_s")):
                ax = axes[row][col]
                x = [statistics.median(s[i][key] for s in series) for i in range(n)]
                values = [[s[i]["best_gflops"] for s in series] for i in range(n)]
                ax.plot(x, [statistics.median(v) for v in values], label=sampler)
                ax.fill_between(x, [min(v) for v in values], [max(v) for v in values], alpha=0.2)
        vendor = statistics.median(r["vendor_gflops"] for r in rows if r["workload"] == label)
        library = next(r["vendor_library"] for r in rows if r["workload"] == label)
        for row, xlabel in ((0, "trials"), (1, "seconds (median over seeds)")):
            ax = axes[row][col]
            ax.axhline(vendor, color="k", ls="--", label=library)
            ax.set_title(label)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best GFLOP/s so far")
            ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _series(curves: list[dict], label: str, sampler: str) -> list[list[dict]]:
    seeds = sorted({c["seed"] for c in curves if c["workload"] == label})
    return [
        [c for c in curves if (c["workload"], c["sampler"], c["seed"]) == (label, sampler, s)]
        for s in seeds
    ]


if __name__ == "__main__":
    main()
