"""The best kernel of every task as a MetaSchedule database, which TVM's Relax build applies.

Each task's best config is replayed in its design space (`MetaScheduleTemplate.apply`) and the
resulting trace is committed as one tuning record of the task's function, with the seconds its
trial measured. The files are MetaSchedule's JSON database (``database_workload.json`` and
``database_tuning_record.json`` in one folder), readable by ``ms.database.JSONDatabase``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import optuna

from tensortune.errors import TensortuneError
from tensortune.model.tasks import ModelTask
from tensortune.storage import best_summary

WORKLOADS_FILE = "database_workload.json"
RECORDS_FILE = "database_tuning_record.json"


def best_config(study: optuna.Study | None) -> tuple[dict[str, Any], float] | None:
    """The best complete trial's config and measured seconds (`best_summary`); None without
    one."""
    if study is None:
        return None
    try:
        summary = best_summary(study)
    except TensortuneError:  # no completed trial yet
        return None
    return summary["config"], float(summary["seconds"] or 1.0)


def write_database(
    tasks: Sequence[ModelTask],
    studies: Sequence[optuna.Study | None],
    target: dict[str, Any],
    folder: str,
    picks: Sequence[Any] | None = None,
) -> int:
    """Write the best config of each task's study (one per task, None for an untuned task)
    into MetaSchedule's JSON database in `folder` (replacing one there); returns how many
    tasks got a record. A task whose space has no knobs gets its single schedule.

    `picks` (default None: none) holds, per task, a `tensortune.model.finalists.Pick` to
    write instead of its study's best, or None to keep that."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tensortune.target import make_target
    from tensortune.templates.metaschedule import MetaScheduleTemplate

    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, name) for name in (WORKLOADS_FILE, RECORDS_FILE)]
    for path in paths:
        if os.path.exists(path):
            os.remove(path)
    database = ms.database.JSONDatabase(path_workload=paths[0], path_tuning_record=paths[1])
    tvm_target = make_target(target)
    written = 0
    chosen = list(picks) if picks is not None else [None] * len(tasks)
    for task, study, pick in zip(tasks, studies, chosen, strict=True):
        template = MetaScheduleTemplate(task.workload(), target)
        found = (pick.config, pick.seconds) if pick is not None else best_config(study)
        if found is None and template.knobs:
            continue  # never tuned: the build keeps TVM's own schedule of it
        config, seconds = found if found is not None else ({}, 1.0)
        schedule = template.apply(config)
        func = schedule.mod["main"]
        workload = database.commit_workload(tvm.IRModule({"main": task.workload().prim_func()}))
        record = ms.database.TuningRecord(
            schedule.trace,
            workload,
            [seconds],
            tvm_target,
            ms.arg_info.ArgInfo.from_prim_func(func),
        )
        database.commit_tuning_record(record)
        written += 1
    return written
