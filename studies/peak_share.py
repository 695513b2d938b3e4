"""How close the frameworks already run to the CPU's fp32 peak, and what issue 22's "≥ 1.2× ONNX
Runtime" asks of a build that does the same arithmetic.

For each model of `model_zoo` the floating-point operations of one forward pass are counted
(`torch.utils.flop_counter`: matrix products and convolutions, two per multiply-add; the rest
adds under 1 %), PyTorch eager and ONNX Runtime are timed in turns (`model_tuning.round_robin`),
and OpenBLAS's sgemm (NumPy's ``@`` on 2048² float32 matrices) is timed beside them as the
best this machine's vendor BLAS reaches on the most favourable shape. It prints, per model,
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
import tempfile

import numpy as np
import torch
from model_tuning import frameworks, round_robin, timer
from model_zoo import MODELS, model
from torch.utils.flop_counter import FlopCounterMode

#: The factor over ONNX Runtime that issue 22 asks for.
GOAL = 1.2


def forward_flops(net: torch.nn.Module, example: list[torch.Tensor]) -> int:
    """Floating-point operations of one forward pass of `net` on `example` (two per
    multiply-add of its matrix products and convolutions)."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        net(*example)
    return int(counter.get_total_flops())


def sgemm_gflops(n: int = 2048, rounds: int = 5) -> float:
    """OpenBLAS's sgemm through NumPy on `n`² float32 matrices (default 2048): the median
    GFLOP/s over `rounds` readings (default 5)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    reading = timer(lambda: a @ b)
    return 2 * n**3 / sorted(reading() for _ in range(rounds))[rounds // 2] / 1e9


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
            for system, s in seconds.items():
                rows.append({"model": name, "system": system, "gflop": flops / 1e9,
                             "latency_ms": s * 1e3, "gflops": flops / s / 1e9,
                             "share_of_peak": flops / s / 1e9 / peak})  # fmt: skip
            if "onnxruntime" in seconds:
                ort = seconds["onnxruntime"]
                need = GOAL * flops / ort / 1e9
                rows.append({"model": name, "system": f"{GOAL}x onnxruntime (needed)",
                             "gflop": flops / 1e9, "latency_ms": ort * 1e3 / GOAL,
                             "gflops": need, "share_of_peak": need / peak})  # fmt: skip
    n = 256 if args.quick else 2048
    blas = sgemm_gflops(n, args.rounds)
    rows.append({"model": f"sgemm {n}", "system": "numpy (OpenBLAS)", "gflop": 2 * n**3 / 1e9,
                 "latency_ms": 2 * n**3 / blas / 1e6, "gflops": blas,
                 "share_of_peak": blas / peak})  # fmt: skip
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
