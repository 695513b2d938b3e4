"""The ceiling of the CPU template space, apart from any sampler: hand-written configs timed
beside the vendor library, alternating, over several rounds.

Each config below is a point of the template's space (``tensortune.CpuTemplate``), written by
hand after two hand-written TVM 0.27 schedules (a matmul with a 64x64 block and a register
tile, 215 GFLOP/s; a conv2d with 16 output channels x 14 columns per tile, 175 GFLOP/s) or taken
from a TPE study. Writes
``studies/results/hand_configs.csv`` (median GFLOP/s over rounds, and the ratio to the vendor
median). A config that fails to build or run (a build past its time limit on a slower machine)
is left out of the later rounds and written with its error instead of GFLOP/s, so that the
others are still read.

    python studies/hand_configs.py              # 5 rounds
    python studies/hand_configs.py --quick      # 1 round, small shapes (smoke test)
"""

from __future__ import annotations

import argparse
import os
import statistics

from common import case
from results_io import write_csv

import tensortune
from tensortune.measure import Measurer, MeasureSettings
from tensortune.target import target_spec

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# A 4x32 register tile (rows x vector lanes), k unrolled by 4: the hand-written matmul's shape.
MATMUL_REG_TILE = {
    "tile_i": "16x4x4x4",
    "tile_j": "16x1x2x32",
    "tile_k": "256x4",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 2,
    "unroll": 64,
    "accumulate": "inner",
}
# TPE's best of 128 trials from a first run of template_ceiling.py (seed 0) ...
MATMUL_TPE = {
    "tile_i": "8x32x2x2",
    "tile_j": "1x32x1x32",
    "tile_k": "256x4",
    "inner_axis": "j",
    "order": "S0 R0 S1 S2 R1 S3",
    "parallel": 2,
    "unroll": 64,
    "accumulate": "inner",
}
# ... and from the committed run, seeds 1 and 2: 4-row strips of 512 columns that LLVM
# vectorises by itself (the template's vectorised loop has extent 1 there).
MATMUL_TPE_S1 = {
    "tile_i": "2x2x64x4",
    "tile_j": "2x1x512x1",
    "tile_k": "256x4",
    "inner_axis": "j",
    "order": "S0 S1 R0 S2 R1 S3",
    "parallel": 2,
    "unroll": 512,
    "accumulate": "outer",
}
MATMUL_TPE_S2 = {
    **MATMUL_TPE_S1,
    "tile_i": "8x2x16x4",
    "tile_j": "1x2x512x1",
    "accumulate": "inner",
}
# 16 output channels x 14 columns per register tile (x vectorised), rc by 8, written back per y:
# the hand-written 175 GFLOP/s conv schedule.
CONV_F16_X14 = {
    "tile_f": "2x8x1x16",
    "tile_y": "7x2x1x1",
    "tile_x": "1x1x1x14",
    "tile_rc": "16x8",
    "tile_ry": "3x1",
    "tile_rx": "1x3",
    "inner_axis": "x",
    "order": "S0 S1 S2 R0 R1 S3",
    "parallel": 2,
    "unroll": 64,
    "accumulate": "inner",
}
# TPE's best of 128 trials on C12 from a first run (seed 0): 4 channels x 7 x 7 per tile.
C12_TPE = {
    "tile_f": "64x1x2x4",
    "tile_y": "1x1x1x7",
    "tile_x": "1x1x1x7",
    "tile_rc": "64x8",
    "tile_ry": "1x3",
    "tile_rx": "3x1",
    "inner_axis": "x",
    "order": "S0 S1 S2 R0 R1 S3",
    "parallel": 3,
    "unroll": 512,
    "accumulate": "off",
}
C12_F8_X7 = {
    **C12_TPE,
    "tile_f": "32x2x1x8",
    "tile_y": "1x7x1x1",
    "parallel": 2,
    "unroll": 64,
    "accumulate": "inner",
}

#: (results label, operator, shape, {config name: config}).
CASES = [
    (
        *case("matmul-1024"),
        {
            "reg-tile-4x32": MATMUL_REG_TILE,
            "tpe-first-run": MATMUL_TPE,
            "tpe-best-s1": MATMUL_TPE_S1,
            "tpe-best-s2": MATMUL_TPE_S2,
        },
    ),
    (*case("resnet18-c7"), {"f16-x14": CONV_F16_X14}),
    (*case("resnet18-c12"), {"tpe-first-run": C12_TPE, "f8-x7": C12_F8_X7}),
]
QUICK = [
    (
        *case("matmul-64"),
        {
            "reg-tile": {
                **MATMUL_REG_TILE,
                "tile_i": "4x2x2x4",
                "tile_j": "2x1x1x32",
                "tile_k": "16x4",
            },
            # A k split whose factors multiply to 128, not 64 (outside the space), so its build
            # fails: the smoke run shows that a config that fails is reported and the others
            # are still timed.
            "refused": {
                **MATMUL_REG_TILE,
                "tile_i": "4x2x2x4",
                "tile_j": "2x1x1x32",
                "tile_k": "64x2",
            },
        },
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="default 5")
    parser.add_argument("--quick", action="store_true", help="one round of a small matmul")
    parser.add_argument("--out", default=RESULTS, help=f"default {RESULTS}")
    args = parser.parse_args()
    cases, rounds = (QUICK, 1) if args.quick else (CASES, args.rounds)
    rows = []
    for label, name, shape, configs in cases:
        workload = tensortune.get_workload(name, **shape)
        template = tensortune.CpuTemplate(workload)
        times: dict[str, list[float]] = {key: [] for key in configs}
        failed: dict[str, str] = {}  # config → its first error; left out of later rounds
        vendor: list[float] = []
        library = ""
        with Measurer(template, target_spec("llvm"), MeasureSettings()) as measurer:
            for _ in range(rounds):  # alternate vendor and configs so drift hits both alike
                # The first round picks the fastest library, as a study does; later rounds
                # re-time that one (as `common.retime`'s vendor_library), not a mix of medians.
                found = measurer.vendor_baseline(library or None)
                if found is not None:
                    library = found[0]
                    vendor.append(found[1])
                live = [key for key in configs if key not in failed]
                results = measurer.measure([configs[key] for key in live])
                for key, result in zip(live, results, strict=True):
                    if result.error:  # e.g. a build past its time limit on a slower machine
                        failed[key] = result.error
                        print(f"{label} {key}: {result.error}; left out", flush=True)
                    else:
                        times[key].append(result.cost)
        vendor_gflops = workload.flop_count / statistics.median(vendor) / 1e9 if vendor else None
        for key, costs in times.items():
            gflops = workload.flop_count / statistics.median(costs) / 1e9 if costs else None
            rows.append(
                {
                    "workload": label,
                    "config": key,
                    "rounds": len(costs),
                    "gflops": round(gflops, 1) if gflops else "",
                    "vendor_library": library,
                    "vendor_gflops": round(vendor_gflops, 1) if vendor_gflops else "",
                    "ratio_to_vendor": (
                        round(gflops / vendor_gflops, 3) if gflops and vendor_gflops else ""
                    ),
                    "error": failed.get(key, ""),
                    "knobs": configs[key],
                }
            )
            print({k: v for k, v in rows[-1].items() if k != "knobs"}, flush=True)
    write_csv(os.path.join(args.out, "hand_configs.csv"), rows)


if __name__ == "__main__":
    main()
