"""``transfer_summary.md`` and ``transfer.png`` from the rows ``transfer.py`` wrote
(``transfer.csv``, one row per pair, mode and seed; ``transfer_curves.csv``, the best so far
per trial): medians found while tuning, medians of the re-timed winners, the pooled ratio of
each warm mode to the cold study of the same seed with its bootstrap interval, trials to 90 %
of the best known kernel, issue 20's goals, how close the re-timed winners came to the best
known (`transfer_reach`), and wall time (`transfer_wall`).

    python studies/transfer_report.py --out studies/results/transfer

Runs of other pairs on one machine (``transfer.py --pairs P``, a folder each) pool into one
report with ``--merge``: their rows and curves are written together to ``--out`` first. The
trials per study are read from the curves (``--trials`` overrides); runs of other lengths do
not merge.

    python studies/transfer_report.py --merge studies/results/transfer-5seeds-* \
        --out studies/results/transfer-5seeds

``--versus warm`` adds a table of every other warm mode ÷ the default warm mode, seed by seed,
beside the one against cold: what two weightings are compared by.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics

from efficiency_goals import (
    MET,
    NOT_MEASURED,
    NOT_MET,
    geomean_interval,
    ratio_cell,
    shown_count,
)
from results_io import draw_band, pyplot, read_csv, write_csv
from transfer_reach import reach_table
from transfer_wall import wall_table

#: Checkpoints the goals ask for (those within the studies' trials are reported).
CHECKPOINTS = (16, 32, 64, 128)


def checkpoints(trials: int) -> list[int]:
    """The checkpoints reported for studies of `trials` trials: those of `CHECKPOINTS` within
    them, then doublings of the last up to `trials`, and `trials` itself, so that longer
    studies read how close they came and when (trials to 90 % of the best known, re-timed)."""
    found = [n for n in CHECKPOINTS if n <= trials]
    n = CHECKPOINTS[-1] * 2
    while n <= trials:
        found.append(n)
        n *= 2
    if trials > CHECKPOINTS[-1] and found[-1] != trials:
        found.append(trials)
    return found


#: Trials to 90 % of the best known: how many times fewer than cold a warm study must need.
SPEEDUP_GOALS = {"shapes": 3.0, "operators": 1.5}


def report(out: str, trials: int, versus: tuple[str, ...] = ()) -> None:
    """Write ``transfer_summary.md`` and ``transfer.png`` in `out` from the CSVs there, for
    studies of `trials` trials (an unreached level counts as ``trials + 1``), with a ratio
    table against each warm mode in `versus` besides the one against cold (default none)."""
    rows = read_csv(os.path.join(out, "transfer.csv"))
    curves = read_csv(os.path.join(out, "transfer_curves.csv"))
    by_study = curves_by_study(curves)
    sections = [tuning_table(rows, trials)]
    if any(r.get(f"retimed@{trials}") for r in rows):
        sections += [retimed_table(rows, trials), ratio_table(rows, trials)]
        sections += [ratio_table(rows, trials, mode) for mode in versus]
    if curves and rows[0].get("kind"):
        known = trials_to_known(rows, by_study, trials)
        sections += [known_table(rows, known, trials), goals_table(rows, known, trials)]
        if any(r.get(f"retimed@{trials}") for r in rows):
            sections.append(reach_table(rows, checkpoints(trials)))
    if any(c.get("elapsed_s") for c in curves) and any(r["mode"] == "cold" for r in rows):
        sections.append(wall_table(_groups(rows), by_study))
    text = "\n\n".join(sections) + "\n"
    with open(os.path.join(out, "transfer_summary.md"), "w") as f:
        f.write(text)
    print(text)
    _plot(out)


#: The cost model of rows without a ``cost_model``: transfer.py labels its rows only when a run
#: has several models or another one than its default, XGBoost.
UNLABELLED_MODEL = "xgb"


def merge(folders: list[str], out: str) -> None:
    """Write the rows and curves of the runs in `folders` (each with ``transfer.csv`` and
    ``transfer_curves.csv``) together into `out`. Raises ValueError, writing nothing, where a
    folder lacks either file, a (pair, cost model, mode, seed) is in two folders, the rows
    name more than one CPU (their ``host``) or none (ratios pool only within one machine), or
    the studies ran different numbers of trials (`study_trials`). Where some runs label their
    rows' cost model and others do not, the unlabelled ones are `UNLABELLED_MODEL`'s, so that
    the same model pools across runs."""
    rows: list[dict] = []
    curves: list[dict] = []
    origin: dict[tuple, str] = {}
    for folder in folders:
        paths = [os.path.join(folder, name) for name in ("transfer.csv", "transfer_curves.csv")]
        if not all(os.path.isfile(p) for p in paths):
            raise ValueError(f"{folder} holds no transfer.csv and transfer_curves.csv")
        found = read_csv(paths[0])
        for row in found:
            key = study_key(row)
            if key in origin:
                raise ValueError(f"{'/'.join(key[:3])} seed {key[3]} is in {origin[key]} and "
                                 f"{folder}")  # fmt: skip
            origin[key] = folder
        rows += found
        curves += read_csv(paths[1])
    if any(row.get("cost_model") for row in rows):  # a run of several models, or not xgb
        for row in rows + curves:
            row["cost_model"] = row.get("cost_model") or UNLABELLED_MODEL
    hosts = {row.get("host", "") for row in rows}
    if "" in hosts:
        raise ValueError("rows without a host (made before transfer.py recorded the CPU): "
                         "run transfer.py again on their folder to rewrite them")  # fmt: skip
    if len(hosts) > 1:
        raise ValueError(f"runs of several machines ({', '.join(sorted(hosts))}) do not pool")
    study_trials(curves)  # one length, or nothing is written
    write_csv(os.path.join(out, "transfer.csv"), rows)
    write_csv(os.path.join(out, "transfer_curves.csv"), curves)


def study_key(row: dict) -> tuple[str, str, str, str]:
    """The study a row of ``transfer.csv`` or ``transfer_curves.csv`` belongs to: (pair, cost
    model, mode, seed)."""
    return (row["pair"], row.get("cost_model", ""), row["mode"], row["seed"])


def curves_by_study(curves: list[dict]) -> dict[tuple, list[dict]]:
    """The rows of ``transfer_curves.csv`` per `study_key`, in trial order."""
    by_study: dict[tuple, list[dict]] = {}
    for row in curves:
        by_study.setdefault(study_key(row), []).append(row)
    for rows in by_study.values():
        rows.sort(key=lambda row: int(row["trial"]))
    return by_study


def study_trials(curves: list[dict]) -> int:
    """The trials per study of the run whose `curves` these are (its last trial number).
    Raises ValueError where the studies ran different numbers of trials: the checkpoints and
    the count of an unreached level would fit only some of them."""
    lengths = sorted({int(rows[-1]["trial"]) for rows in curves_by_study(curves).values()})
    if not lengths:
        raise ValueError("transfer_curves.csv holds no trials")
    if len(lengths) > 1:
        raise ValueError(f"studies of {' and '.join(map(str, lengths))} trials do not report "
                         "together: report each length from its own folder")  # fmt: skip
    return lengths[0]


def _trials(value: str, trials: int) -> int:
    """A trial count from the CSV; an unreached level ('') counts as one past the budget."""
    return int(value) if value else trials + 1


def _groups(rows: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """(pair, cost model, its rows) in the order the rows came."""
    keys = dict.fromkeys((r["pair"], r.get("cost_model", "")) for r in rows)
    return [
        (pair, model, [r for r in rows if r["pair"] == pair and r.get("cost_model", "") == model])
        for pair, model in keys
    ]


def _label(pair: str, model: str, model_col: bool) -> str:
    return f"| {pair} |" + (f" {model} |" if model_col else "")


def tuning_table(rows: list[dict], trials: int) -> str:
    """Median best found while tuning at each checkpoint, and trials to 90 % of the same
    seed's cold best (cold ÷ this: how many times fewer)."""
    model_col = any(r.get("cost_model") for r in rows)
    reported = checkpoints(trials)
    bests = " | ".join(f"@{n}" for n in reported).replace("@", "best @", 1)
    lines = [
        "| pair |" + (" cost model |" if model_col else "") + f" mode | {bests} (GFLOP/s) "
        "| trials to 90 % of cold best | cold ÷ this (×) |",
        "|---|" + ("---|" if model_col else "") + "---|" * (len(reported) + 3),
    ]
    for pair, model, ours in _groups(rows):
        colds = {r["seed"]: r for r in ours if r["mode"] == "cold"}
        for mode in dict.fromkeys(r["mode"] for r in ours):
            these = [r for r in ours if r["mode"] == mode]
            speedups = [
                _trials(colds[r["seed"]]["trials_to_90pct_cold"], trials)
                / _trials(r["trials_to_90pct_cold"], trials)
                for r in these
            ]
            med = [
                f"{statistics.median(float(r[f'best@{n}']) for r in these):.0f}"
                if all(r.get(f"best@{n}") for r in these)
                else "–"
                for n in reported
            ]
            needed = statistics.median(_trials(r["trials_to_90pct_cold"], trials) for r in these)
            lines.append(
                _label(pair, model, model_col)
                + f" {mode} | "
                + " | ".join(med)
                + f" | {shown_count(needed, trials)} | {statistics.median(speedups):.2f} |"
            )
    seeds = sorted({r["seed"] for r in rows})
    lines.append("")
    lines.append(
        f"Found while tuning; medians over seeds {', '.join(seeds)}. A level not reached within "
        f"{trials} trials counts as {trials + 1}, so a speed-up against it is a lower bound."
    )
    return "\n".join(lines)


def retimed_table(rows: list[dict], trials: int) -> str:
    """Median (and every seed's) re-timed winner at each checkpoint, and the vendor's."""
    model_col = any(r.get("cost_model") for r in rows)
    reported = checkpoints(trials)
    head = " | ".join(f"re-timed @{n} (per seed)" for n in reported)
    lines = [
        "| pair |" + (" cost model |" if model_col else "") + f" mode | {head} | vendor |",
        "|---|" + ("---|" if model_col else "") + "---|" * (len(reported) + 2),
    ]
    for pair, model, ours in _groups(rows):
        for mode in dict.fromkeys(r["mode"] for r in ours):
            these = sorted((r for r in ours if r["mode"] == mode), key=lambda r: int(r["seed"]))
            cells = []
            for n in reported:
                values = [float(r[f"retimed@{n}"]) for r in these if r.get(f"retimed@{n}")]
                seeds = "/".join(f"{v:.0f}" for v in values)
                cells.append(f"{statistics.median(values):.0f} ({seeds})" if values else "–")
            vendors = [float(r["retimed_vendor"]) for r in these if r.get("retimed_vendor")]
            vendor = f"{statistics.median(vendors):.0f}" if vendors else "–"
            lines.append(
                _label(pair, model, model_col) + f" {mode} | {' | '.join(cells)} | {vendor} |"
            )
    lines.append("")
    lines.append(
        "GFLOP/s of each study's best among its first n trials, re-timed after tuning "
        "interleaved with the pair's other modes and the vendor library (median of the rounds)."
    )
    return "\n".join(lines)


def pooled(rows: list[dict], mode: str, n: int, versus: str = "cold") -> dict[str, float] | None:
    """`geomean_interval` of `mode` ÷ the mode `versus` (default cold), re-timed at `n`
    trials, over the seed pairs of `rows` (same pair, cost model and seed)."""
    bases = {
        (r["pair"], r.get("cost_model", ""), r["seed"]): r for r in rows if r["mode"] == versus
    }
    logs = []
    for row in rows:
        base = bases.get((row["pair"], row.get("cost_model", ""), row["seed"]))
        if row["mode"] == mode and base and row.get(f"retimed@{n}") and base.get(f"retimed@{n}"):
            logs.append(math.log(float(row[f"retimed@{n}"]) / float(base[f"retimed@{n}"])))
    return geomean_interval(logs)


def ratio_table(rows: list[dict], trials: int, versus: str = "cold") -> str:
    """Each other mode ÷ the mode `versus` (default cold; re-timed), pooled per pair, per kind
    of pair and over all. Against a warm mode, cold is left out (its ratio is in the table
    against cold)."""
    reported = checkpoints(trials)
    modes = [m for m in dict.fromkeys(r["mode"] for r in rows) if m not in (versus, "cold")]
    models = list(dict.fromkeys(r.get("cost_model", "") for r in rows))
    head = [
        "cost model",
        "mode",
        "pairs of",
        "seed pairs",
        *(f"÷ {versus} @{n} [95 %]" for n in reported),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in models:
        mine = [r for r in rows if r.get("cost_model", "") == model]
        scopes = [
            (p, [r for r in mine if r["pair"] == p]) for p in dict.fromkeys(r["pair"] for r in mine)
        ]
        kinds = dict.fromkeys(r.get("kind", "") for r in mine)
        scopes += [(f"all {k}", [r for r in mine if r.get("kind", "") == k]) for k in kinds if k]
        scopes.append(("all", mine))
        for mode in modes:
            for scope, these in scopes:
                found = [pooled(these, mode, n, versus) for n in reported]
                count = max((f["pairs"] for f in found if f), default=0)
                if count:
                    cells = [
                        model or UNLABELLED_MODEL,
                        mode,
                        scope,
                        f"{count:.0f}",
                        *(ratio_cell(f) for f in found),
                    ]
                    lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Geometric mean of the re-timed winner of each mode ÷ the {versus} study's (same pair, "
        "cost model and seed), with the 2.5-97.5 % percentiles of bootstrap resamples of the "
        "pairs."
    )
    return "\n".join(lines)


def trials_to_known(
    rows: list[dict], by_study: dict[tuple, list[dict]], trials: int
) -> dict[tuple, int]:
    """Per study (pair, cost model, mode, seed): the first trial whose best so far reaches 90 %
    of the best known for its target (the best any study of that target found), else
    ``trials + 1``. `by_study`: the curves per study in trial order (`curves_by_study`)."""
    targets = {r["pair"]: r["target"] for r in rows}
    known: dict[str, float] = {}
    for key, study in by_study.items():
        target = targets[key[0]]
        known[target] = max(known.get(target, 0.0), *(float(c["best_gflops"]) for c in study))
    return {
        key: next(
            (
                i + 1
                for i, c in enumerate(study)
                if float(c["best_gflops"]) >= 0.9 * known[targets[key[0]]]
            ),
            trials + 1,
        )
        for key, study in by_study.items()
    }


def known_table(rows: list[dict], known: dict[tuple, int], trials: int) -> str:
    """Median trials to 90 % of the best known per kind of pair: cold, each warm mode, and
    how many times fewer the warm mode needed."""
    kinds = {r["pair"]: r.get("kind", "") for r in rows}
    modes = [m for m in dict.fromkeys(r["mode"] for r in rows) if m != "cold"]
    lines = [
        "| cost model | pairs of | mode | studies | median trials (per study) | cold ÷ this (×) |",
        "|---|---|---|---|---|---|",
    ]
    for model in dict.fromkeys(k[1] for k in known):
        for kind in dict.fromkeys(kinds.values()):
            cold = _median_trials(known, kinds, model, kind, "cold")
            if cold is None:
                continue
            shown = f"{shown_count(cold[0], trials)} ({cold[2]})"
            lines.append(f"| {model or 'xgb'} | {kind} | cold | {cold[1]} | {shown} | 1.00 |")
            for mode in modes:
                found = _median_trials(known, kinds, model, kind, mode)
                if found:
                    lines.append(
                        f"| {model or 'xgb'} | {kind} | {mode} | {found[1]} | "
                        f"{shown_count(found[0], trials)} ({found[2]}) | {cold[0] / found[0]:.2f} |"
                    )
    lines.append("")
    lines.append(
        "Trials until the best so far reached 90 % of the best any study of the target found "
        f"(while tuning); one that never did counts as {trials + 1}, so ratios against it are "
        "bounds."
    )
    return "\n".join(lines)


def _median_trials(
    known: dict[tuple, int], kinds: dict[str, str], model: str, kind: str, mode: str
) -> tuple[float, int, str] | None:
    values = [
        n
        for (pair, m, md, _), n in known.items()
        if m == model and md == mode and kinds[pair] == kind
    ]
    if not values:
        return None
    return statistics.median(values), len(values), "/".join(str(v) for v in values)


def goals_table(rows: list[dict], known: dict[tuple, int], trials: int) -> str:
    """Issue 20's goals, met or not, with their numbers."""
    lines = ["| goal (issue 20) | verdict | numbers |", "|---|---|---|"]
    losses, compared = [], 0
    for pair, model, ours in _groups(rows):
        for n in (n for n in CHECKPOINTS if n <= trials):  # the goal's, not the longer ones'
            cold = [
                float(r[f"retimed@{n}"])
                for r in ours
                if r["mode"] == "cold" and r.get(f"retimed@{n}")
            ]
            warm = [
                float(r[f"retimed@{n}"])
                for r in ours
                if r["mode"] == "warm" and r.get(f"retimed@{n}")
            ]
            if cold and warm:
                compared += 1
                a, b = statistics.median(warm), statistics.median(cold)
                if a < b:
                    losses.append(f"{pair}{' ' + model if model else ''} @{n} {a:.0f} < {b:.0f}")
    missing = [n for n in CHECKPOINTS if n > trials]
    verdict = NOT_MEASURED if not compared else (MET if not losses and not missing else NOT_MET)
    numbers = f"{compared - len(losses)} of {compared} (pair, checkpoint) medians held"
    if losses:
        numbers += "; behind: " + ", ".join(losses)
    if missing:
        numbers += f"; {', '.join(map(str, missing))} trials not run"
    name = "Warm ≥ cold, median re-timed, every pair at 16/32/64/128 trials"
    lines.append(f"| {name} | {verdict} | {numbers} |")
    kinds = {r["pair"]: r.get("kind", "") for r in rows}
    for kind, goal in SPEEDUP_GOALS.items():
        for model in dict.fromkeys(k[1] for k in known):
            cold_trials = _median_trials(known, kinds, model, kind, "cold")
            warm_trials = _median_trials(known, kinds, model, kind, "warm")
            name = (
                f"Trials to 90 % of best known ≥ {goal:g}x fewer than cold across {kind} "
                f"({model or 'xgb'})"
            )
            if not (cold_trials and warm_trials):
                lines.append(f"| {name} | {NOT_MEASURED} | no pair of this kind in the run |")
                continue
            ratio = cold_trials[0] / warm_trials[0]
            verdict = MET if ratio >= goal else NOT_MET
            lines.append(
                f"| {name} | {verdict} | {ratio:.2f}x: median "
                f"{shown_count(warm_trials[0], trials)} warm against "
                f"{shown_count(cold_trials[0], trials)} cold ({warm_trials[1]} studies) |"
            )
    return "\n".join(lines)


def _plot(out: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    curves = read_csv(os.path.join(out, "transfer_curves.csv"))
    targets = {r["pair"]: r["target"] for r in read_csv(os.path.join(out, "transfer.csv"))}
    pairs = list(targets)
    fig, axes = plt.subplots(2, (len(pairs) + 1) // 2, figsize=(4.2 * ((len(pairs) + 1) // 2), 7))
    series = dict.fromkeys((c.get("cost_model", ""), c["mode"]) for c in curves)
    for ax, pair in zip(axes.flat, pairs, strict=False):
        for model, mode in series:
            by_seed: dict[str, list[float]] = {}
            for c in curves:
                if (c["pair"], c.get("cost_model", ""), c["mode"]) == (pair, model, mode):
                    by_seed.setdefault(c["seed"], []).append(float(c["best_gflops"]))
            if not by_seed:
                continue
            n = min(len(v) for v in by_seed.values())
            x = list(range(1, n + 1))
            label = f"{model} {mode}".strip()
            draw_band(ax, x, [[v[i] for v in by_seed.values()] for i in range(n)], label, 0.15)
        ax.set_title(f"{pair} (target {targets[pair]})", fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(pairs) :]:  # an odd number of pairs leaves one empty
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "transfer.png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the folder with transfer.csv")
    parser.add_argument("--trials", type=int, default=None,
                        help="trials per study (default: the studies' own, read from "
                        "transfer_curves.csv)")  # fmt: skip
    parser.add_argument("--merge", nargs="+", default=None, metavar="FOLDER",
                        help="first write the rows of these runs' folders (other pairs, one "
                        "machine) together to --out (default: report --out as it is)")  # fmt: skip
    parser.add_argument("--versus", nargs="+", default=[], metavar="MODE",
                        help="also divide every other warm mode by each of these (default: "
                        "only by cold)")  # fmt: skip
    args = parser.parse_args()
    # Checked before a merge writes anything.
    found = [os.path.join(f, "transfer.csv") for f in args.merge or [args.out]]
    modes = {r["mode"] for path in found if os.path.isfile(path) for r in read_csv(path)}
    unknown = [m for m in args.versus if m not in modes - {"cold"}]
    if unknown:
        parser.error(f"--versus {unknown[0]}: the rows hold no such warm mode "
                     f"(they hold {', '.join(sorted(modes - {'cold'})) or 'none'})")  # fmt: skip
    if args.merge:
        try:
            merge(args.merge, args.out)
        except ValueError as error:
            parser.error(str(error))
    paths = [os.path.join(args.out, name) for name in ("transfer.csv", "transfer_curves.csv")]
    if not all(os.path.isfile(p) for p in paths):
        parser.error(f"{args.out} holds no transfer.csv and transfer_curves.csv")
    trials = args.trials
    if trials is None:
        try:
            trials = study_trials(read_csv(paths[1]))
        except ValueError as error:
            parser.error(str(error))
    report(args.out, trials, tuple(args.versus))


if __name__ == "__main__":
    main()
