"""The study's own best beside the finalists' pick, from one ``transfer.py --finalists 4`` run.

`transfer.retime_pair` keeps, on each pair's cold study, the judging pass's reading of every
mode's pick (``gflops``) and of the study's own best (``best_gflops``). This prints, per pair
and checkpoint: warm / cold by the pick and by the best (geometric mean over seeds with a 95 %
bootstrap interval, and the median), and pick / best per mode (what the finalists gained).

    python pick_versus_best.py sqlite:///<work>/transfer.db PAIR:SEEDS ...
    e.g. conv2d-to-depthwise:10 c12-to-c7:5
"""

import math
import os
import statistics
import sys

import optuna

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from efficiency_goals import geomean_interval, ratio_cell
from transfer import PAIRS, RETIMED_ATTR

CHECKPOINTS = ("16", "32", "64", "128")


def main(url: str, pairs: list[str]) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    gains: dict[str, list[float]] = {"cold": [], "warm": []}
    for item in pairs:
        pair, seeds = item.split(":")
        target = PAIRS[pair][0]
        kept = []
        for seed in range(int(seeds)):
            cold = optuna.load_study(study_name=f"{target}/cold/s{seed}/n128", storage=url)
            kept.append(cold.user_attrs[RETIMED_ATTR + pair + ":finalists4"])
        print(f"## {pair} ({seeds} seeds)")
        for n in CHECKPOINTS:
            cells = []
            for key, name in (("gflops", "pick"), ("best_gflops", "best")):
                ratios = [k[key]["warm"][n] / k[key]["cold"][n] for k in kept]
                found = geomean_interval([math.log(r) for r in ratios])
                cells.append(f"{name} {ratio_cell(found)} (median {statistics.median(ratios):.2f})")
            for mode in gains:
                ratio = [k["gflops"][mode][n] / k["best_gflops"][mode][n] for k in kept]
                if n == "128":
                    gains[mode] += ratio
                cells.append(
                    f"{mode} pick/best {ratio_cell(geomean_interval([math.log(r) for r in ratio]))}"
                )
            print(f"@{n} warm/cold: " + "; ".join(cells))
    for mode, ratio in gains.items():
        found = geomean_interval([math.log(r) for r in ratio])
        print(f"pooled @128 {mode} pick/best over {len(ratio)} studies: {ratio_cell(found)}")
    both = gains["cold"] + gains["warm"]
    found = geomean_interval([math.log(r) for r in both])
    print(f"pooled @128 pick/best over {len(both)} studies: {ratio_cell(found)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
