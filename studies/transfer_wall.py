"""The wall-time section of ``transfer_summary.md``: what a warm start costs in seconds and
what it is worth at equal wall time.

A warm study's sampler can cost more per trial than a cold one's (it scores program features,
lowered through TVM, where a cold CPU study scores knob features), so a lead in trials need
not be a lead in seconds. For each warm mode and seed this reads, from ``transfer_curves.csv``,
its best found while tuning at the moment the same seed's cold study finished all its trials
(seconds from each study's first trial start), ÷ the cold study's final best.
"""

from __future__ import annotations

import math
import statistics

from efficiency_goals import geomean_interval, ratio_cell


def best_by(curve: list[dict], seconds: float) -> float:
    """The best GFLOP/s found while tuning within `seconds` of a study's start (0 if none),
    from its curve rows in trial order."""
    within = [
        float(c["best_gflops"])
        for c in curve
        if c["elapsed_s"] != "" and float(c["elapsed_s"]) <= seconds
    ]
    return within[-1] if within else 0.0


def wall_table(groups: list[tuple[str, str, list[dict]]], by_study: dict[tuple, list[dict]]) -> str:
    """Per pair, cost model and warm mode: median wall seconds of one study against cold's,
    and the best at cold's wall time ÷ cold's final best (geometric mean over seeds, 95 %
    bootstrap interval, and every seed). `groups`: (pair, cost model, its ``transfer.csv``
    rows); `by_study`: the curves per (pair, cost model, mode, seed), in trial order (as
    ``transfer_report`` makes them)."""
    lines = [
        "| pair | cost model | mode | median wall s | ÷ cold | best at cold's wall time ÷ "
        "cold's best [95 %] | per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair, model, ours in groups:
        modes = dict.fromkeys(r["mode"] for r in ours)
        walls = {m: [float(r["wall_s"]) for r in ours if r["mode"] == m] for m in modes}
        cold_wall = statistics.median(walls["cold"]) if walls.get("cold") else math.nan
        for mode in [m for m in walls if m != "cold"]:
            ratios = []
            for seed in sorted({r["seed"] for r in ours if r["mode"] == mode}, key=int):
                cold = by_study.get((pair, model, "cold", seed))
                warm = by_study.get((pair, model, mode, seed))
                if not cold or not warm or cold[-1]["elapsed_s"] == "":
                    continue
                found = best_by(warm, float(cold[-1]["elapsed_s"]))
                ratios.append(found / float(cold[-1]["best_gflops"]))
            pooled = geomean_interval([math.log(r) for r in ratios if r > 0])
            wall = statistics.median(walls[mode])
            lines.append(
                f"| {pair} | {model or 'xgb'} | {mode} | {wall:.0f} | {wall / cold_wall:.2f} | "
                f"{ratio_cell(pooled)} | {' / '.join(f'{r:.2f}' for r in ratios)} |"
            )
    lines.append("")
    lines.append(
        "Wall seconds per study (cold's median "
        "against each mode's); a warm study's best found while tuning by the time the same "
        "seed's cold study had finished all its trials, ÷ that cold study's best (tuning-time "
        "values, not re-timed). A seed whose warm study found nothing by then reads 0 and is "
        "left out of the mean."
    )
    return "\n".join(lines)
