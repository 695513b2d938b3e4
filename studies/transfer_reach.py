"""The reach section of ``transfer_summary.md``: how close the median study came to the best
kernel known, re-timed.

Trials to 90 % of the best known (``transfer_report.trials_to_known``) read the curves found
while tuning, and the best known there is the single fastest timing any study of the target
recorded: the luckiest of thousands of readings on a noisy machine, which the median study
may never reach. Here every figure is a re-timed winner (``transfer.csv``'s ``retimed@n``,
timed after tuning interleaved with the pair's other studies): the best known is the fastest
re-timed winner of any study of the pair (any mode, seed or checkpoint), and each study's
winner at a checkpoint is a share of it. A share that stays far below 90 % at the last
checkpoint says the studies were too short to read the goal, whatever their ratio to cold.
"""

from __future__ import annotations

import statistics

#: The share of the best known that issue 20's goal counts trials to.
REACH = 0.9


def best_known(rows: list[dict], checkpoints: list[int]) -> dict[str, float]:
    """Per pair, the fastest re-timed winner (GFLOP/s) of any of its studies at any of
    `checkpoints`; a pair with no re-timed winner is left out."""
    known: dict[str, float] = {}
    for r in rows:
        for n in checkpoints:
            if r.get(f"retimed@{n}"):
                known[r["pair"]] = max(known.get(r["pair"], 0.0), float(r[f"retimed@{n}"]))
    return known


def reach_table(rows: list[dict], checkpoints: list[int]) -> str:
    """Per cost model, kind of pair and mode: at each of `checkpoints`, the median share of
    the best known that the studies' re-timed winners hold, and how many of the studies hold
    at least `REACH` of it. `rows`: ``transfer.csv``'s, with ``kind`` and ``retimed@n``."""
    known = best_known(rows, checkpoints)
    head = " | ".join(f"@{n}" for n in checkpoints)
    lines = [
        f"| cost model | pairs of | mode | studies | {head} |",
        "|---|---|---|---|" + "---|" * len(checkpoints),
    ]
    groups = dict.fromkeys((r.get("cost_model") or "xgb", r["kind"], r["mode"]) for r in rows)
    for model, kind, mode in groups:
        these = [
            r
            for r in rows
            if (r.get("cost_model") or "xgb", r["kind"], r["mode"]) == (model, kind, mode)
            and r["pair"] in known
        ]
        cells = []
        for n in checkpoints:
            shares = [
                float(r[f"retimed@{n}"]) / known[r["pair"]] for r in these if r.get(f"retimed@{n}")
            ]
            reached = sum(s >= REACH for s in shares)
            cells.append(
                f"{100 * statistics.median(shares):.0f} % ({reached}/{len(shares)})"
                if shares
                else "–"
            )
        lines.append(f"| {model} | {kind} | {mode} | {len(these)} | {' | '.join(cells)} |")
    lines.append("")
    lines.append(
        "Median re-timed winner as a share of the fastest re-timed winner of any study of its "
        f"pair, and (in brackets) the studies at {100 * REACH:.0f} % of it or more. A median "
        f"far below {100 * REACH:.0f} % at the last checkpoint: the studies were too short to "
        "read trials to 90 % of the best known."
    )
    return "\n".join(lines)
