"""Plots and the summary of `sample_efficiency`, from its rows and curves.

The summary (``sample_efficiency_summary.md``) has these parts:

- per workload and tuner: bests over the vendor at the checkpoints, trials to 90 % of the best
  known kernel, the re-timed winners (median and every seed) and over the vendor;
- the pooled geometric mean of ours ÷ TPE over seed pairs, with a bootstrap 95 % interval;
- per tuner, the pooled median of the trials to 90 % of the best known kernel;
- issue 19's goals that these rows can answer, each met / not met / not measured here;
- where ``costmodel-ms`` and ``metaschedule`` both ran, the two searches over MetaSchedule's
  design space pooled, and issue 21's goals (``same_space.py``).

Ratios to the vendor divide by the vendor re-timed interleaved with the winners of the same
workload and seed (``remeasured_vendor``); studies from before it was stored fall back to the
median of the workload's tuning-time readings, and the vendor column says which.

Run on its own it redraws them from the committed CSV files, or merges the rows of several
runs (other seeds of the same workloads, run on another day) into one report, with the trials to
90 % of the best known recomputed over all of them:

    python studies/efficiency_report.py [--out studies/results]
    python studies/efficiency_report.py --runs studies/results/explore \
        studies/results/explore-34 --out studies/results/explore-5seeds
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
from collections.abc import Sequence

from common import UNSEEN_WORKLOADS
from efficiency_goals import (
    KNOWN,
    MAIN,
    OURS,
    PEER,
    goals_section,
    pooled_table,
    positive,
    share_retimed_vendor,
    trials_table,
    trials_to_known,
    tuner_order,
    vendor_of,
)
from results_io import draw_band, pyplot, read_csv, write_csv
from same_space import same_space_section

RATIO_AT = (64, 128, 256)
#: Trials to a level: a level as a fraction of the workload's best known kernel (`KNOWN`).
LEVEL = 0.9


def report(rows: list[dict], curves: list[dict], out: str, overhead: Sequence[dict] = ()) -> None:
    """Write ``sample_efficiency_summary.md`` and the PNG plots under `out`; print the
    summary. Rows without `KNOWN` (older CSVs) get it from `curves`. Studies of
    `common.UNSEEN_WORKLOADS` are pooled apart from the reference workloads' and answer the
    goal about other shapes; `overhead` (rows of ``sampler_overhead.py``, default none)
    answers the goal about a long history."""
    rows = [_numbers(r) for r in rows]
    curves = [_numbers(c) for c in curves]
    if any(KNOWN not in r for r in rows):
        add_trials_to_known(rows, curves)
    share_retimed_vendor(rows)
    total = sum(r["wall_s"] for r in rows) / 60
    reference = [r for r in rows if r["workload"] not in UNSEEN_WORKLOADS]
    unseen = [r for r in rows if r["workload"] in UNSEEN_WORKLOADS]
    parts = [summary_table(rows), f"{len(rows)} studies, {total:.0f} min of tuning in all."]
    variants = sorted({r["tuner"] for r in rows if r["tuner"].startswith("costmodel-")})
    if reference:
        if any(r["tuner"] == PEER for r in reference):
            parts.append(pooled_table(reference))
        parts.append(trials_table(reference))
        # Each variant of the ablation against the default, on the seeds both ran.
        parts += [pooled_table(reference, ours=v, peer=OURS) for v in variants
                  if any(r["tuner"] == v for r in reference)]  # fmt: skip
        same_space = same_space_section(reference)
        if same_space:
            parts.append(same_space)
    if unseen:
        parts.append("Shapes the defaults were not chosen on:\n\n" + pooled_table(unseen))
    parts.append(goals_section(reference, unseen, overhead))
    text = "\n\n".join(parts)
    with open(os.path.join(out, "sample_efficiency_summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    main = [t for t in MAIN if any(r["tuner"] == t for r in rows)]
    _plot(os.path.join(out, "sample_efficiency_trials.png"), rows, curves, main, "trial")
    _plot(os.path.join(out, "sample_efficiency_seconds.png"), rows, curves, main, "elapsed_s")
    if variants:
        ablation = ["costmodel", *variants, "tpe"]
        labels = sorted({r["workload"] for r in rows if r["tuner"] in variants})
        mine = [r for r in rows if r["workload"] in labels]
        path = os.path.join(out, "sample_efficiency_ablation.png")
        _plot(path, mine, curves, ablation, "trial")


def add_trials_to_known(rows: list[dict], curves: list[dict]) -> None:
    """Set each row's `KNOWN`: the first trial at which its curve reaches `LEVEL` of the best
    known kernel of its workload ('' if never), the best over every seed of the main tuners
    (of all tuners where none of `MAIN` ran), so that adding variants moves nothing."""
    by_study: dict[tuple, list[dict]] = {}
    for c in curves:
        by_study.setdefault((c["workload"], c["tuner"], c["seed"]), []).append(c)
    for label in {r["workload"] for r in rows}:
        mine = {k: v for k, v in by_study.items() if k[0] == label}
        main = {k: v for k, v in mine.items() if k[1] in MAIN} or mine
        top = max((float(c["best_gflops"]) for v in main.values() for c in v), default=0.0)
        for row in rows:
            if row["workload"] != label:
                continue
            curve = sorted(mine.get((label, row["tuner"], row["seed"]), []), key=_trial)
            reached = (c["trial"] for c in curve if float(c["best_gflops"]) >= LEVEL * top)
            row[KNOWN] = next(reached, "") if top > 0 else ""


def _trial(curve_row: dict) -> int:
    return int(curve_row["trial"])


def summary_table(rows: list[dict]) -> str:
    """Markdown: per workload and tuner, the median best over the vendor at 64/128/256
    trials, the median trials to 90 % of the best known kernel of the workload (`KNOWN`, per
    seed), the median re-timed winner (GFLOP/s, per seed) and its median ratio to the vendor,
    and the median wall time. Each study's ratios divide by the vendor re-timed with its
    winners; where that is missing (older studies), by the median of every study's
    tuning-time reading for the workload: one single reading was off by up to 2x (once 1000x)
    on this noisy VM."""
    trials = max(r["trials"] for r in rows)
    checkpoints = [n for n in RATIO_AT if n <= trials] or [trials]
    head = ["workload", "vendor GFLOP/s", "tuner", "seeds"]
    head += [f"×vendor @{n}" for n in checkpoints]
    head += ["trials to 90 % of best known (per seed)", "re-timed GFLOP/s (per seed)"]
    head += ["re-timed ×vendor", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == label]
        fallback, vendor_cell = _vendor(mine)
        tuners = sorted({r["tuner"] for r in mine}, key=tuner_order)
        for tuner in tuners:
            runs = [r for r in mine if r["tuner"] == tuner]
            cells = [label, vendor_cell, tuner, str(len(runs))]
            for n in checkpoints:
                cells.append(_median_ratio(runs, f"best@{n}", fallback))
            reached = [trials_to_known(r) for r in runs]
            per_seed = "/".join(_shown(x, trials) for x in reached)
            cells.append(f"{_shown(statistics.median(reached), trials)} ({per_seed})")
            retimed = [r["remeasured"] for r in runs if positive(r.get("remeasured"))]
            per_seed = "/".join(
                f"{r['remeasured']:.0f}" if positive(r.get("remeasured")) else "–" for r in runs
            )
            cells.append(f"{statistics.median(retimed):.0f} ({per_seed})" if retimed else "–")
            cells.append(_median_ratio(runs, "remeasured", fallback))
            cells.append(f"{statistics.median(r['wall_s'] for r in runs):.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _vendor(runs: list[dict]) -> tuple[float, str]:
    """The workload's fallback vendor (median tuning-time reading) and its table cell: the
    median vendor the ratios divide by, saying whether it was re-timed."""
    fallback = statistics.median(r["vendor_gflops"] for r in runs)
    library = runs[0]["vendor_library"]
    retimed = sum(1 for r in runs if positive(r.get("remeasured_vendor")))
    median = statistics.median(vendor_of(r, fallback) for r in runs)
    if retimed == len(runs):
        how = "re-timed"
    elif retimed:
        how = f"re-timed in {retimed} of {len(runs)} studies, else tuning-time"
    else:
        how = "tuning-time"
    return fallback, f"{median:.0f} ({library}, {how})"


def _median_ratio(runs: list[dict], key: str, fallback: float) -> str:
    vendors = [vendor_of(r, fallback) for r in runs]
    ratios = [r[key] / v for r, v in zip(runs, vendors, strict=True) if positive(r.get(key)) and v]
    return f"{statistics.median(ratios):.2f}" if ratios else "–"


def _shown(trials_to: float, budget: int) -> str:
    return f">{budget}" if trials_to == math.inf else f"{trials_to:.0f}"


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
        fallback = statistics.median(r["vendor_gflops"] for r in mine)
        vendor = statistics.median(vendor_of(r, fallback) for r in mine)
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
    parser.add_argument(
        "--runs", nargs="+", metavar="DIR", default=None,
        help="results folders of sample_efficiency runs to merge into --out (default: none, "
        "redraw --out from its own CSV files)",
    )  # fmt: skip
    parser.add_argument(
        "--overhead", metavar="CSV", default=os.path.join(here, "sampler_overhead.csv"),
        help="rows of sampler_overhead.py for the long-history goal (default: "
        "results/sampler_overhead.csv, where it exists)",
    )  # fmt: skip
    args = parser.parse_args()
    overhead = read_csv(args.overhead) if os.path.exists(args.overhead) else []
    rows, curves = [], []
    for folder in args.runs or [args.out]:
        try:
            rows += read_csv(os.path.join(folder, "sample_efficiency.csv"))
            curves += read_csv(os.path.join(folder, "sample_efficiency_curves.csv"))
        except OSError as err:
            parser.error(f"cannot read the results of {folder}: {err.strerror}")
    studies = [(r["workload"], r["tuner"], r["seed"]) for r in rows]
    twice = sorted({s for s in studies if studies.count(s) > 1})
    if twice:
        parser.error(f"runs overlap: {'/'.join(twice[0])} is in more than one of them")
    if args.runs:
        add_trials_to_known(rows, curves)
        os.makedirs(args.out, exist_ok=True)
        write_csv(os.path.join(args.out, "sample_efficiency.csv"), rows)
        write_csv(os.path.join(args.out, "sample_efficiency_curves.csv"), curves)
    report(rows, curves, args.out, overhead)


if __name__ == "__main__":
    main()
