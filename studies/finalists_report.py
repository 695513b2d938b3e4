"""Builds with re-timed finalists against builds of the studies' bests, round by round.

Reads the ``<model>-readings.csv`` files that `model_tuning.py --finalists N` writes (every
round-robin reading of every system) and compares each ``SYSTEM-finalists@B`` with
``SYSTEM@B`` of the same run. Within a round the two were read seconds apart, so their ratio
cancels most of the machine's drift between rounds; the pair's figure is the median of its
per-round ratios. Prints, per pair, the two medians and the median ratio (above 1: the
finalists' build is faster), then the geometric mean over all pairs with a 95 % bootstrap
interval (`efficiency_goals.geomean_interval`).

    python studies/finalists_report.py RUN_A/resnet18-readings.csv RUN_B/resnet18-readings.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys

from efficiency_goals import geomean_interval, ratio_cell

SUFFIX = "-finalists"


def read_timings(path: str) -> list[dict[str, list[float]]]:
    """A readings file's readings, per process (its ``timing`` column, which
    `model_timing.time_in_processes` writes; one process where the file has none; none where
    the file has no readings): per system, its readings in round order."""
    found: dict[int, dict[str, dict[int, float]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            timing = int(row.get("timing") or 0)
            by_system = found.setdefault(timing, {}).setdefault(row["system"], {})
            by_system[int(row["round"])] = float(row["seconds"])
    return [
        {system: [rounds[i] for i in sorted(rounds)] for system, rounds in found[t].items()}
        for t in sorted(found)
    ]


def read_rounds(path: str) -> dict[str, list[float]]:
    """Per system, its readings in round order, over all the file's processes (their rounds
    are numbered on from one process to the next)."""
    merged: dict[str, list[float]] = {}
    for readings in read_timings(path):
        for system, values in readings.items():
            merged.setdefault(system, []).extend(values)
    return merged


def round_ratios(readings: dict[str, list[float]], first: str, second: str) -> list[float]:
    """`second`'s seconds ÷ `first`'s, round by round (above 1 where `first` ran faster); a run
    reads every system in every round, so the lists are of one length."""
    return [b / a for a, b in zip(readings[first], readings[second], strict=True)]


def pairs(readings: dict[str, list[float]]) -> list[dict]:
    """Each finalists build with the build of its studies' bests: their median seconds and the
    median of their per-round ratios (studies' best ÷ finalists)."""
    found = []
    for system, picked in readings.items():
        name, _, budget = system.partition("@")
        if not name.endswith(SUFFIX) or not budget:
            continue
        plain_system = f"{name.removesuffix(SUFFIX)}@{budget}"
        plain = readings.get(plain_system)
        if plain is None:
            continue
        ratios = round_ratios(readings, system, plain_system)
        found.append({
            "system": name.removesuffix(SUFFIX), "budget": int(budget),
            "plain_ms": statistics.median(plain) * 1e3,
            "finalists_ms": statistics.median(picked) * 1e3,
            "ratio": statistics.median(ratios), "rounds": len(ratios),
        })  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("readings", nargs="+", help="<model>-readings.csv files of runs")
    args = parser.parse_args()
    lines = ["| run | system | trials | studies' best ms | finalists ms | per-round ratio |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    logs = []
    for path in args.readings:
        try:
            found = pairs(read_rounds(path))
        except (OSError, KeyError, ValueError) as err:
            print(f"finalists_report: {path}: {err}", file=sys.stderr)
            sys.exit(2)
        for p in found:
            lines.append(f"| {path} | {p['system']} | {p['budget']} | {p['plain_ms']:.2f} | "
                         f"{p['finalists_ms']:.2f} | {p['ratio']:.3f} ({p['rounds']} "
                         "rounds) |")  # fmt: skip
            logs.append(math.log(p["ratio"]))
    print("\n".join(lines))
    print(f"\npooled over {len(logs)} pairs: {ratio_cell(geomean_interval(logs))}")


if __name__ == "__main__":
    main()
