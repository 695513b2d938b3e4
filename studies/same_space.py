"""The search alone: the learned sampler against MetaSchedule's own search, both in
MetaSchedule's design space (issue 21's evidence), from the rows of `sample_efficiency`.

``costmodel-ms`` is our sampler over `tensortune.templates.MetaScheduleTemplate`'s knobs;
``metaschedule`` is TVM's evolutionary search with its XGBoost model over the same design
space; both are measured by our measurer and their winners re-timed together. Pure functions
of the rows (one dict per study, numbers parsed), as in `efficiency_goals`.
"""

from __future__ import annotations

import statistics

from efficiency_goals import MET, NOT_MEASURED, NOT_MET, pooled_table, positive, value_at

#: Our sampler in MetaSchedule's space, and MetaSchedule's own search there.
OURS_IN_SPACE, PEER_IN_SPACE = "costmodel-ms", "metaschedule"
#: Our tuners in the hand templates' space, whose best the space's best is compared with.
IN_TEMPLATES = ("costmodel", "tpe", "gp", "random")
#: The budgets issue 21 compares the two searches at.
BUDGETS = (32, 64, 128)


def same_space_section(rows: list[dict]) -> str | None:
    """Markdown: the pooled ratio of `OURS_IN_SPACE` ÷ `PEER_IN_SPACE` and issue 21's goals;
    None where the rows hold no study of both."""
    tuners = {r["tuner"] for r in rows}
    if not {OURS_IN_SPACE, PEER_IN_SPACE} <= tuners:
        return None
    mine = [r for r in rows if r["tuner"] in (OURS_IN_SPACE, PEER_IN_SPACE)]
    lines = [
        "The same space (MetaSchedule's design space), our sampler against MetaSchedule's search:",
        "",
        pooled_table(mine, ours=OURS_IN_SPACE, peer=PEER_IN_SPACE),
        "",
        "| goal (issue 21) | verdict | numbers |",
        "|---|---|---|",
    ]
    lines += [f"| {g} | {v} | {n} |" for g, v, n in same_space_goals(rows)]
    return "\n".join(lines)


def same_space_goals(rows: list[dict]) -> list[tuple[str, str, str]]:
    """Issue 21's goals from `rows`: (goal, verdict, numbers) each."""
    return [_medians_goal(rows), _wall_goal(rows), _ceiling(rows)]


def _labels(rows: list[dict]) -> list[str]:
    """Workloads where both searches ran."""
    both = [
        label
        for label in dict.fromkeys(r["workload"] for r in rows)
        if {OURS_IN_SPACE, PEER_IN_SPACE} <= {r["tuner"] for r in rows if r["workload"] == label}
    ]
    return both


def _median_at(rows: list[dict], label: str, tuner: str, n: int, retimed: bool) -> float | None:
    """The median at `n` trials of `tuner` on `label`: re-timed winners (`value_at`) with
    `retimed`, else the best found while tuning, so that both searches are read alike."""
    values = [
        v
        for r in rows
        if r["workload"] == label and r["tuner"] == tuner and r["trials"] >= n
        if (v := value_at(r, n) if retimed else _positive(r.get(f"best@{n}")))
    ]
    return statistics.median(values) if values else None


def _positive(value: object) -> float | None:
    return float(value) if positive(value) else None


def _both_retimed(rows: list[dict], label: str, n: int) -> bool:
    """Whether every study of both searches on `label` has its winner at `n` re-timed (the
    last trial always is; MetaSchedule's earlier winners are not)."""
    mine = [
        r for r in rows if r["workload"] == label and r["tuner"] in (OURS_IN_SPACE, PEER_IN_SPACE)
    ]
    return all(n == r["trials"] or positive(r.get(f"remeasured@{n}")) for r in mine)


def _medians_goal(rows: list[dict]) -> tuple[str, str, str]:
    goal = (
        f"Every workload at {'/'.join(map(str, BUDGETS))} trials: {OURS_IN_SPACE}'s median ≥ "
        f"{PEER_IN_SPACE}'s"
    )
    behind, held, missing = [], 0, []
    for label in _labels(rows):
        for n in BUDGETS:
            retimed = _both_retimed(rows, label, n)
            a = _median_at(rows, label, OURS_IN_SPACE, n, retimed)
            b = _median_at(rows, label, PEER_IN_SPACE, n, retimed)
            if a is None or b is None:
                missing.append(f"{label} @{n}")
            elif a >= b:
                held += 1
            else:
                behind.append(f"{label} @{n} {a:.0f} < {b:.0f}")
    if not held and not behind:
        return goal, NOT_MEASURED, "no workload with both searches at these budgets"
    numbers = (
        f"{held} of {held + len(behind)} held (GFLOP/s; re-timed where both searches' winners "
        "were, else as found while tuning)"
    )
    if behind:
        numbers += "; behind: " + ", ".join(behind)
    if missing:
        numbers += "; not run: " + ", ".join(missing)
    return goal, MET if not behind and not missing else NOT_MET, numbers


def _wall_goal(rows: list[dict]) -> tuple[str, str, str]:
    goal = f"In less wall time: {OURS_IN_SPACE}'s median study seconds < {PEER_IN_SPACE}'s"
    cells, slower = [], []
    for label in _labels(rows):
        a, b = (
            statistics.median(
                r["wall_s"] for r in rows if r["workload"] == label and r["tuner"] == t
            )
            for t in (OURS_IN_SPACE, PEER_IN_SPACE)
        )
        cells.append(f"{label} {a:.0f} vs {b:.0f} s")
        if a >= b:
            slower.append(label)
    if not cells:
        return goal, NOT_MEASURED, "no workload with both searches"
    numbers = ", ".join(cells) + (f"; slower on {', '.join(slower)}" if slower else "")
    numbers += " (ours through the measurement cache: a config met again costs nothing)"
    return goal, MET if not slower else NOT_MET, numbers


def _ceiling(rows: list[dict]) -> tuple[str, str, str]:
    """Not a goal with a level: the best re-timed kernel of the space against the hand
    templates' best and the vendor, per workload."""
    goal = "The space's best kernel against the hand templates' best and the vendor (report)"
    cells = []
    for label in _labels(rows):
        mine = [r for r in rows if r["workload"] == label]
        space = max((r["remeasured"] for r in mine if r["tuner"] in (OURS_IN_SPACE, PEER_IN_SPACE)
                     and positive(r.get("remeasured"))), default=None)  # fmt: skip
        hand = max((r["remeasured"] for r in mine if r["tuner"] in IN_TEMPLATES
                    and positive(r.get("remeasured"))), default=None)  # fmt: skip
        vendors = [r["remeasured_vendor"] for r in mine if positive(r.get("remeasured_vendor"))]
        if space is None:
            continue
        cell = f"{label} {space:.0f}"
        cell += f" / templates {hand:.0f}" if hand else " / templates not run"
        cell += f" / vendor {statistics.median(vendors):.0f}" if vendors else ""
        cells.append(cell)
    if not cells:
        return goal, NOT_MEASURED, "no re-timed winner in the space"
    return goal, "reported", "; ".join(cells) + " GFLOP/s (best re-timed winner of each)"
