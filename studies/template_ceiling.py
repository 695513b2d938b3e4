"""How good a kernel the CPU template space holds: TPE against the vendor library, same run.

Tunes matmul 1024, conv2d ResNet-18 C7 and C12 with TPE and prints the best GFLOP/s beside the
vendor baseline (OpenBLAS through NumPy; oneDNN through PyTorch) measured at the start of each
study on the same machine. Writes ``studies/results/template_ceiling.csv`` and
``studies/results/template_ceiling_<study>.csv`` (best-so-far per trial).

    python studies/template_ceiling.py                 # 128 trials each, seed 0
    python studies/template_ceiling.py --quick         # a smoke test: tiny shapes, 8 trials
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import tempfile
import time

import optuna

import tensortune
from tensortune.storage import best_summary
from tensortune.target import host_cores, host_cpu

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

FULL = [
    ("matmul-1024", "matmul", dict(M=1024, N=1024, K=1024)),
    ("conv2d-c7", "conv2d", dict(N=1, C=128, H=28, W=28, OC=256, KH=3, KW=3, stride=2, pad=1)),
    ("conv2d-c12", "conv2d", dict(N=1, C=512, H=7, W=7, OC=512, KH=3, KW=3, stride=1, pad=1)),
]
QUICK = [
    ("matmul-64", "matmul", dict(M=64, N=64, K=64)),
    ("conv2d-small", "conv2d", dict(N=1, C=8, H=8, W=8, OC=16, KH=3, KW=3, stride=1, pad=1)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes and 8 trials")
    parser.add_argument("--trials", type=int, default=128, help="trials per workload (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="TPE seed (default 0)")
    parser.add_argument("--out", default=RESULTS, help=f"results folder (default {RESULTS})")
    parser.add_argument(
        "--storage", default=None, help="Optuna storage (default: a temp SQLite file)"
    )
    args = parser.parse_args()
    cases, trials = (QUICK, 8) if args.quick else (FULL, args.trials)
    os.makedirs(args.out, exist_ok=True)
    storage = args.storage or f"sqlite:///{tempfile.mkdtemp()}/ceiling.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for label, name, shape in cases:
        start = time.perf_counter()
        study = tensortune.tune(
            name,
            shape=shape,
            n_trials=trials,
            storage=storage,
            study_name=f"{label}-s{args.seed}",
            sampler="tpe",
            seed=args.seed,
            show_progress=not args.quick,
        )
        wall = time.perf_counter() - start
        summary = best_summary(study)
        vendor = study.user_attrs.get("vendor_gflops")
        rows.append(
            {
                "workload": label,
                "trials": trials,
                "seed": args.seed,
                "best_gflops": round(summary["gflops"], 1),
                "vendor_library": study.user_attrs.get("vendor_library", ""),
                "vendor_gflops": round(vendor, 1) if vendor else "",
                "ratio_to_vendor": round(summary["gflops"] / vendor, 3) if vendor else "",
                "failed_trials": summary["trials_total"] - summary["trials_complete"],
                "wall_s": round(wall, 1),
                "best_config": summary["config"],
            }
        )
        _write_curve(study, os.path.join(args.out, f"template_ceiling_{label}.csv"))
        print({k: v for k, v in rows[-1].items() if k != "best_config"}, flush=True)
    suffix = "_quick" if args.quick else ""
    with open(os.path.join(args.out, f"template_ceiling{suffix}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"llvm mcpu {host_cpu()}, {host_cores()} cores"
    )


def _write_curve(study: optuna.Study, path: str) -> None:
    best = 0.0
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial", "gflops", "best_gflops", "state"])
        for trial in sorted(study.trials, key=lambda t: t.number):
            value = trial.value if trial.value is not None else ""
            if trial.value is not None:
                best = max(best, trial.value)
            writer.writerow([trial.number, value, round(best, 2), trial.state.name])


if __name__ == "__main__":
    main()
