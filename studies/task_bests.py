"""Our best kernel of each task against MetaSchedule's best of the same task, both timed alone
in one process, round-robin, as tuning times a kernel (`in_model_gap.alone_seconds`): whether
MetaSchedule's build is ahead because its search found faster kernels or because the two
timed theirs differently.

    python studies/task_bests.py --storage sqlite:///<work>/resnet18-tensortune-channels-last.db \
        --metaschedule <work>/resnet18-ms-channels-last --channels-last --out F.csv
    python studies/task_bests.py --storage sqlite:///<work>/resnet18-tensortune-channels-last.db \
        --versus sqlite:///<work>/resnet18-channels-last-shared.db --channels-last --out F.csv

The storage holds a finished `model_tuning.py` run's task studies, the folder MetaSchedule's
database of the same tasks (``model_tuning.py --metaschedule-arms``), or ``--versus`` another
arm's task studies of the same tasks in place of MetaSchedule's; nothing is tuned, and each
side's best is the one its whole run found. Writes one row per task: weight, each side's µs as
its run recorded it and as timed here (median of the rounds, all calls of a model run), and
ours ÷ the other side's time (columns ``ms_...`` for MetaSchedule, ``versus_...`` for another
arm), with the trials each side had measured of the task; prints the sums. ``--budget N``
compares the kernels each side had found when the model's budget reached N trials (ours as
`model_tuning.studies_up_to` cuts the studies back, MetaSchedule's from the ``first-N`` folder
its `model_tuning.py` run of that budget left), where the whole runs differ from their builds at
N.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

from in_model_gap import add_run_arguments, alone_seconds, built_kernel, run_studies
from model_tuning import studies_up_to
from results_io import write_csv

from tensortune.model.database import best_config
from tensortune.model.tuning import load_task_study
from tensortune.storage import open_storage
from tensortune.target import make_target

#: Rounds of the side-by-side timing; each reading is `alone_seconds`'s median.
ROUNDS = 5


def metaschedule_best(func: Any, database: Any, target: dict) -> tuple[Any, float, int] | None:
    """MetaSchedule's best kernel for `func` in its `database` (a ``JSONDatabase``), compiled,
    the mean seconds its run recorded for it and its records of `func`; None where the
    database has no record of it."""
    import tvm

    mod = tvm.IRModule({"main": func})
    if not database.has_workload(mod):
        return None
    records = database.get_top_k(database.commit_workload(mod), 1 << 20)
    if not records:
        return None
    schedule = database.query_schedule(mod, make_target(target), workload_name="main")
    seconds = statistics.fmean(float(s) for s in records[0].run_secs)
    return tvm.compile(schedule.mod, target=make_target(target)).jit(), seconds, len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_run_arguments(parser)
    other = parser.add_mutually_exclusive_group(required=True)
    other.add_argument("--metaschedule", help="MetaSchedule's work folder")
    other.add_argument(
        "--versus",
        metavar="STORAGE",
        help="another arm's task studies of the same tasks (an Optuna URL)",
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"default {ROUNDS}")
    parser.add_argument("--budget", type=int, default=None,
                        help="each side's kernels as they stood at this many of the model's "
                        "trials (default: the whole runs')")  # fmt: skip
    args = parser.parse_args()
    if args.budget is not None and args.budget < 1:
        parser.error("--budget must be at least 1")
    if args.metaschedule is not None and args.budget is not None:
        args.metaschedule = os.path.join(args.metaschedule, f"first-{args.budget}")
    if args.metaschedule is not None and not os.path.isdir(args.metaschedule):
        parser.error(f"--metaschedule {args.metaschedule}: no such folder")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    _, _, tuning = run_studies(args)
    studies = cut(tuning.studies, args.budget)
    peer = other_best(args, tuning)
    pairs = []
    for index, (task, study) in enumerate(zip(tuning.tasks, studies, strict=True)):
        found = best_config(study)
        if found is None:  # no kernel of ours: the other side's is not compiled either
            continue
        theirs = peer(index)
        if theirs is None:
            continue
        ours, arrays = built_kernel(task, found[0], tuning.target)
        pairs.append((task, (found[1], measured(study)), ours, theirs, arrays))
    readings: dict[str, tuple[list[float], list[float]]] = {t.name: ([], []) for t, *_ in pairs}
    for _ in range(args.rounds):
        for task, _, ours, (theirs, *_), arrays in pairs:
            readings[task.name][0].append(alone_seconds(ours, arrays))
            readings[task.name][1].append(alone_seconds(theirs, arrays))
    side = "ms" if args.metaschedule is not None else "versus"
    rows = []
    for task, (recorded, trials), _, (_, recorded_other, trials_other), _ in pairs:
        ours_s, theirs_s = (statistics.median(r) for r in readings[task.name])
        rows.append({
            "task": task.name, "weight": task.weight,
            "ours_trials": trials, f"{side}_trials": trials_other,
            "ours_recorded_us": round(recorded * task.weight * 1e6, 1),
            f"{side}_recorded_us": round(recorded_other * task.weight * 1e6, 1),
            "ours_us": round(ours_s * task.weight * 1e6, 1),
            f"{side}_us": round(theirs_s * task.weight * 1e6, 1),
            f"ours_over_{side}": round(ours_s / theirs_s, 3),
        })  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out, rows)

    def total(key: str) -> float:
        return sum(r[key] for r in rows) / 1e3

    shown = "MetaSchedule's" if side == "ms" else "the other arm's"
    print(f"{len(rows)} tasks: ours {total('ours_us'):.2f} ms timed here "
          f"({total('ours_recorded_us'):.2f} as recorded), {shown} "
          f"{total(f'{side}_us'):.2f} ms ({total(f'{side}_recorded_us'):.2f} as "
          "recorded)")  # fmt: skip


def cut(studies: list, budget: int | None) -> list:
    """`studies` as they stood at `budget` of the model's trials (`studies_up_to`); all of
    them for None."""
    return list(studies) if budget is None else studies_up_to(studies, budget)


def measured(study: Any) -> int:
    """Trials of `study` with a measured time."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get("cost_s"))


def other_best(
    args: argparse.Namespace, tuning: Any
) -> Callable[[int], tuple[Any, float, int] | None]:
    """For the task at an index of `tuning`, the other side's best kernel, compiled, the
    seconds its run recorded for it and its measured trials of the task (None where it has
    none): MetaSchedule's (``--metaschedule``, that folder's database) or another arm's
    (``--versus``, its studies of the same task names, cut back to ``--budget``)."""
    if args.metaschedule is not None:
        from tvm.s_tir import meta_schedule as ms

        database = ms.database.JSONDatabase(work_dir=args.metaschedule)  # read once
        return lambda i: metaschedule_best(
            tuning.tasks[i].workload().prim_func(), database, tuning.target
        )
    # The same model and layout give the same tasks, so the same study names: no second
    # extraction of the model's tasks.
    storage = open_storage(args.versus, must_exist=True)
    studies = cut([load_task_study(storage, name) for name in tuning.study_names], args.budget)

    def arm_best(i: int) -> tuple[Any, float, int] | None:
        found = best_config(studies[i])  # None for a task the arm has no study of
        if found is None:
            return None
        kernel = built_kernel(tuning.tasks[i], found[0], tuning.target)[0]
        return kernel, found[1], measured(studies[i])

    return arm_best


if __name__ == "__main__":
    main()
