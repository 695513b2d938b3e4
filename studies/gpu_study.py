"""GPU study, for a machine with an NVIDIA GPU: tensortune's CUDA template against cuBLAS / cuDNN.

Tunes matmul 1024³ and the ResNet-18 C7 and C12 convolutions on the local GPU with the learned
sampler and prints each study's best beside the vendor baseline that `tensortune.tune` measures
when it creates a study (PyTorch's cuBLAS for matmul, cuDNN for conv2d; TF32 off, so all run in
plain float32), with the trials it took to pass the vendor and the wall time. Results go to
``--out`` as CSV; the studies stay in ``--storage`` and resume when run again.

    pip install -e '.[baselines]'                      # torch, for the vendor baselines
    python studies/gpu_study.py                        # 192 trials each, arch of GPU 0
    python studies/gpu_study.py --trials 64 --workloads matmul-1024

On a machine without a GPU it stops at once with the reason.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from results_io import write_csv

from tensortune.errors import TensortuneError
from tensortune.workloads import PRESETS

HERE = os.path.dirname(os.path.abspath(__file__))
#: Label → (workload name, shape).
WORKLOADS = {
    "matmul-1024": ("matmul", dict(M=1024, N=1024, K=1024)),
    "resnet18-c7": PRESETS["resnet18-c7"],
    "resnet18-c12": PRESETS["resnet18-c12"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=192, help="trials per study (default 192)")
    parser.add_argument("--arch", default=None, help="CUDA arch (default: GPU 0's, nvidia-smi)")
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=list(WORKLOADS),
        default=list(WORKLOADS),
        help="default: all of " + ", ".join(WORKLOADS),
    )
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    parser.add_argument(
        "--storage",
        default=f"sqlite:///{os.path.join(HERE, 'work', 'gpu_study.db')}",
        help="Optuna storage (default studies/work/gpu_study.db)",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    args = parser.parse_args()

    import tensortune

    target = {"kind": "cuda", **({"arch": args.arch} if args.arch else {})}
    os.makedirs(os.path.join(HERE, "work"), exist_ok=True)
    rows = []
    for label in args.workloads:
        name, shape = WORKLOADS[label]
        start = time.perf_counter()
        try:
            study = tensortune.tune(
                name,
                target=target,
                shape=shape,
                n_trials=args.trials,
                storage=args.storage,
                study_name=f"gpu-{label}-seed{args.seed}",
                seed=args.seed,
            )
        except TensortuneError as err:
            print(f"gpu_study: {err}", file=sys.stderr)
            return 2
        values = [t.value for t in sorted(study.trials, key=lambda t: t.number)]
        best = max(v for v in values if v is not None)
        vendor = study.user_attrs.get("vendor_gflops")
        passed = next(
            (i + 1 for i, v in enumerate(values) if vendor and v is not None and v > vendor), None
        )
        rows.append(
            {
                "workload": label,
                "trials": len(values),
                "best_gflops": round(best, 1),
                "best_us": round(study.user_attrs["flop_count"] / best / 1e3, 2),
                "vendor": study.user_attrs.get("vendor_library", ""),
                "vendor_gflops": round(vendor, 1) if vendor else "",
                "ratio": round(best / vendor, 3) if vendor else "",
                "trials_to_pass_vendor": passed or "",
                "wall_s": round(time.perf_counter() - start, 1),
            }
        )
        print(rows[-1], flush=True)
    write_csv(os.path.join(args.out, "gpu_study.csv"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
