"""How close the frameworks already run to the CPU's fp32 peak, and what issue 22's "≥ 1.2× ONNX
Runtime" asks of a build that does the same arithmetic.

For each model of `model_zoo` the floating-point operations of one forward pass are counted
(`torch.utils.flop_counter`: matrix products and convolutions, two per multiply-add; the rest
adds under 1 %), PyTorch eager and ONNX Runtime are timed in turns (`model_timing.round_robin`),
and OpenBLAS's sgemm (NumPy's, on the 2048² ``matmul`` workload, as the studies' vendor
baseline runs it) is timed beside them as the best this machine's vendor BLAS reaches on the
most favourable shape. It prints, per model,
each system's GFLOP/s and share of `--peak` (default 113 GFLOP/s a core, the Zen 4's: two
256-bit FMA pipes at about 3.5 GHz, times ``TVM_NUM_THREADS`` cores, default 2), and the share
of peak that 1.2× ONNX Runtime's speed would need.

    python studies/peak_share.py                       # ResNet-18 and the BERT-base layer
    python studies/peak_share.py --models bert-layer --out DIR
    python studies/peak_share.py --quick --out DIR     # the tiny CNN, one round (in the tests)
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile

import torch
from model_timing import frameworks, round_robin, timer
from model_zoo import MODELS, model
from torch.utils.flop_counter import FlopCounterMode

from tensortune.measure.baseline import vendor_kernels
from tensortune.workloads import get_workload

#: The factor over ONNX Runtime that issue 22 asks for.
GOAL = 1.2


def forward_flops(net: torch.nn.Module, example: list[torch.Tensor]) -> int:
    """Floating-point operations of one forward pass of `net` on `example` (two per
    multiply-add of its matrix products and convolutions)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        net(*example)
    return int(counter.get_total_flops())


def blas_seconds(n: int = 2048, rounds: int = 5) -> tuple[float, float]:
    """NumPy's BLAS on the ``matmul`` workload at `n`² (default 2048), the kernel the studies
    time as its vendor (`tensortune.measure.baseline.vendor_kernels`): its FLOPs and median
    seconds over `rounds` readings (default 5)."""
    workload = get_workload("matmul", M=n, N=n, K=n)
    kernel = next(k for name, k in vendor_kernels(workload) if name.startswith("numpy"))
    reading = timer(kernel)
    return workload.flop_count, statistics.median(reading() for _ in range(rounds))


def row(model_name: str, system: str, flops: float, seconds: float, peak: float) -> dict:
    """One line of the table: `flops` run in `seconds`, as GFLOP/s and a share of `peak`."""
    gflops = flops / seconds / 1e9
    return {"model": model_name, "system": system, "gflop": flops / 1e9,
            "latency_ms": seconds * 1e3, "gflops": gflops,
            "share_of_peak": gflops / peak}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "bert-layer"],
                        choices=MODELS)  # fmt: skip
    parser.add_argument("--peak", type=float, default=113.0,
                        help="fp32 GFLOP/s of one core (default 113, the Zen 4's)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="timing rounds (default 5)")
    parser.add_argument("--out", default=None,
                        help="also write OUT/peak_share.csv (default none)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="the tiny CNN, one round, sgemm on 256² matrices")  # fmt: skip
    args = parser.parse_args()
    if args.peak <= 0 or args.rounds < 1:
        parser.error("--peak and --rounds must be positive")
    if args.quick:
        args.models, args.rounds = ["tiny-cnn"], 1
    cores = int(os.environ.get("TVM_NUM_THREADS", "2"))
    peak = args.peak * cores
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            net, example = model(name)
            flops = forward_flops(net, example)
            calls = frameworks(net, example, folder)
            calls.pop("torch.compile", None)  # the goal is against eager and ONNX Runtime
            seconds = round_robin({system: timer(call) for system, call in calls.items()},
                                  args.rounds)  # fmt: skip
            rows += [row(name, system, flops, s, peak) for system, s in seconds.items()]
            if "onnxruntime" in seconds:
                needed = seconds["onnxruntime"] / GOAL
                rows.append(row(name, f"{GOAL}x onnxruntime (needed)", flops, needed, peak))
    n = 256 if args.quick else 2048
    rows.append(row(f"sgemm {n}", "numpy (OpenBLAS)", *blas_seconds(n, args.rounds), peak))
    print(f"fp32 peak: {peak:.0f} GFLOP/s ({cores} cores x {args.peak:g})")
    print("| model | system | GFLOP | ms | GFLOP/s | share of peak |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['system']} | {r['gflop']:.2f} | {r['latency_ms']:.2f} | "
              f"{r['gflops']:.0f} | {r['share_of_peak']:.0%} |")  # fmt: skip
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "peak_share.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
