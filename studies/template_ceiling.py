"""How good a kernel the CPU template space holds: TPE against the vendor library, same run.

Tunes matmul 1024, conv2d ResNet-18 C7 and C12 with TPE and sets each study's best GFLOP/s
beside the vendor baseline (OpenBLAS through NumPy; oneDNN through PyTorch) measured at the
start of the same study on the same machine. Writes, under ``studies/results/``:

- ``template_ceiling.csv``: one row per workload and seed (best, vendor, ratio, wall time);
- ``template_ceiling_curves.csv``: every trial, with the best-so-far;
- ``template_ceiling.png``: best-so-far GFLOP/s against trials, median over seeds with the
  min-max band, the vendor baseline as a dashed line (needs matplotlib).

    python studies/template_ceiling.py                     # 128 trials, seeds 0 1 2
    python studies/template_ceiling.py --quick --out /tmp  # smoke test: tiny shapes, 8 trials
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import optuna
from common import case
from results_io import best_so_far, draw_band, pyplot, write_csv

import tensortune
from tensortune.storage import best_summary
from tensortune.target import host_cores, host_cpu

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

FULL = [case(label) for label in ("matmul-1024", "resnet18-c7", "resnet18-c12")]
QUICK = [case(label) for label in ("matmul-64", "conv2d-small")]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 8 trials, one seed")
    parser.add_argument("--trials", type=int, default=128, help="trials per study (default 128)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    parser.add_argument("--storage", default=None, help="Optuna storage (default: temp SQLite)")
    args = parser.parse_args()
    cases, trials, seeds = (QUICK, 8, [0]) if args.quick else (FULL, args.trials, args.seeds)
    os.makedirs(args.out, exist_ok=True)
    storage = args.storage or f"sqlite:///{tempfile.mkdtemp()}/ceiling.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows, curves = [], []
    for seed in seeds:
        for label, name, shape in cases:
            start = time.perf_counter()
            study = tensortune.tune(
                name,
                shape=shape,
                n_trials=trials,
                storage=storage,
                study_name=f"{label}-s{seed}",
                sampler="tpe",
                seed=seed,
                show_progress=not args.quick,
            )
            rows.append(_row(label, seed, trials, study, time.perf_counter() - start))
            curves.extend(best_so_far(study, workload=label, seed=seed))
            print({k: v for k, v in rows[-1].items() if k != "best_config"}, flush=True)
    write_csv(os.path.join(args.out, "template_ceiling.csv"), rows)
    write_csv(os.path.join(args.out, "template_ceiling_curves.csv"), curves)
    _plot(os.path.join(args.out, "template_ceiling.png"), rows, curves)
    for label, _, _ in cases:
        mine = [r for r in rows if r["workload"] == label]
        ratios = [r["ratio_to_vendor"] for r in mine if r["ratio_to_vendor"] != ""]
        best = statistics.median(r["best_gflops"] for r in mine)
        print(
            f"{label}: median best {best:.1f} GFLOP/s"
            + (f", median ratio to vendor {statistics.median(ratios):.3f}" if ratios else "")
        )
    print(f"machine: {platform.machine()}, llvm mcpu {host_cpu()}, {host_cores()} cores")


def _row(label: str, seed: int, trials: int, study: optuna.Study, wall: float) -> dict:
    summary = best_summary(study)
    vendor = study.user_attrs.get("vendor_gflops")
    return {
        "workload": label,
        "seed": seed,
        "trials": trials,
        "best_gflops": round(summary["gflops"], 1),
        "vendor_library": study.user_attrs.get("vendor_library", ""),
        "vendor_gflops": round(vendor, 1) if vendor else "",
        "ratio_to_vendor": round(summary["gflops"] / vendor, 3) if vendor else "",
        "best_trial": summary["trial"],
        "failed_trials": summary["trials_total"] - summary["trials_complete"],
        "wall_s": round(wall, 1),
        "best_config": summary["config"],
    }


def _plot(path: str, rows: list[dict], curves: list[dict]) -> None:
    plt = pyplot()
    if plt is None:
        return
    labels = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 3.6), squeeze=False)
    for ax, label in zip(axes[0], labels, strict=True):
        seeds = sorted({c["seed"] for c in curves if c["workload"] == label})
        series = [
            [c["best_gflops"] for c in curves if c["workload"] == label and c["seed"] == s]
            for s in seeds
        ]
        n = min(len(s) for s in series)
        values = [[s[i] for s in series] for i in range(n)]
        label_line = f"tensortune + TPE (median of {len(seeds)})"
        draw_band(ax, list(range(1, n + 1)), values, label_line, alpha=0.25)
        vendors = [
            r["vendor_gflops"] for r in rows if r["workload"] == label and r["vendor_gflops"]
        ]
        if vendors:
            library = next(r["vendor_library"] for r in rows if r["workload"] == label)
            ax.axhline(statistics.median(vendors), color="k", ls="--", label=library)
        ax.set_title(label)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s so far")
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
