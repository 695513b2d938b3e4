"""Plots and the summary table of `sample_efficiency`, from its rows and curves.

Run on its own it redraws them from the committed CSV files:

    python studies/efficiency_report.py [--out studies/results]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics

from results_io import draw_band, pyplot, read_csv

MAIN = ("costmodel", "tpe", "gp", "random", "metaschedule")
RATIO_AT = (64, 128, 256)


def report(rows: list[dict], curves: list[dict], out: str) -> None:
    """Write ``sample_efficiency_summary.md`` and the PNG plots under `out`; print the table."""
    rows = [_numbers(r) for r in rows]
    curves = [_numbers(c) for c in curves]
    table = summary_table(rows)
    total = sum(r["wall_s"] for r in rows) / 60
    table += f"\n\n{len(rows)} studies, {total:.0f} min of tuning in all."
    with open(os.path.join(out, "sample_efficiency_summary.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    main = [t for t in MAIN if any(r["tuner"] == t for r in rows)]
    variants = sorted({r["tuner"] for r in rows if r["tuner"].startswith("costmodel-")})
    _plot(os.path.join(out, "sample_efficiency_trials.png"), rows, curves, main, "trial")
    _plot(os.path.join(out, "sample_efficiency_seconds.png"), rows, curves, main, "elapsed_s")
    if variants:
        ablation = ["costmodel", *variants, "tpe"]
        labels = sorted({r["workload"] for r in rows if r["tuner"] in variants})
        mine = [r for r in rows if r["workload"] in labels]
        path = os.path.join(out, "sample_efficiency_ablation.png")
        _plot(path, mine, curves, ablation, "trial")


def summary_table(rows: list[dict]) -> str:
    """Markdown: per workload and tuner, the median best at 64/128/256 trials and the median
    re-timed best over the vendor, the median trials to 90 % of the best any tuner found, and
    the wall time. The vendor is the median of every study's baseline for the workload: one
    study's single baseline measurement was off by up to 2x (once 1000x) on this noisy VM."""
    trials = max(r["trials"] for r in rows)
    checkpoints = [n for n in RATIO_AT if n <= trials] or [trials]
    head = ["workload", "vendor GFLOP/s", "tuner", "seeds"]
    head += [f"×vendor @{n}" for n in checkpoints]
    head += ["trials to 90 % (per seed)", "re-timed best ×vendor", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == label]
        vendor = statistics.median(r["vendor_gflops"] for r in mine)
        library = mine[0]["vendor_library"]
        tuners = sorted({r["tuner"] for r in mine}, key=tuner_order)
        for tuner in tuners:
            runs = [r for r in mine if r["tuner"] == tuner]
            cells = [label, f"{vendor:.0f} ({library})", tuner, str(len(runs))]
            for n in checkpoints:
                cells.append(_median_ratio(runs, f"best@{n}", vendor))
            reached = [r["trials_to_90%"] if r["trials_to_90%"] != "" else math.inf for r in runs]
            median = statistics.median(reached)
            per_seed = "/".join(str(x) if x != math.inf else f">{trials}" for x in reached)
            shown = f">{trials}" if median == math.inf else f"{median:.0f}"
            cells.append(f"{shown} ({per_seed})")
            cells.append(_median_ratio(runs, "remeasured", vendor))
            cells.append(f"{statistics.median(r['wall_s'] for r in runs):.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _median_ratio(runs: list[dict], key: str, vendor: float) -> str:
    values = [r[key] for r in runs if r[key] != ""]
    return f"{statistics.median(values) / vendor:.2f}" if values and vendor else "–"


def tuner_order(tuner: str) -> tuple[int, str]:
    """Sort key: the main tuners in `MAIN` order, then the variants by name."""
    return (MAIN.index(tuner) if tuner in MAIN else len(MAIN), tuner)


def _numbers(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if isinstance(value, str) and value not in ("", "nan"):
            with contextlib.suppress(ValueError):
                value = float(value) if "." in value else int(value)
        out[key] = value
    return out


def _plot(path: str, rows: list[dict], curves: list[dict], tuners: list[str], x_key: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    labels = list(dict.fromkeys(r["workload"] for r in rows))
    columns = min(4, len(labels))
    lines = math.ceil(len(labels) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.8 * lines), squeeze=False)
    for index, label in enumerate(labels):
        ax = axes[index // columns][index % columns]
        for tuner in tuners:
            series = _series(curves, label, tuner)
            if not series:
                continue
            n = min(len(s) for s in series)
            x = [statistics.median(s[i][x_key] for s in series) for i in range(n)]
            values = [[s[i]["best_gflops"] for s in series] for i in range(n)]
            draw_band(ax, x, values, tuner, alpha=0.15)
        mine = [r for r in rows if r["workload"] == label]
        vendor = statistics.median(r["vendor_gflops"] for r in mine)
        ax.axhline(vendor, color="k", ls="--", lw=1, label=mine[0]["vendor_library"])
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("trials" if x_key == "trial" else "seconds (median over seeds)")
        ax.set_ylabel("best GFLOP/s so far")
        ax.legend(loc="lower right", fontsize=7)
    for index in range(len(labels), lines * columns):
        axes[index // columns][index % columns].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _series(curves: list[dict], label: str, tuner: str) -> list[list[dict]]:
    mine = [c for c in curves if c["workload"] == label and c["tuner"] == tuner]
    seeds = sorted({c["seed"] for c in mine})
    return [[c for c in mine if c["seed"] == s and c["elapsed_s"] != ""] for s in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    parser.add_argument("--out", default=here, help=f"results folder (default {here})")
    args = parser.parse_args()
    rows = read_csv(os.path.join(args.out, "sample_efficiency.csv"))
    curves = read_csv(os.path.join(args.out, "sample_efficiency_curves.csv"))
    report(rows, curves, args.out)


if __name__ == "__main__":
    main()
