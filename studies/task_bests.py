"""Our best kernel of each task against MetaSchedule's best of the same task, both timed alone
in one process, round-robin, as tuning times a kernel (`in_model_gap.alone_seconds`): whether
MetaSchedule's build is ahead because its search found faster kernels or because the two
timed theirs differently.

    python studies/task_bests.py --storage sqlite:///<work>/resnet18-tensortune-channels-last.db \
        --metaschedule <work>/resnet18-ms-channels-last --channels-last --out F.csv

The storage holds a finished `model_tuning.py` run's task studies, the folder MetaSchedule's
database of the same tasks (``model_tuning.py --metaschedule-arms``); nothing is tuned, and
each side's best is the one its whole run found. Writes one row per task: weight, each side's
µs as its run recorded it and as timed here (median of the rounds, all calls of a model run),
and ours ÷ MetaSchedule's time; prints the sums.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from in_model_gap import add_run_arguments, alone_seconds, built_kernel, run_studies
from results_io import write_csv

from tensortune.model.database import best_config
from tensortune.target import make_target

#: Rounds of the side-by-side timing; each reading is `alone_seconds`'s median.
ROUNDS = 5


def metaschedule_best(func: Any, database: Any, target: dict) -> tuple[Any, float] | None:
    """MetaSchedule's best kernel for `func` in its `database` (a ``JSONDatabase``), compiled,
    and the mean seconds its run recorded for it; None where the database has no record of
    it."""
    import tvm

    mod = tvm.IRModule({"main": func})
    if not database.has_workload(mod):
        return None
    records = database.get_top_k(database.commit_workload(mod), 1)
    if not records:
        return None
    schedule = database.query_schedule(mod, make_target(target), workload_name="main")
    seconds = statistics.fmean(float(s) for s in records[0].run_secs)
    return tvm.compile(schedule.mod, target=make_target(target)).jit(), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_run_arguments(parser)
    parser.add_argument("--metaschedule", required=True, help="MetaSchedule's work folder")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"default {ROUNDS}")
    args = parser.parse_args()
    if not os.path.isdir(args.metaschedule):
        parser.error(f"--metaschedule {args.metaschedule}: no such folder")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    from tvm.s_tir import meta_schedule as ms

    _, _, tuning = run_studies(args)
    database = ms.database.JSONDatabase(work_dir=args.metaschedule)  # read once, for every task
    pairs = []
    for task, study in zip(tuning.tasks, tuning.studies, strict=True):
        found = best_config(study)
        if found is None:  # no kernel of ours: MetaSchedule's is not compiled either
            continue
        theirs = metaschedule_best(task.workload().prim_func(), database, tuning.target)
        if theirs is None:
            continue
        ours, arrays = built_kernel(task, found[0], tuning.target)
        pairs.append((task, found[1], ours, theirs, arrays))
    readings: dict[str, tuple[list[float], list[float]]] = {t.name: ([], []) for t, *_ in pairs}
    for _ in range(args.rounds):
        for task, _, ours, (theirs, _), arrays in pairs:
            readings[task.name][0].append(alone_seconds(ours, arrays))
            readings[task.name][1].append(alone_seconds(theirs, arrays))
    rows = []
    for task, recorded, _, (_, recorded_ms), _ in pairs:
        ours_s, theirs_s = (statistics.median(r) for r in readings[task.name])
        rows.append({
            "task": task.name, "weight": task.weight,
            "ours_recorded_us": round(recorded * task.weight * 1e6, 1),
            "ms_recorded_us": round(recorded_ms * task.weight * 1e6, 1),
            "ours_us": round(ours_s * task.weight * 1e6, 1),
            "ms_us": round(theirs_s * task.weight * 1e6, 1),
            "ours_over_ms": round(ours_s / theirs_s, 3),
        })  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out, rows)

    def total(key: str) -> float:
        return sum(r[key] for r in rows) / 1e3

    print(f"{len(rows)} tasks: ours {total('ours_us'):.2f} ms timed here "
          f"({total('ours_recorded_us'):.2f} as recorded), MetaSchedule's "
          f"{total('ms_us'):.2f} ms ({total('ms_recorded_us'):.2f} as recorded)")  # fmt: skip


if __name__ == "__main__":
    main()
