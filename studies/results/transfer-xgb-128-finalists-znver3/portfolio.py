"""A portfolio, simulated from the kept studies: at n trials, the better of the same seed's
warm and cold studies at n/2 trials each (re-timed picks, ``retimed@`` columns of
``transfer.csv``), against the cold study at n and the warm study at n.

A real portfolio would run the two studies side by side, each with half the budget and a
history of its own: this reads what such a run would have reached from studies that were run
alone. Geometric means over seeds with a 95 % bootstrap interval (`efficiency_goals`).

    python portfolio.py transfer.csv [more transfer.csv ...]
"""

import csv
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from efficiency_goals import geomean_interval, ratio_cell

CHECKPOINTS = (32, 64, 128)  # n/2 must be a checkpoint too


def main(paths: list[str]) -> None:
    for path in paths:  # each its own timing: pooled per file, never across
        pooled: dict[int, list[float]] = {n: [] for n in CHECKPOINTS}
        with open(path) as f:
            rows = list(csv.DictReader(f))
        study = {(r["pair"], r["mode"], r["seed"]): r for r in rows}
        print(f"# {path}")
        for pair in dict.fromkeys(r["pair"] for r in rows):
            seeds = [s for (p, m, s) in study if p == pair and m == "cold"]
            both = [s for s in seeds if (pair, "warm", s) in study]
            print(f"## {pair} ({len(both)} seed pairs)")
            for n in CHECKPOINTS:
                logs: dict[str, list[float]] = {"portfolio / cold": [], "portfolio / warm": [],
                                                "warm / cold": []}  # fmt: skip
                for seed in both:
                    cold, warm = study[pair, "cold", seed], study[pair, "warm", seed]
                    half = f"retimed@{n // 2}"
                    mixed = max(float(cold[half]), float(warm[half]))
                    c, w = float(cold[f"retimed@{n}"]), float(warm[f"retimed@{n}"])
                    logs["portfolio / cold"].append(math.log(mixed / c))
                    logs["portfolio / warm"].append(math.log(mixed / w))
                    logs["warm / cold"].append(math.log(w / c))
                pooled[n] += logs["portfolio / cold"]
                cells = "; ".join(f"{k} {ratio_cell(geomean_interval(v))}" for k, v in logs.items())
                print(f"  @{n}: {cells}")
        for n, logs in pooled.items():
            print(f"pooled @{n}: portfolio / cold {ratio_cell(geomean_interval(logs))} "
                  f"over {len(logs)} seed pairs")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
