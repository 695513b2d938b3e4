"""GPU study, for a machine with an NVIDIA GPU: tensortune's CUDA template against cuBLAS /
cuDNN and against TVM's MetaSchedule, side by side in one run.

For each of matmul 1024³ and the ResNet-18 C7 and C12 convolutions it tunes on the local GPU
with the learned sampler, then runs MetaSchedule (XGBoost + evolutionary search) for the same
number of trials, then re-times both winners interleaved with the same settings. Each row gives
the re-timed best kernel against the vendor baseline that `tensortune.tune` measures when it
creates a study (PyTorch's cuBLAS for matmul, cuDNN for conv2d; TF32 off, so all in plain
float32), re-timed in the same rounds as the winners (the tuning-time reading where that
fails), the trials each tuner took to pass the vendor's tuning-time reading, and the wall
time. Results go to ``--out`` (``gpu_study.csv``, one row per workload and tuner;
``gpu_study_curves.csv``, best so far per trial); our studies stay in ``--storage`` and resume
when run again.

    pip install -e '.[baselines]'                      # torch, for the vendor baselines
    python studies/gpu_study.py                        # 192 trials each, arch of GPU 0
    python studies/gpu_study.py --trials 64 --workloads matmul-1024 --no-peer

On a machine without a GPU it stops at once with the reason.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from typing import Any

import metaschedule_peer
from common import VENDOR, first_trial, retime
from common import WORKLOADS as ALL_WORKLOADS
from results_io import best_so_far, write_csv

from tensortune.errors import TensortuneError
from tensortune.templates import template_for
from tensortune.workloads import get_workload

HERE = os.path.dirname(os.path.abspath(__file__))
#: Label → (workload name, shape): the GPU study's part of `common.WORKLOADS`.
WORKLOADS = {
    label: ALL_WORKLOADS[label] for label in ("matmul-1024", "resnet18-c7", "resnet18-c12")
}
#: Rounds of interleaved re-timing of the winners.
RETIME_ROUNDS = 5


def trials_to_pass(values: list[float | None], vendor: float | None) -> int | str:
    """1-based trial at which a tuner first beat the vendor ('' if never)."""
    return first_trial(values, vendor, above=True) if vendor else ""


def run_ours(label: str, target: dict[str, Any], args: argparse.Namespace) -> Any:
    import tensortune

    name, shape = WORKLOADS[label]
    return tensortune.tune(
        name,
        target=target,
        shape=shape,
        n_trials=args.trials,
        total_trials=args.trials,  # a study resumed from an earlier, cut lease runs up to it
        storage=args.storage,
        study_name=f"gpu-{label}-seed{args.seed}",
        seed=args.seed,
    )


def run_peer(workload: Any, target: dict[str, Any], args: argparse.Namespace) -> Any:
    """MetaSchedule's run on `workload`, or None when it fails (printed): a GPU lease is short,
    and our own results for the other workloads are worth keeping."""
    from tensortune.measure import MeasureSettings

    try:
        with tempfile.TemporaryDirectory() as work_dir:
            return metaschedule_peer.tune(
                workload,
                metaschedule_peer.cuda_peer_target(target),
                args.trials,
                args.seed,
                MeasureSettings(),
                work_dir,
            )
    except Exception:  # any failure of the peer leaves ours standing
        traceback.print_exc()
        print(
            f"gpu_study: MetaSchedule failed on {workload.key}; going on without it",
            file=sys.stderr,
        )
        return None


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
    parser.add_argument("--seed", type=int, default=0, help="seed of both tuners (default 0)")
    parser.add_argument(
        "--no-peer", action="store_true", help="skip MetaSchedule (default: run it too)"
    )
    parser.add_argument(
        "--storage",
        default=f"sqlite:///{os.path.join(HERE, 'work', 'gpu_study.db')}",
        help="Optuna storage (default studies/work/gpu_study.db)",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    args = parser.parse_args()

    from tensortune.measure import MeasureSettings
    from tensortune.target import target_spec

    try:
        target = target_spec({"kind": "cuda", **({"arch": args.arch} if args.arch else {})})
    except TensortuneError as err:
        print(f"gpu_study: {err}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(HERE, "work"), exist_ok=True)
    rows, curves = [], []
    for label in args.workloads:
        workload = get_workload(WORKLOADS[label][0], **WORKLOADS[label][1])
        start = time.perf_counter()
        try:
            study = run_ours(label, target, args)
        except TensortuneError as err:
            print(f"gpu_study: {err}", file=sys.stderr)
            return 2
        ours_wall = time.perf_counter() - start
        vendor = study.user_attrs.get("vendor_gflops")
        values = {"tensortune": [t.value for t in sorted(study.trials, key=lambda t: t.number)]}
        walls = {"tensortune": ours_wall}
        best = study.best_trial
        template = template_for(workload, target)
        kernels = {"tensortune": (template, {**best.params})}
        curves += best_so_far(study, workload=label, tuner="tensortune", seed=args.seed)
        peer = None if args.no_peer else run_peer(workload, target, args)
        if peer is not None:
            values["metaschedule"] = [v or None for v in peer.gflops]
            walls["metaschedule"] = peer.wall_s
            kernels["metaschedule"] = (
                metaschedule_peer.ScriptTemplate(workload),
                {"script": peer.best_script},
            )
            best_peer = 0.0
            for i, (v, elapsed) in enumerate(zip(peer.gflops, peer.elapsed_s, strict=True)):
                best_peer = max(best_peer, v)
                curves.append(
                    {
                        "workload": label,
                        "tuner": "metaschedule",
                        "seed": args.seed,
                        "trial": i + 1,
                        "gflops": round(v, 3) if v else "",
                        "best_gflops": round(best_peer, 3),
                        "state": "COMPLETE" if v else "FAIL",
                        "elapsed_s": round(elapsed, 2),
                    }
                )
        retime_settings = MeasureSettings(repeat=5, min_repeat_ms=100)
        library = study.user_attrs.get("vendor_library")
        # The vendor is re-timed in the same rounds, and the ratios divide by that reading.
        seconds = retime(kernels, target, retime_settings, RETIME_ROUNDS, library)
        retimed_vendor = workload.flop_count / seconds[VENDOR] / 1e9 if VENDOR in seconds else None
        divisor = retimed_vendor or vendor
        for tuner, tuner_values in values.items():
            found = max((v for v in tuner_values if v is not None), default=0.0)
            retimed = workload.flop_count / seconds[tuner] / 1e9 if tuner in seconds else None
            rows.append(
                {
                    "workload": label,
                    "tuner": tuner,
                    "trials": len(tuner_values),
                    "best_gflops": round(found, 1),
                    "retimed_gflops": round(retimed, 1) if retimed else "",
                    "retimed_us": round(seconds[tuner] * 1e6, 2) if tuner in seconds else "",
                    "vendor": study.user_attrs.get("vendor_library", ""),
                    "vendor_gflops": round(vendor, 1) if vendor else "",
                    "retimed_vendor_gflops": round(retimed_vendor, 1) if retimed_vendor else "",
                    "ratio_to_vendor": round(retimed / divisor, 3) if divisor and retimed else "",
                    "trials_to_pass_vendor": trials_to_pass(tuner_values, vendor),
                    "wall_s": round(walls[tuner], 1),
                }
            )
            print(rows[-1], flush=True)
        write_csv(os.path.join(args.out, "gpu_study.csv"), rows)
        write_csv(os.path.join(args.out, "gpu_study_curves.csv"), curves)
    return 0


if __name__ == "__main__":
    sys.exit(main())
