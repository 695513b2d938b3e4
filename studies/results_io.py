"""Reading and writing study results, shared by the scripts in this folder."""

from __future__ import annotations

import csv
import os
import statistics
from typing import Any

import optuna


def write_csv(path: str, rows: list[dict]) -> None:
    """Write `rows` to `path`, creating its folder. The columns are every key of the rows in
    the order first met (runs of different lengths merged have different checkpoints), blank
    where a row lacks one."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str) -> list[dict]:
    """The rows of a CSV written by `write_csv` (values as strings)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def best_so_far(study: optuna.Study, **labels: object) -> list[dict]:
    """One row per trial in order: `labels`, the trial's GFLOP/s ('' if it failed), the best
    so far, its state and the seconds from the study's first start to its completion."""
    trials = sorted(study.trials, key=lambda t: t.number)
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    origin = min(starts) if starts else None
    out, best = [], 0.0
    for trial in trials:
        if trial.value is not None:
            best = max(best, trial.value)
        end = trial.datetime_complete
        elapsed = (end - origin).total_seconds() if end is not None and origin else ""
        out.append(
            {
                **labels,
                "trial": trial.number + 1,
                "gflops": round(trial.value, 3) if trial.value is not None else "",
                "best_gflops": round(best, 3),
                "state": trial.state.name,
                "elapsed_s": round(elapsed, 2) if elapsed != "" else "",
            }
        )
    return out


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None (with a message) when
    matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return None
    return plt


def draw_band(ax: Any, x: list, values: list[list[float]], label: str, alpha: float) -> None:
    """The median of `values` (one list per x) as a line, and their min-max as a band."""
    ax.plot(x, [statistics.median(v) for v in values], label=label, lw=1.4)
    ax.fill_between(x, [min(v) for v in values], [max(v) for v in values], alpha=alpha)
