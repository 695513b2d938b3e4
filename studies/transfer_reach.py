"""The reach section of ``transfer_summary.md``: how close the median study came to the best
kernel known, re-timed.

Trials to 90 % of the best known (``transfer_report.trials_to_known``) read the curves found
while tuning, and the best known there is the single fastest timing any study of the target
recorded: the luckiest of thousands of readings on a noisy machine, which the median study
may never reach. Here every figure is a re-timed winner (``transfer.csv``'s ``retimed@n``,
timed after tuning interleaved with its run's other studies), divided by the vendor library
re-timed beside it (``retimed_vendor``), so that seeds of one pair re-timed in different runs
(``transfer_report --merge``) compare on one scale: the best known is the fastest such winner
of any study of the pair (any mode, seed or checkpoint), and each study's winner at a
checkpoint is a share of it. A share that stays far below 90 % at the last checkpoint says
the studies were too short to read the goal, whatever their ratio to cold.
"""

from __future__ import annotations

import statistics

#: The share of the best known that issue 20's goal counts trials to.
REACH = 0.9


def retimed(row: dict, n: int, per_vendor: bool = True) -> float | None:
    """`row`'s winner at `n` trials, re-timed (GFLOP/s), ÷ the vendor re-timed in the same run
    with `per_vendor` (default True); None where it was not re-timed."""
    if not row.get(f"retimed@{n}"):
        return None
    value = float(row[f"retimed@{n}"])
    return value / float(row["retimed_vendor"]) if per_vendor else value


def winners(rows: list[dict], checkpoints: list[int]) -> list[dict[int, float]]:
    """Per row, its `retimed` winner at each of `checkpoints` it was re-timed at: ÷ the vendor
    where every row of its pair has a vendor reading, else in GFLOP/s (which compares only
    within one run)."""
    unscaled = {r["pair"] for r in rows if not r.get("retimed_vendor")}
    return [
        {
            n: value
            for n in checkpoints
            if (value := retimed(r, n, r["pair"] not in unscaled)) is not None
        }
        for r in rows
    ]


def best_known(rows: list[dict], checkpoints: list[int]) -> dict[str, float]:
    """Per pair, the fastest of its studies' `winners` at any of `checkpoints`; a pair with no
    re-timed winner is left out."""
    return _best(rows, winners(rows, checkpoints))


def _best(rows: list[dict], values: list[dict[int, float]]) -> dict[str, float]:
    known: dict[str, float] = {}
    for r, found in zip(rows, values, strict=True):
        if found:
            known[r["pair"]] = max(known.get(r["pair"], 0.0), *found.values())
    return known


def reach_table(rows: list[dict], checkpoints: list[int]) -> str:
    """Per cost model, kind of pair and mode: at each of `checkpoints`, the median share of
    the best known that the studies' re-timed winners hold, and how many of the studies hold
    at least `REACH` of it. `rows`: ``transfer.csv``'s, with ``kind`` and ``retimed@n``."""
    values = winners(rows, checkpoints)
    known = _best(rows, values)

    def group(r: dict) -> tuple[str, str, str]:
        return r.get("cost_model") or "xgb", r["kind"], r["mode"]

    groups: dict[tuple[str, str, str], list[tuple[str, dict[int, float]]]] = {
        group(r): [] for r in rows
    }
    for r, found in zip(rows, values, strict=True):
        if r["pair"] in known:
            groups[group(r)].append((r["pair"], found))
    head = " | ".join(f"@{n}" for n in checkpoints)
    lines = [
        f"| cost model | pairs of | mode | studies | {head} |",
        "|---|---|---|---|" + "---|" * len(checkpoints),
    ]
    for (model, kind, mode), these in groups.items():
        cells = []
        for n in checkpoints:
            shares = [found[n] / known[pair] for pair, found in these if n in found]
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
        "pair, each ÷ the vendor re-timed in its run where every row of the pair has one, and "
        "(in brackets) the studies at "
        f"{100 * REACH:.0f} % of it or more. A median "
        f"far below {100 * REACH:.0f} % at the last checkpoint: the studies were too short to "
        "read trials to 90 % of the best known."
    )
    return "\n".join(lines)
