"""The numbers of `efficiency_report`'s summary that compare tuners across studies: the
pooled ratio of the learned sampler to TPE with its bootstrap interval, the pooled trials to
90 % of the best known kernel, and issue 19's goals evaluated from the rows of
`sample_efficiency` (one dict per study, as ``sample_efficiency.csv`` holds them, numbers
parsed). Pure functions of the rows: no tuning, no files.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypeGuard

import numpy as np

MAIN = ("costmodel", "tpe", "gp", "random", "metaschedule")
#: The learned sampler (default settings) and the peer the pooled ratio divides by.
OURS, PEER = "costmodel", "tpe"
#: Checkpoints of the pooled ratio within the studies' trials, besides their last trial.
POOLED_AT = (16, 32, 64)
#: Bootstrap of the pooled ratio: resamples of the seed pairs and the generator's seed.
RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
#: The rows' column of the trials to 90 % of the workload's best known kernel.
KNOWN = "trials_to_90%_known"
MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured here"


def vendor_of(row: dict, fallback: float) -> float:
    """The vendor GFLOP/s a row's ratios divide by: its re-timed vendor, else `fallback`."""
    retimed = row.get("remeasured_vendor")
    return float(retimed) if positive(retimed) else fallback


def share_retimed_vendor(rows: list[dict]) -> None:
    """Give a row without a re-timed vendor the one of another study of its workload and
    seed, where there is one: every winner of a workload and seed was re-timed in the same
    rounds as that one vendor reading, but ``sample_efficiency.retime_winners`` stores it only
    on the studies whose own tuning-time vendor was the same library (the faster of two close
    libraries can differ from study to study)."""
    found = {(r["workload"], r["seed"]): r["remeasured_vendor"]
             for r in rows if positive(r.get("remeasured_vendor"))}  # fmt: skip
    for row in rows:
        if not positive(row.get("remeasured_vendor")):
            row["remeasured_vendor"] = found.get((row["workload"], row["seed"]), "")


def positive(value: object) -> TypeGuard[float]:
    """Whether a cell holds a positive number ('' and 0 do not)."""
    return isinstance(value, (int, float)) and value > 0


def trials_to_known(row: dict) -> float:
    """A row's `KNOWN`, infinite where it never reached the level."""
    value = row.get(KNOWN, "")
    return float(value) if value != "" else math.inf


def tuner_order(tuner: str) -> tuple[int, str]:
    """Sort key: the main tuners in `MAIN` order, then the variants by name."""
    return (MAIN.index(tuner) if tuner in MAIN else len(MAIN), tuner)


# -- the pooled ratio, trials to the best known, the goals --------------------------------------
def value_at(row: dict, n: int) -> float | None:
    """A study's best at `n` trials: its re-timed winner when `n` is its last trial, else the
    winner of its first `n` trials re-timed (``remeasured@n``) where it was, else its best as
    measured during tuning; None where missing (e.g. not re-timed)."""
    if n == row["trials"]:
        value = row.get("remeasured")
    else:
        value = row.get(f"remeasured@{n}")
        value = value if positive(value) else row.get(f"best@{n}")
    return float(value) if positive(value) else None


def pooled_ratio(
    rows: list[dict], n: int, ours: str = OURS, peer: str = PEER
) -> dict[str, float] | None:
    """Geometric mean of `ours` ÷ `peer` at `n` trials (`value_at`) over the seed pairs of
    `rows` (same workload, same seed), with a 95 % bootstrap interval (`RESAMPLES` resamples
    of the pairs, numpy generator seeded with `BOOTSTRAP_SEED`): a dict of ``pairs``,
    ``geomean``, ``low``, ``high``; None without a pair. Defaults: `OURS`, `PEER`."""
    by_study = {(r["workload"], r["tuner"], r["seed"]): r for r in rows}
    logs = []
    for (label, tuner, seed), row in by_study.items():
        other = by_study.get((label, peer, seed))
        if tuner != ours or other is None:
            continue
        a, b = value_at(row, n), value_at(other, n)
        if a is not None and b is not None:
            logs.append(math.log(a / b))
    return geomean_interval(logs)


def geomean_interval(logs: Sequence[float]) -> dict[str, float] | None:
    """The geometric mean of ratios given as their logarithms, with a 95 % bootstrap interval
    (`RESAMPLES` resamples, numpy generator seeded with `BOOTSTRAP_SEED`): a dict of ``pairs``,
    ``geomean``, ``low``, ``high``; None for no ratio."""
    if not logs:
        return None
    values = np.array(logs, dtype=float)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    low, high = np.exp(np.percentile(means, [2.5, 97.5]))
    return {
        "pairs": len(values),
        "geomean": math.exp(values.mean()),
        "low": float(low),
        "high": float(high),
    }


def pooled_checkpoints(trials: int) -> list[int]:
    """`POOLED_AT`'s checkpoints within `trials`, and `trials` itself (the re-timed one)."""
    return [n for n in POOLED_AT if n < trials] + [trials]


def ratio_cell(found: dict[str, float] | None) -> str:
    """A `geomean_interval` as ``geomean [low, high]``, or ``–`` for none."""
    if found is None:
        return "–"
    return f"{found['geomean']:.2f} [{found['low']:.2f}, {found['high']:.2f}]"


def pooled_table(rows: list[dict], ours: str = OURS, peer: str = PEER) -> str:
    """Markdown: `pooled_ratio` per workload and pooled over all, at `pooled_checkpoints`."""
    trials = max(r["trials"] for r in rows)
    checkpoints = pooled_checkpoints(trials)
    head = ["workload", "seed pairs"]
    head += [
        f"{ours} ÷ {peer} @{n} ({_source(n, trials, rows, ours, peer)}) [95 %]" for n in checkpoints
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    groups = [(label, [r for r in rows if r["workload"] == label])
              for label in dict.fromkeys(r["workload"] for r in rows)]  # fmt: skip
    for label, mine in [*groups, ("all (pooled)", rows)]:
        found = [pooled_ratio(mine, n, ours, peer) for n in checkpoints]
        pairs = max((f["pairs"] for f in found if f), default=0)
        if pairs:
            cells = [label, f"{pairs:.0f}", *(ratio_cell(f) for f in found)]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Geometric mean of {ours} ÷ {peer} over seed pairs (same workload, same seed), with "
        f"the 2.5-97.5 % percentiles of {RESAMPLES} bootstrap resamples of the pairs (numpy "
        f"seed {BOOTSTRAP_SEED}). Re-timed: the winners re-timed interleaved after tuning; "
        "tuning-time: the best found by then as measured while tuning."
    )
    return "\n".join(lines)


def _source(n: int, trials: int, rows: list[dict], ours: str = OURS, peer: str = PEER) -> str:
    """How `value_at` got the values at `n` trials of `ours` and `peer` in `rows`."""
    pair = [r for r in rows if r["tuner"] in (ours, peer) and r["trials"] >= n]
    if n == trials or (pair and all(positive(r.get(f"remeasured@{n}")) for r in pair)):
        return "re-timed"
    return "tuning-time"


def trials_medians(rows: list[dict]) -> dict[str, tuple[float, int, int]]:
    """Per tuner, over every workload and seed: (the median trials to 90 % of the workload's
    best known kernel, a study that never reached it counting as one past its budget;
    studies that reached it; studies)."""
    out = {}
    for tuner in sorted({r["tuner"] for r in rows}, key=tuner_order):
        runs = [r for r in rows if r["tuner"] == tuner]
        counts = [min(trials_to_known(r), r["trials"] + 1) for r in runs]
        reached = sum(1 for r in runs if trials_to_known(r) != math.inf)
        out[tuner] = (statistics.median(counts), reached, len(runs))
    return out


def trials_table(rows: list[dict]) -> str:
    """Markdown: `trials_medians`."""
    trials = max(r["trials"] for r in rows)
    lines = [
        "| tuner | studies | reached 90 % of best known | pooled median trials to it |",
        "|---|---|---|---|",
    ]
    for tuner, (median, reached, runs) in trials_medians(rows).items():
        shown = f">{trials}" if median > trials else f"{median:g}"
        lines.append(f"| {tuner} | {runs} | {reached} | {shown} |")
    lines.append("")
    lines.append(
        "Best known: the best any main tuner found for the workload, over all seeds. A study "
        f"that never reached 90 % of it counts as {trials + 1} trials."
    )
    return "\n".join(lines)


def goals(
    rows: list[dict], unseen: Sequence[dict] = (), overhead: Sequence[dict] = ()
) -> list[tuple[str, str, str]]:
    """Issue 19's goals, evaluated from `rows` (studies of the reference workloads) with
    `OURS` as the learned sampler: one (goal, verdict, numbers) each, the verdict `MET`,
    `NOT_MET` or `NOT_MEASURED` (the rows cannot answer: too few trials, a tuner or workload
    missing, or another benchmark's). `unseen`: studies of shapes the defaults were not chosen
    on (default none); `overhead`: the rows of ``sampler_overhead.py`` (default none)."""
    trials = max((r["trials"] for r in rows), default=0)
    out = []
    for n, level in ((32, 1.5), (64, 1.25)):
        goal = f"Pooled geo-mean {OURS} ÷ {PEER} ≥ {level}× at {n} trials, 95 % low end > 1.0"
        found = pooled_ratio(rows, n) if n <= trials else None
        if found is None:
            out.append((goal, NOT_MEASURED, f"no seed pairs at {n} trials"))
            continue
        ok = found["geomean"] >= level and found["low"] > 1.0
        numbers = f"{ratio_cell(found)} over {found['pairs']} pairs, {_source(n, trials, rows)}"
        out.append((goal, MET if ok else NOT_MET, numbers))
    out.append(_beats_medians(rows, trials))
    out.append(_worst_seed(rows, trials))
    out.append(_trials_goal(rows))
    out.append(_vendor_goal(rows))
    out.append(_overhead_goal(rows))
    out.append(_history_overhead_goal(overhead))
    out.append(_unseen_goal(list(unseen)))
    return out


def _at_64(rows: list[dict], trials: int) -> dict[str, dict[str, list[float]]] | None:
    """Per workload where `OURS` ran, per tuner: the values at 64 trials (`value_at`)."""
    if trials < 64:
        return None
    out: dict[str, dict[str, list[float]]] = {}
    for label in dict.fromkeys(r["workload"] for r in rows if r["tuner"] == OURS):
        mine = [r for r in rows if r["workload"] == label]
        values = {t: [v for r in mine if r["tuner"] == t if (v := value_at(r, 64))]
                  for t in {r["tuner"] for r in mine}}  # fmt: skip
        out[label] = {t: v for t, v in values.items() if v}
    return out


def _beats_medians(rows: list[dict], trials: int) -> tuple[str, str, str]:
    goal = f"Every workload: {OURS}'s median at 64 trials ≥ TPE's and ≥ MetaSchedule's"
    by_label = _at_64(rows, trials)
    if not by_label:
        return goal, NOT_MEASURED, "no studies of 64 trials or more"
    losses, missing = [], []
    for label, values in by_label.items():
        if OURS not in values:
            missing.append(f"{label} {OURS}")
            continue
        ours = statistics.median(values[OURS])
        for peer in ("tpe", "metaschedule"):
            if peer not in values:
                missing.append(f"{label} {peer}")
            elif ours < statistics.median(values[peer]):
                peer_median = statistics.median(values[peer])
                losses.append(f"{label}: {ours:.0f} < {peer} {peer_median:.0f}")
    numbers = f"{_source(64, trials, rows)} GFLOP/s; "
    numbers += "loses on " + ", ".join(losses) if losses else f"wins all {len(by_label)}"
    if missing:
        numbers += "; missing: " + ", ".join(missing)
    verdict = NOT_MET if losses else NOT_MEASURED if missing else MET
    return goal, verdict, numbers


def _worst_seed(rows: list[dict], trials: int) -> tuple[str, str, str]:
    goal = f"Every workload: {OURS}'s worst seed at 64 trials ≥ 0.8× TPE's median"
    by_label = _at_64(rows, trials)
    ratios = {label: min(v[OURS]) / statistics.median(v[PEER])
              for label, v in (by_label or {}).items() if OURS in v and PEER in v}  # fmt: skip
    if not ratios:
        return goal, NOT_MEASURED, "no workload with both at 64 trials or more"
    low = [f"{label} {x:.2f}×" for label, x in ratios.items() if x < 0.8]
    worst = min(ratios, key=lambda label: ratios[label])
    numbers = f"worst {worst} {ratios[worst]:.2f}× ({_source(64, trials, rows)})"
    if low:
        numbers += "; below 0.8×: " + ", ".join(low)
    missing = [label for label in by_label or {} if label not in ratios]
    if missing:
        numbers += "; missing: " + ", ".join(missing)
    return goal, NOT_MET if low else NOT_MEASURED if missing else MET, numbers


def _trials_goal(rows: list[dict]) -> tuple[str, str, str]:
    goal = f"Trials to 90 % of the best known: {OURS}'s pooled median ≤ ½ TPE's"
    medians = trials_medians(rows)
    if OURS not in medians or PEER not in medians:
        return goal, NOT_MEASURED, f"no {OURS} or no {PEER} studies"
    (ours, reached, runs), (peer, peer_reached, peer_runs) = medians[OURS], medians[PEER]
    # An unreached level counts as one past the budget: TPE's median is then a lower bound,
    # ours an upper one only where ours reached it.
    trials = max(r["trials"] for r in rows)
    ok = ours <= trials and ours <= peer / 2
    numbers = (
        f"{shown_count(ours, trials)} vs {shown_count(peer, trials)} trials "
        f"(reached in {reached} of {runs} / {peer_reached} of {peer_runs} studies)"
    )
    return goal, MET if ok else NOT_MET, numbers


def shown_count(median: float, trials: int) -> str:
    """A trial count, ``>trials`` for one past the budget (a level never reached)."""
    return f">{trials}" if median > trials else f"{median:g}"


#: The workloads of the 256-trial vendor goal.
VENDOR_GOAL = ("matmul-1024", "resnet18-c7", "resnet18-c12")


def _vendor_goal(rows: list[dict]) -> tuple[str, str, str]:
    goal = f"{OURS} at 256 trials on {', '.join(VENDOR_GOAL)} (3 seeds): ≥ 1.0× re-timed vendor"
    ours = [r for r in rows if r["tuner"] == OURS and r["workload"] in VENDOR_GOAL]
    ours = [r for r in ours if r["trials"] >= 256 and value_at(r, 256) is not None]
    labels = {r["workload"] for r in ours}
    if labels != set(VENDOR_GOAL):
        return goal, NOT_MEASURED, "needs studies of 256 trials of all three workloads"
    logs, fallbacks = [], 0
    for r in ours:
        fallback = statistics.median(
            x["vendor_gflops"] for x in rows if x["workload"] == r["workload"]
        )
        fallbacks += not positive(r.get("remeasured_vendor"))
        vendor, value = vendor_of(r, fallback), value_at(r, 256)
        if vendor > 0 and value is not None:
            logs.append(math.log(value / vendor))
    if not logs:
        return goal, NOT_MEASURED, "no vendor readings"
    geomean = math.exp(statistics.fmean(logs))
    seeds = min(sum(1 for r in ours if r["workload"] == label) for label in VENDOR_GOAL)
    numbers = f"geo-mean {geomean:.2f}× over {len(logs)} studies (≥ {seeds} seeds each)"
    if fallbacks:
        numbers += f"; {fallbacks} divided by the tuning-time vendor"
    if seeds < 3:
        return goal, NOT_MEASURED, numbers
    return goal, MET if geomean >= 1.0 else NOT_MET, numbers


def _overhead_goal(rows: list[dict]) -> tuple[str, str, str]:
    goal = f"{OURS}'s sampler seconds ≤ 15 % of a 64-trial study's wall time"
    ours = [r for r in rows if r["tuner"] == OURS and r["trials"] == 64 and positive(r["wall_s"])]
    if not ours:
        return goal, NOT_MEASURED, "no 64-trial studies"
    shares = {(r["workload"], r["seed"]): float(r.get("sampler_s") or 0) / r["wall_s"]
              for r in ours}  # fmt: skip
    worst = max(shares, key=lambda k: shares[k])
    numbers = (
        f"median {100 * statistics.median(shares.values()):.0f} %, worst "
        f"{100 * shares[worst]:.0f} % ({worst[0]} seed {worst[1]})"
    )
    if any(positive(r.get("cache_hits")) for r in ours):
        numbers += "; cached configs cost no wall time, so these shares are upper bounds"
    return goal, MET if shares[worst] <= 0.15 else NOT_MET, numbers


#: The long-history overhead goal: the window of ``sampler_overhead.py`` that starts from this
#: many measured trials, and the share of its wall time the sampler may take.
HISTORY, HISTORY_SHARE = 1000, 0.10


def _history_overhead_goal(overhead: Sequence[dict]) -> tuple[str, str, str]:
    goal = (
        f"{OURS}'s sampler seconds ≤ {100 * HISTORY_SHARE:.0f} % of the wall time with "
        f"{HISTORY} trials of history"
    )
    first: dict[tuple[str, str], dict] = {}
    for row in sorted(overhead, key=lambda r: int(r["history_at_start"])):
        if int(row["history_at_start"]) >= HISTORY:
            first.setdefault((row["workload"], str(row["seed"])), row)
    if not first:
        return goal, NOT_MEASURED, f"sampler_overhead.py has no window from {HISTORY} trials"
    shares = {key: float(row["sampler_share"]) for key, row in first.items()}
    numbers = ", ".join(
        f"{label} seed {seed} {100 * share:.1f} % (trials {first[label, seed]['trials']})"
        for (label, seed), share in shares.items()
    )
    return goal, MET if max(shares.values()) <= HISTORY_SHARE else NOT_MET, numbers


def _unseen_goal(unseen: list[dict]) -> tuple[str, str, str]:
    goal = f"The defaults hold on ≥ 3 shapes not tuned on: {OURS}'s median ≥ TPE's (64 trials)"
    trials = max((r["trials"] for r in unseen), default=0)
    by_label = _at_64(unseen, trials) or {}
    both = {label: v for label, v in by_label.items() if OURS in v and PEER in v}
    if len(both) < 3:
        return goal, NOT_MEASURED, f"{len(both)} such shapes with both tuners at 64 trials"
    medians = {label: (statistics.median(v[OURS]), statistics.median(v[PEER]))
               for label, v in both.items()}  # fmt: skip
    numbers = ", ".join(f"{label} {a:.0f} vs {b:.0f}" for label, (a, b) in medians.items())
    pooled = pooled_ratio(unseen, 64)
    numbers += f" GFLOP/s ({_source(64, trials, unseen)}); pooled {ratio_cell(pooled)}"
    if pooled is not None:
        numbers += f" over {pooled['pairs']} pairs"
    met = all(a >= b for a, b in medians.values())
    return goal, MET if met else NOT_MET, numbers


def goals_section(
    rows: list[dict], unseen: Sequence[dict] = (), overhead: Sequence[dict] = ()
) -> str:
    """Markdown: `goals` as a table, and the seeds per reference workload (the issue asks
    for 5)."""
    lines = ["| goal (issue 19) | verdict | numbers |", "|---|---|---|"]
    found = goals(rows, unseen, overhead)
    lines += [f"| {goal} | {verdict} | {numbers} |" for goal, verdict, numbers in found]
    seeds = {label: len({r["seed"] for r in rows if r["workload"] == label})
             for label in dict.fromkeys(r["workload"] for r in rows)}  # fmt: skip
    if not seeds:
        return "\n".join(lines)
    lines.append("")
    lines.append(
        "Seeds per workload: "
        + ", ".join(f"{k} {v}" for k, v in seeds.items())
        + " (the goals ask for 5)."
    )
    return "\n".join(lines)
