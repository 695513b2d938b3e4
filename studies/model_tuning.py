"""Whole models end to end (issue 22): tensortune's tune-model against PyTorch eager,
``torch.compile``, ONNX Runtime, TVM's untuned build and MetaSchedule's ``tune_relax``.

For each model (``model_zoo.py``: ResNet-18 at batch 1, 224x224; one BERT-base encoder layer at
sequence 128; random weights) and each budget, ours tunes through `tensortune.model.tune_model`
(the same task studies, resumed from one budget to the next) and MetaSchedule runs
``tune_relax``'s own steps (task extraction, gradient task scheduler, evolutionary search,
XGBoost) once for the largest budget, each smaller budget built from the records a run of
that many trials would have measured, and timed where that run would have stopped. Every
built model and every framework is then timed round-robin over ``--rounds`` rounds, so that
drift hits all alike, in each of ``--timings`` fresh processes one after another
(`model_timing.time_in_processes`), so that a difference between processes shows in the
readings too; each build's outputs are checked against PyTorch eager.

A killed run goes on where it stopped when run again with the same ``--work``: our task studies
resume, MetaSchedule's finished database is built again without tuning (a half-tuned one is
started again), each finished (system, budget)'s tuning seconds are kept in
``<model>-seconds.json`` with the storage they were tuned in (`Ledger`), and a model timed to
the end is read back from ``<model>-results-<key>.json`` (`run_key`: the budgets and the
systems). Our seconds of a budget cut by the kill count from the rerun only. Writes under
``--out`` (default ``studies/results/models/``):

- ``model_tuning.csv``: per model, system and budget: median latency, ×eager, tuning seconds;
- ``model_tasks.csv``: per model and task of our profiled arm (channels-last where the run has
  it, else the packed one, else the plain one; `profiled_arm`): weight, TVM's untuned kernel
  alone, our best as its study recorded it while tuning, and our best in the model, in µs;
- ``model_time_split.csv``: per model, that arm's build and MetaSchedule's of the same tasks at
  the largest budget: a run's ms in the tuned kernels, in other calls and in the VM between
  calls (`kernel_profile`);
- ``model_tuning_summary.md``: both, and issue 22's goals.

    python studies/model_tuning.py                                  # both models, 500 1000 2000
    python studies/model_tuning.py --models resnet18 --budgets 500 --no-metaschedule
    python studies/model_tuning.py --quick --out /tmp/q             # a tiny CNN, 8 and 16 trials
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import itertools
import json
import os
import shutil
import tempfile
import time
from typing import Any, NamedTuple

import model_zoo
import numpy as np
import optuna
from kernel_profile import in_model_name, kernel_times_in_turns, where_time_goes
from metaschedule_peer import fast_build, import_tensor_intrinsics
from model_timing import ROUNDS, TIMINGS, medians, time_in_processes
from results_io import write_csv

from tensortune.measure import MeasureSettings
from tensortune.measure.settings import CACHE_STATES, COLD_REPEAT, cache_settings
from tensortune.model import build, check_outputs, from_torch, run, tune_model
from tensortune.model.database import write_database
from tensortune.model.finalists import pick_finalists
from tensortune.model.tasks import CPU_REWRITES, NO_REWRITES, Rewrites, task_passes
from tensortune.model.tuning import ModelTuning, task_state
from tensortune.target import make_target, target_spec
from tensortune.trial_records import timed_cache

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGETS = (500, 1000, 2000)


def metaschedule_tune(
    program: Any,
    target: dict,
    budgets: list[int],
    work_dir: str,
    seed: int,
    rewrites: Rewrites = NO_REWRITES,
    population: int = 512,
    per_iter: int | None = None,
) -> dict[int, float]:
    """MetaSchedule's ``tune_relax`` steps, run once for the largest of `budgets` with our build
    threads and its own runner; returns the seconds at which each budget's run would have
    stopped, counted from the start of task extraction, and leaves its database and the record
    count of each budget (``milestones.json``) in `work_dir`.

    One run stands for every budget: its task scheduler stops after the batch that reaches
    ``max_trials_global`` and picks each next task from the history alone (a task's cap is the
    whole budget), so the batches up to the one that reaches `b` are what a run of `b` trials
    measures (to within one batch: a finished batch is read when the scheduler next joins it);
    `metaschedule_build` builds the model from those records. Its tasks are extracted with
    `rewrites` as ours are (default none); with weight packing, that is the weights marked
    layout-free, as ``static_shape_tuning_pipeline``'s ``cpu_weight_prepack`` does.
    `population` is its evolutionary search's (default 512, its own default; ``--quick`` makes
    it small, as each of its batches searches that many candidates per task). `per_iter` is
    its trials per task and batch (default None: as many as let its first visit of every task
    take at most half the smallest budget, at most 64; ``--quick`` sets 4, since each batch
    starts its build processes afresh, seconds apiece)."""
    import logging

    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    start = time.perf_counter()
    import_tensor_intrinsics()
    reached: dict[int, tuple[float, int]] = {}

    @derived_object
    class Milestones(ms.measure_callback.PyMeasureCallback):
        """Seconds and records at the end of the batch that reaches each budget."""

        def __init__(self) -> None:
            self.count = 0

        def apply(self, task_scheduler, task_id, candidates, builds, runs) -> None:
            self.count += len(runs)
            for budget in budgets:
                if budget not in reached and self.count >= budget:
                    reached[budget] = (time.perf_counter() - start, self.count)

    # Its per-task tables and XGBoost iterations still go to work_dir/logs.
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    tvm_target = make_target(target)
    with tvm_target:
        fused = tvm.transform.Sequential(task_passes(tvm_target, rewrites))(program.mod)
    extracted = ms.relax_integration.extract_tasks(fused, tvm_target)
    search = ms.search_strategy.EvolutionarySearch(
        population_size=population, init_min_unmeasured=min(50, population)
    )
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted, work_dir, strategy=search, seed=seed, num_threads=int(target.get("num-cores", 2))
    )
    evaluator = ms.runner.EvaluatorConfig(number=1, repeat=3, min_repeat_ms=30)
    # Its scheduler visits every task once, a batch each, before it follows the gradient: with
    # its default 64 a batch, ResNet-18's 18 tasks need 1152 trials, and a 500-trial run left 10
    # of them at TVM's default schedule (1000 ms a run). Batches sized so that the visit takes at
    # most half the smallest budget let it tune every task.
    if per_iter is None:
        per_iter = max(1, min(64, budgets[0] // (2 * len(contexts))))
    callbacks = ms.measure_callback.MeasureCallback.create("default")
    milestones = Milestones()
    ms.tune.tune_tasks(
        tasks=contexts,
        task_weights=weights,
        work_dir=work_dir,
        max_trials_global=max(budgets),
        num_trials_per_iter=per_iter,
        builder=ms.builder.LocalBuilder(max_workers=2, f_build=fast_build),
        runner=ms.runner.LocalRunner(evaluator_config=evaluator),
        measure_callbacks=[*callbacks, milestones],
    )
    # A search that ran out of candidates before a budget stopped there.
    end = (time.perf_counter() - start, milestones.count)
    reached = {budget: reached.get(budget, end) for budget in budgets}
    with open(os.path.join(work_dir, "milestones.json"), "w") as f:
        json.dump({str(b): records for b, (_, records) in reached.items()}, f)
    return {budget: seconds for budget, (seconds, _) in reached.items()}


def metaschedule_build(
    program: Any, target: dict, work_dir: str, budget: int, rewrites: Rewrites = NO_REWRITES
) -> Any:
    """The model built with the records that `metaschedule_tune`'s run in `work_dir` had
    measured when a run of `budget` trials would have stopped (its database appends records in
    the order they were measured); with `rewrites` (default none), a run of those, built as
    ours are with them."""
    from tvm.s_tir import meta_schedule as ms

    with open(os.path.join(work_dir, "milestones.json")) as f:
        count = json.load(f)[str(budget)]
    folder = os.path.join(work_dir, f"first-{budget}")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(os.path.join(work_dir, "database_workload.json"), folder)
    with open(os.path.join(work_dir, "database_tuning_record.json")) as f:
        records = f.readlines()[:count]
    with open(os.path.join(folder, "database_tuning_record.json"), "w") as f:
        f.writelines(records)
    if rewrites.names():
        return build(program, target, folder, rewrites)
    database = ms.database.JSONDatabase(work_dir=folder)
    return ms.relax_integration.compile_relax(database, program.mod, make_target(target), None)


def task_rows(name: str, system: str, tuning: ModelTuning, inputs_seed: int = 0) -> list[dict]:
    """Per task of our arm `system`: its weight, TVM's untuned kernel timed alone now, and our
    best as its study recorded it while tuning, in µs."""
    import tvm

    rows = []
    rng = np.random.default_rng(inputs_seed)
    for task, study in zip(tuning.tasks, tuning.studies, strict=True):
        workload = task.workload()
        func = workload.prim_func()
        arrays = [
            tvm.runtime.tensor(rng.uniform(-1, 1, s).astype(d) if inp else np.zeros(s, d))
            for s, d, inp in workload.argument_specs()
        ]
        module = tvm.compile(func, target=make_target(tuning.target)).jit()
        untuned = module.time_evaluator("main", tvm.cpu(), min_repeat_ms=50, repeat=3)(*arrays)
        state = task_state(task, study)
        rows.append({
            "model": name, "system": system, "task": task.name, "weight": task.weight,
            "untuned_us": round(untuned.median * 1e6, 1),
            "tuned_us": round(state.best * 1e6, 1) if study is not None and state.trials else "",
            "trials": state.trials,
        })  # fmt: skip
    return rows


class Ledger:
    """Tuning seconds by key (``system@budget``) in a JSON file, each with the storage its
    studies (or MetaSchedule's work folder) are in, written as soon as it is known.

    An entry of another storage is no entry: an arm whose studies moved to a new storage
    under an old name is tuned and timed afresh, not read back with the old studies' seconds
    (on 2026-12-07 the new default's arm got the old default's that way). Files written
    before then hold bare seconds, with no storage; those are read back for any storage."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: dict[str, Any] = {}  # key -> {"seconds", "storage"} or bare seconds
        if os.path.exists(path):
            with open(path) as f:
                self.entries = json.load(f)

    def get(self, key: str, storage: str) -> float | None:
        """The seconds recorded for `key` in `storage`, or None where there are none."""
        entry = self.entries.get(key)
        if isinstance(entry, dict):
            return float(entry["seconds"]) if entry["storage"] == storage else None
        return None if entry is None else float(entry)

    def record(self, key: str, seconds: float, storage: str) -> None:
        """Keep `seconds` for `key` in `storage`, replacing what the key held."""
        self.entries[key] = {"seconds": seconds, "storage": storage}
        with open(self.path + ".tmp", "w") as f:
            json.dump(self.entries, f, indent=1)
        os.replace(self.path + ".tmp", self.path)


class StudyUpTo:
    """A study as it stood when the model's budget reached some count: only the trials in
    `numbers`. It offers what `write_database` reads of a study (``study_name``,
    ``user_attrs``, ``get_trials``), so that a budget built after a larger one was tuned (a
    re-timing run) gets its own kernels, not the larger budget's."""

    def __init__(self, study: optuna.Study, numbers: set[int]) -> None:
        self.study, self.numbers = study, numbers
        self.study_name, self.user_attrs = study.study_name, study.user_attrs

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list:
        trials = self.study.get_trials(deepcopy=deepcopy, states=states)
        return [t for t in trials if t.number in self.numbers]


def studies_up_to(studies: list, budget: int) -> list:
    """`studies` (a model's task studies, None for an untuned task) as they stood after the
    first `budget` trials the model's budget counts (`task_state`'s), in the order they
    finished; the studies themselves where they hold no more."""
    from tensortune.trial_records import is_abandoned, is_finished, stale_among, study_trials

    counted = []
    for index, study in enumerate(studies):
        if study is None:
            continue
        finished = [t for t in study_trials(study) if is_finished(t)]
        stale = stale_among(study, finished)
        counted += [(t.datetime_complete, index, t.number) for t in finished
                    if not is_abandoned(t, stale)]  # fmt: skip
    if len(counted) <= budget:
        return list(studies)
    kept: dict[int, set[int]] = {}
    for _, index, number in sorted(counted)[:budget]:
        kept.setdefault(index, set()).add(number)
    return [
        None if study is None else StudyUpTo(study, kept.get(index, set()))
        for index, study in enumerate(studies)
    ]


class Arm(NamedTuple):
    """One arm of ours: its task studies, timing, rewrites, whether tasks warm-start (and from
    which tasks: ``tune_model``'s ``warm_sources``) and whether tasks of one design space share
    their best configs. Each arm says `warm_start`: the plain arms tune cold tasks, as every
    run before 2026-12-04 did, though ``tune_model`` now warm-starts them by default (the
    ``--warm-start-tasks`` arm)."""

    storage: str
    settings: MeasureSettings | None = None
    rewrites: Rewrites = NO_REWRITES
    warm_start: bool = False
    share_bests: bool = False
    warm_sources: str | None = None


#: Whether tune-model warm-starts its tasks by default, as ``--shipped``'s arm then does.
SHIPPED_WARM: bool = inspect.signature(tune_model).parameters["warm_start"].default
#: The system name of ``--shipped``'s arm: tune-model's default for a CPU (`arms`). Each
#: default has a name (and studies) of its own: packed NHWC Winograd warm-started (the
#: default on 2026-12-07 until that evening) and cold, since.
SHIPPED = "tensortune-shipped-winograd" + ("" if SHIPPED_WARM else "-cold")


def arms(name: str, args: argparse.Namespace) -> dict[str, Arm]:
    """Our arms of this run by system name, as the flags in `args` ask, each with its task
    studies in ``--work``."""
    # Ours in NCHW (users' default until channels-last became it; every earlier run's arm),
    # and (--cold-cache) tuned on timings with the weights flushed from the caches, in
    # studies of its own: side by side in the round-robin below.
    # (--prepack-weights) tuned with each weight packed once at build time, as ONNX Runtime
    # does, (--winograd) with Winograd convolutions and (--channels-last) with NHWC
    # convolutions (each packed too with --prepack-weights): other tasks, so studies of their
    # own.
    # (--warm-start-tasks) each task warm-started from the model's tasks of its kind (with
    # --channels-last, in NHWC, beside the direct NHWC arm); with --cold-cache too, also both
    # at once (NCHW).
    # (--share-bests) tasks of one design space handed each other's best configs, and
    # (--warm-start-twins) each task warm-started from those tasks' trials (both with
    # --channels-last, in NHWC).
    # (--no-plain) without the NCHW arm, for a run that asks about the other arms alone;
    # (--only-winograd) without the direct arms beside the Winograd one, likewise.
    direct = not getattr(args, "only_winograd", False)
    storage = f"sqlite:///{os.path.join(args.work, f'{name}.db')}"
    variants = {"tensortune": Arm(storage)} if args.plain else {}
    # The Winograd arm's rewrites: NHWC with --channels-last, packed with --prepack-weights.
    winograd = Rewrites(args.prepack_weights, True, channels_last=args.channels_last)
    # (--beside) other plain studies of this model, tuned by other code, say: timed beside;
    # (--beside-winograd) studies of its Winograd arm instead, (--beside-unpacked) unpacked
    # even with --prepack-weights: packing timed against none.
    # Each resumes in the cache state its studies were timed in (``--cache`` of their run).
    for label, url in dict(args.beside).items():
        rewrites = NO_REWRITES
        if args.beside_winograd:  # the Winograd arm's rewrites, less the packing if asked
            rewrites = winograd
            if args.beside_unpacked:
                rewrites = dataclasses.replace(winograd, prepack_weights=False)
        variants[f"tensortune-{label}"] = Arm(url, storage_settings(url), rewrites=rewrites)
    if args.cold_cache:
        cold = f"sqlite:///{os.path.join(args.work, f'{name}-cold.db')}"
        variants["tensortune-cold"] = Arm(cold, MeasureSettings(cache="flushed"))
    if args.prepack_weights and direct:
        packed = f"sqlite:///{os.path.join(args.work, f'{name}-prepacked.db')}"
        variants["tensortune-prepacked"] = Arm(packed, rewrites=Rewrites(prepack_weights=True))
    # (--winograd with --channels-last) the Winograd arm is NHWC, beside the direct NHWC arm.
    chosen = []
    if args.winograd:
        chosen.append(winograd)
    if args.channels_last and direct:
        chosen.append(Rewrites(args.prepack_weights, channels_last=True))
    for rewrites in chosen:
        layout = [n.replace("_", "-") for n in rewrites.names() if n != "prepack_weights"]
        system = "-".join(["tensortune", *layout])
        system += "-prepacked" if args.prepack_weights else ""
        url = f"sqlite:///{os.path.join(args.work, f'{name}-{system}.db')}"
        variants[system] = Arm(url, rewrites=rewrites)
        # (--warm-start-tasks with --winograd) the Winograd arm warm-started too.
        if rewrites.winograd and args.warm_start_tasks:
            url = f"sqlite:///{os.path.join(args.work, f'{name}-{system}-warm.db')}"
            variants[f"{system}-warm"] = Arm(url, rewrites=rewrites, warm_start=True)
    # (--prepack-weights) these arms are packed too, as the channels-last and Winograd ones.
    layout = "-channels-last" if args.channels_last else ""
    layout += "-prepacked" if args.prepack_weights else ""
    rewrites = Rewrites(args.prepack_weights, channels_last=args.channels_last)
    for wanted, suffix in (
        (args.warm_start_tasks, "warm"),
        (args.share_bests, "shared"),
        (args.warm_start_twins, "twins"),
    ):
        if wanted:
            url = f"sqlite:///{os.path.join(args.work, f'{name}{layout}-{suffix}.db')}"
            variants[f"tensortune{layout}-{suffix}"] = Arm(
                url,
                rewrites=rewrites,
                warm_start=suffix in ("warm", "twins"),
                share_bests=suffix == "shared",
                warm_sources="twins" if suffix == "twins" else None,
            )
    # (--shipped) the arm as tune-model ships for a CPU, whatever the flags above say: every
    # rewrite (packed, NHWC Winograd; since 2026-12-07), tasks warm-started or not as
    # tune_model's default, in studies of their own. Before, the shipped rewrites were NHWC
    # alone (direct convolutions, unpacked), warm-started: `tensortune-shipped`,
    # `<model>-shipped.db`. A name of its own, so that older work folders keep that arm's
    # studies and seconds.
    if getattr(args, "shipped", False):
        label = SHIPPED.removeprefix("tensortune-")
        url = f"sqlite:///{os.path.join(args.work, f'{name}-{label}.db')}"
        variants[SHIPPED] = Arm(url, rewrites=CPU_REWRITES, warm_start=SHIPPED_WARM)
    if args.warm_start_tasks and args.cold_cache:
        url = f"sqlite:///{os.path.join(args.work, f'{name}-cold-warm.db')}"
        variants["tensortune-cold-warm"] = Arm(
            url, MeasureSettings(cache="flushed"), warm_start=True
        )
    return with_cache(variants, getattr(args, "cache", CACHE_STATES[0]), dict(args.beside))


def storage_settings(url: str) -> MeasureSettings | None:
    """How the task studies in storage `url` were timed: None (the defaults) where warm or
    where none has a completed trial, else `cache_settings` of their cache state
    (`trial_records.timed_cache`; the first study with a completed trial decides, as
    ``tune_model`` refuses to resume a set timed two ways)."""
    if url.startswith("sqlite:///") and not os.path.exists(url.removeprefix("sqlite:///")):
        return None  # not made yet: nothing to resume
    storage = optuna.storages.get_storage(url)
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        cache = timed_cache(study)
        if cache is not None:
            return None if cache == CACHE_STATES[0] else cache_settings(cache)
    return None


def with_cache(variants: dict[str, Arm], cache: str, beside: dict[str, str]) -> dict[str, Arm]:
    """`variants` with (``--cache`` other than warm) each arm tuned in this run and timed as
    usual instead timed with the caches in state `cache`, `COLD_REPEAT` single runs a cost,
    in studies of its own, its system name ending in ``-<cache>``; the `beside` arms (by
    label) and those of other timings (``--cold-cache``) keep theirs."""
    if cache == CACHE_STATES[0]:
        return variants
    settings = cache_settings(cache)
    out = {}
    for system, arm in variants.items():
        if arm.settings is not None or system.removeprefix("tensortune-") in beside:
            out[system] = arm
            continue
        storage = arm.storage.removesuffix(".db") + f"-{cache}.db"
        out[f"{system}-{cache}"] = arm._replace(storage=storage, settings=settings)
    return out


#: The flags that add arms of ours (`arms`).
ARM_FLAGS = (
    "cold_cache",
    "prepack_weights",
    "winograd",
    "channels_last",
    "warm_start_tasks",
    "share_bests",
    "warm_start_twins",
    "shipped",
)


def arm_labels() -> set[str]:
    """The labels of every arm of ours that some combination of `ARM_FLAGS` makes (its system
    name less ``tensortune-``), which a ``--beside`` label must not take."""
    names: set[str] = set()
    for values in itertools.product((False, True), repeat=len(ARM_FLAGS)):
        flags = argparse.Namespace(
            work="",
            beside=[],
            beside_winograd=False,
            beside_unpacked=False,
            plain=True,
            **dict(zip(ARM_FLAGS, values, strict=True)),
        )
        names |= set(arms("model", flags))
    names |= {f"{name}-{cache}" for name in names for cache in CACHE_STATES[1:]}  # --cache
    return {name.removeprefix("tensortune-") for name in names - {"tensortune"}}


def profiled_arm(variants: dict[str, Arm]) -> str:
    """The arm of ours whose tasks and run `task_rows` and `profile_models` take apart: the
    shipped one where the run has it (``--shipped``), else the direct channels-last one
    (packed with ``--prepack-weights``), else the packed one (the BERT layer's fastest
    before Winograd became the default), else the plain one, else (``--only-winograd``) the
    Winograd one; each timed with ``--cache``'s state where the run asks."""
    if SHIPPED in variants:
        return SHIPPED
    nhwc = [
        s for s, arm in variants.items() if arm.rewrites.channels_last and not arm.rewrites.winograd
    ]
    if nhwc:
        return nhwc[0]
    for wanted in ("tensortune-prepacked", "tensortune"):
        for cache in CACHE_STATES:  # (--cache) its name ends in the state where not warm
            system = wanted if cache == CACHE_STATES[0] else f"{wanted}-{cache}"
            if system in variants:
                return system
    winograd = [s for s in variants if s.startswith("tensortune-winograd")]
    return winograd[0] if winograd else "tensortune"


def metaschedule_peer(system: str) -> str:
    """MetaSchedule's system on the tasks of our arm `system`: ``metaschedule...`` for
    ``tensortune...``, less the cache state ours were timed in (``--cache``). MetaSchedule
    times as it always does, so one run of it serves our arm timed warm and the same arm timed
    on dirty caches, and a run with ``--cache`` finds the one a warm run left in ``--work``."""
    for cache in CACHE_STATES[1:]:
        system = system.removesuffix(f"-{cache}")
    return system.replace("tensortune", "metaschedule", 1)


def metaschedule_dir(work: str, name: str, system: str) -> str:
    """MetaSchedule's work folder in `work` for model `name`, tuning the tasks of our arm
    `system` (or of its peer, ``metaschedule-...``): ``<name>-ms`` and the arm's suffix."""
    suffix = system.removeprefix("tensortune").removeprefix("metaschedule")
    return os.path.join(work, f"{name}-ms{suffix}")


def metaschedule_arms(variants: dict[str, Arm], any_timing: bool = False) -> list[str]:
    """Our arms whose tasks MetaSchedule tunes by default: those tuned cold, each task alone
    (its search has neither warm starts nor shared configs) and timed as usual (its runner
    knows no other cache state). With `any_timing` (default False) also those timed in another
    cache state, which ``--metaschedule-arms`` may name: MetaSchedule then tunes their tasks
    timed as usual (`metaschedule_peer`)."""
    return [
        s
        for s, arm in variants.items()
        if (any_timing or arm.settings is None) and not arm.warm_start and not arm.share_bests
    ]


def run_model(name: str, budgets: list[int], args: argparse.Namespace) -> tuple[list, list]:
    net, example = model_zoo.model(name)
    print(f"{name}: {model_zoo.describe(net)}", flush=True)
    program = from_torch(net, example, name=name)
    target = target_spec("llvm")
    inputs = [t.numpy() for t in example]
    expected = program.reference(inputs)
    folder = tempfile.mkdtemp(prefix=f"{name}-")
    untuned = build(program, target, None)
    check_outputs(run(untuned, inputs), expected)
    builds: dict[str, Any] = {"tvm-untuned": untuned}  # system -> built executable
    # Tuning seconds of every finished (system, budget), kept so that a killed run goes on
    # from the last finished one: ours resume their studies, MetaSchedule's databases stay.
    ledger = Ledger(os.path.join(args.work, f"{name}-seconds.json"))
    tuning = None
    variants = arms(name, args)
    profiled = profiled_arm(variants)
    beside = dict(args.beside)
    # Tuning seconds by system@budget, of this run's storages (--finalists: and the re-timing's)
    tuning_s: dict[str, float] = {}
    for system, (url, settings, rewrites, warm, shared, warm_sources) in variants.items():
        previous = 0.0  # our budgets resume one study set: their seconds add up
        for budget in budgets:
            key = f"{system}@{budget}"
            start = time.perf_counter()
            tuned_model = tune_model(
                program, budget, target, storage=url, seed=args.seed, settings=settings,
                warm_start=warm, share_bests=shared, warm_sources=warm_sources,
                **dataclasses.asdict(rewrites),
            )  # fmt: skip
            if system == profiled:  # the per-task rows and the profile are of this one
                tuning = tuned_model
            seconds = ledger.get(key, url)
            if seconds is None and system.removeprefix("tensortune-") not in beside:
                seconds = previous + time.perf_counter() - start
                ledger.record(key, seconds, url)
            if seconds is not None:  # None for --beside: tuned elsewhere
                tuning_s[key] = seconds
            previous = seconds or 0.0
            database = os.path.join(folder, f"db-{system}-{budget}")
            studies = studies_up_to(tuned_model.studies, budget)  # resumed past it: cut back
            write_database(tuned_model.tasks, studies, tuned_model.target, database)
            tuned = build(program, target, database, rewrites)
            check_outputs(run(tuned, inputs), expected)
            builds[key] = tuned
            if args.finalists > 1:  # the same studies, each task's kernel picked by re-timing
                start = time.perf_counter()
                picks = pick_finalists(tuned_model, studies, args.finalists, settings=settings)
                database = os.path.join(folder, f"db-{system}-finalists-{budget}")
                write_database(tuned_model.tasks, studies, tuned_model.target, database, picks)
                finalist_key = f"{system}-finalists@{budget}"
                tuning_s[finalist_key] = tuning_s.get(key, 0.0) + (time.perf_counter() - start)
                tuned = build(program, target, database, rewrites)
                check_outputs(run(tuned, inputs), expected)
                builds[finalist_key] = tuned
    # MetaSchedule tunes the tasks of each of our rewrites too: the same functions, its search.
    peers: dict[str, Rewrites] = {}
    if args.metaschedule:
        chosen = set(args.metaschedule_arms or metaschedule_arms(variants))
        peers = {
            metaschedule_peer(system): arm.rewrites
            for system, arm in variants.items()
            if system in chosen
        }
    for system, rewrites in peers.items():
        work_dir = metaschedule_dir(args.work, name, system)
        keys = {budget: f"{system}@{budget}" for budget in budgets}
        if ledger.get(keys[budgets[-1]], work_dir) is None:
            shutil.rmtree(work_dir, ignore_errors=True)  # a killed run's, half tuned
            reached = metaschedule_tune(
                program, target, budgets, work_dir, args.seed, rewrites,
                args.ms_population, args.ms_trials_per_iter,
            )  # fmt: skip
            for budget, seconds in reached.items():
                ledger.record(keys[budget], seconds, work_dir)
        for key in keys.values():
            if (seconds := ledger.get(key, work_dir)) is not None:
                tuning_s[key] = seconds
        for budget in budgets:
            built = metaschedule_build(program, target, work_dir, budget, rewrites)
            check_outputs(run(built, inputs), expected)
            builds[keys[budget]] = built
    readings = time_in_processes(name, builds, args.rounds, args.timings, folder)
    median_s = medians(readings)
    # Every reading, so that two builds can be compared round by round (round_ratios.py).
    write_csv(os.path.join(args.out, f"{name}-readings.csv"), readings)
    eager = median_s["pytorch-eager"]
    rows = [
        {"model": name, "system": system.split("@")[0],
         "budget": system.split("@")[1] if "@" in system else "",
         "latency_ms": float(f"{s * 1e3:.4g}"), "x_eager": round(eager / s, 3),
         "tuning_s": round(tuning_s[system], 1) if system in tuning_s else ""}
        for system, s in median_s.items()
    ]  # fmt: skip
    return rows, task_rows(name, profiled, tuning) if tuning is not None else []


def profile_models(name: str, budgets: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """`kernel_profile.kernel_times_in_turns` of our `profiled_arm`'s build and MetaSchedule's
    of the same tasks at the largest budget, built again from what the tuning left in ``--work``
    (tuning nothing), kept in ``<model>-kernels-<budget>.json`` (the plain arm, as before the
    channels-last arm was profiled) or ``<model>-kernels-<arm>-<budget>.json``."""
    variants = arms(name, args)
    system = profiled_arm(variants)
    arm = variants[system]
    layout = system.removeprefix("tensortune")  # "", "-channels-last" or with "-prepacked"
    path = os.path.join(args.work, f"{name}-kernels{layout}-{budgets[-1]}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    net, example = model_zoo.model(name)
    program = from_torch(net, example, name=name)
    target = target_spec("llvm")
    inputs = [t.numpy() for t in example]
    # The studies already hold the largest budget: this tunes nothing.
    tuning = tune_model(
        program, budgets[-1], target, storage=arm.storage, seed=args.seed,
        settings=arm.settings, **dataclasses.asdict(arm.rewrites),
    )  # fmt: skip
    database = tempfile.mkdtemp(prefix=f"{name}-profile-")
    write_database(tuning.tasks, tuning.studies, tuning.target, database)
    builds = {f"{system}@{budgets[-1]}": build(program, target, database, arm.rewrites)}
    peer = metaschedule_peer(system)
    work_dir = metaschedule_dir(args.work, name, peer)
    if args.metaschedule and os.path.exists(os.path.join(work_dir, "milestones.json")):
        builds[f"{peer}@{budgets[-1]}"] = metaschedule_build(
            program, target, work_dir, budgets[-1], arm.rewrites
        )
    profiles: dict[str, Any] = kernel_times_in_turns(builds, inputs)
    profiles["tasks"] = [task.name for task in tuning.tasks]
    with open(path, "w") as f:
        json.dump(profiles, f)
    return profiles


def profile_rows(name: str, profiles: dict[str, Any]) -> list[dict]:
    """Per built model: where a run's time goes (`kernel_profile.where_time_goes`)."""
    rows = []
    for system, profile in profiles.items():
        if system == "tasks":
            continue
        split = where_time_goes(profile, set(profiles["tasks"]))
        rows.append({"model": name, "system": system.split("@")[0],
                     "budget": system.split("@")[1],
                     **{key: round(value * 1e3, 3) for key, value in split.items()}})  # fmt: skip
    return rows


def add_in_model_times(tasks: list[dict], profiles: dict[str, Any], budget: int) -> None:
    """Give each of our task rows its µs in its arm's model, all its calls of a run together,
    under its name there (`kernel_profile.in_model_name`; rows without a ``system``, read back
    from before it was recorded, are the plain arm's)."""
    for row in tasks:
        system = row.get("system", "tensortune")
        ours = profiles.get(f"{system}@{budget}", {}).get("functions", {})
        found = ours.get(in_model_name(row["task"], ours))
        row["in_model_us"] = round(found["seconds"] * 1e6, 1) if found else ""


def _goal_lines(model: str, system: str, peer_system: str, mine: dict) -> list[str]:
    """Issue 22's goals for our `system` on `model` (rows of the model by (system, budget))."""
    ours = [r for (s, _), r in mine.items() if s == system]
    if not ours:
        return []
    lines = []
    best = max(ours, key=lambda r: int(r["budget"]))
    for peer in ("pytorch-eager", "onnxruntime"):
        if (peer, "") in mine:
            ratio = mine[(peer, "")]["latency_ms"] / best["latency_ms"]
            verdict = "met" if ratio >= 1.2 else "not met"
            lines.append(f"| ≥ 1.2× {peer} | {model} ({system}) | {verdict} | {ratio:.2f}× at "
                         f"{best['budget']} trials |")  # fmt: skip
    for r in ours:
        peer_row = mine.get((peer_system, r["budget"]))
        if peer_row is None:
            continue
        faster = peer_row["latency_ms"] / r["latency_ms"]
        quicker = r["tuning_s"] < peer_row["tuning_s"]
        verdict = "met" if faster >= 1.0 and quicker else "not met"
        lines.append(f"| ahead of {peer_system} in less wall time | {model} ({system}) "
                     f"@{r['budget']} | {verdict} | {faster:.2f}× its latency; "
                     f"{r['tuning_s']} s against {peer_row['tuning_s']} s |")  # fmt: skip
    return lines


def summary(rows: list[dict], tasks: list[dict], split: list[dict] | None = None) -> str:
    """Markdown: latencies per model and system, the goals, and where the time goes."""
    lines = ["| model | system | trials | latency ms | × PyTorch eager | tuning s |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| {r['model']} | {r['system']} | {r['budget']} | {r['latency_ms']} | "
              f"{r['x_eager']} | {r['tuning_s']} |" for r in rows]  # fmt: skip
    lines += ["", "| goal (issue 22) | model | verdict | numbers |", "|---|---|---|---|"]
    # Each of ours against its like: MetaSchedule with the same rewrites (or none).
    systems = dict.fromkeys(r["system"] for r in rows if r["system"].startswith("tensortune"))
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {(r["system"], r["budget"]): r for r in rows if r["model"] == model}
        for system in systems:
            lines += _goal_lines(model, system, metaschedule_peer(system), mine)
    if split:
        lines += ["", "Where a run's time goes (ms; each call timed by TVM's timer after the run's "
                  "other calls, `kernel_profile.kernel_times`; each figure the median of the "
                  "builds' profiles taken in turns):", "",
                  "| model | system | trials | run | tuned kernels | other calls | VM between "
                  "calls |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['model']} | {r['system']} | {r['budget']} | {r['run_s']} | "
                  f"{r['kernels_s']} | {r['other_calls_s']} | {r['between_calls_s']} |"
                  for r in split]  # fmt: skip
    if tasks:
        lines += ["", "Per task: TVM's untuned kernel alone (one call, warm data), our best as "
                  "its study recorded it while tuning (the least of its trials' medians, so "
                  "biased low; `in_model_gap.py` times it alone again), and our best in the "
                  "model (all its calls of a run):", "",
                  "| model | system | task | weight | untuned µs | tuned µs | trials | "
                  "in model µs |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {t['model']} | {t.get('system', 'tensortune')} | {t['task']} | "
                  f"{t['weight']} | {t['untuned_us']} | "
                  f"{t['tuned_us']} | {t['trials']} | {t.get('in_model_us', '')} |"
                  for t in tasks]  # fmt: skip
    return "\n".join(lines)


def run_key(args: argparse.Namespace) -> str:
    """What names a finished run's results in ``--work`` (``<model>-results-<key>.json``): its
    budgets, its rounds where not `ROUNDS`, its timings where more than one, and every flag
    that adds or removes a system, MetaSchedule's arms included, so that a run of other
    systems, or timed otherwise, never reads back an earlier run's timings."""
    key = "-".join(map(str, args.budgets)) + ("-cold" if args.cold_cache else "")
    key += f"-rounds{args.rounds}" if args.rounds != ROUNDS else ""
    key += f"-timings{args.timings}" if args.timings != 1 else ""
    key += "-prepacked" if args.prepack_weights else ""
    key += "-winograd" if args.winograd else ""
    key += "-channels-last" if args.channels_last else ""
    key += "-warm" if args.warm_start_tasks else ""
    key += "-shared" if args.share_bests else ""
    key += "-twins" if args.warm_start_twins else ""
    key += f"-finalists{args.finalists}" if args.finalists > 1 else ""
    key += f"-cache-{args.cache}" if args.cache != CACHE_STATES[0] else ""
    key += "".join(f"-{label}" for label, _ in args.beside)
    key += "" if args.plain else "-no-plain"
    key += "-only-winograd" if getattr(args, "only_winograd", False) else ""
    # The shipped arm became packed NHWC Winograd on 2026-12-07, and cold that evening: a key
    # of its own each time.
    key += SHIPPED.removeprefix("tensortune") if getattr(args, "shipped", False) else ""
    if not args.metaschedule:
        return key + "-no-metaschedule"
    return key + "".join(f"-ms-{system}" for system in sorted(args.metaschedule_arms or []))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "bert-layer"],
                        choices=model_zoo.MODELS)  # fmt: skip
    parser.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS),
                        help="trials per model, ascending (default 500 1000 2000)")  # fmt: skip
    parser.add_argument("--no-metaschedule", dest="metaschedule", action="store_false")
    parser.add_argument("--metaschedule-arms", nargs="+", default=None, metavar="SYSTEM",
                        help="our arms whose tasks MetaSchedule tunes, by system name, e.g. "
                        "tensortune-channels-last (default: every arm of usual timing and "
                        "cold tasks); an arm timed with --cache may be named, and MetaSchedule "
                        "then tunes its tasks as usual, under the name of the arm's warm "
                        "timing")  # fmt: skip
    parser.add_argument("--no-plain", dest="plain", action="store_false",
                        help="leave out our NCHW arm (tensortune), whose tuning costs as "
                        "much as any other arm's; with --channels-last or --prepack-weights "
                        "only (default: kept)")  # fmt: skip
    parser.add_argument("--cold-cache", action="store_true",
                        help="also ours tuned on timings with the weights flushed from the "
                        "caches (MeasureSettings.cache=\"flushed\")")  # fmt: skip
    parser.add_argument("--cache", default=CACHE_STATES[0], choices=CACHE_STATES,
                        help="how the CPU caches stand in the timings of our arms tuned in "
                        "this run (MeasureSettings.cache, with "
                        f"{COLD_REPEAT} single runs a cost where cold; each such arm's system "
                        "name and studies end in -STATE; default warm; --beside and "
                        "--cold-cache arms keep theirs)")  # fmt: skip
    parser.add_argument("--prepack-weights", action="store_true",
                        help="also ours and MetaSchedule tuned with each weight packed once "
                        "at build time (tune_model's prepack_weights, MetaSchedule's "
                        "cpu_weight_prepack)")  # fmt: skip
    parser.add_argument("--winograd", action="store_true",
                        help="also ours tuned with Winograd convolutions (tune_model's "
                        "winograd; with --prepack-weights, packed too; with --channels-last, "
                        "NHWC ones)")  # fmt: skip
    parser.add_argument("--channels-last", action="store_true",
                        help="also ours tuned with NHWC convolutions (tune_model's "
                        "channels_last; with --prepack-weights, packed too)")  # fmt: skip
    parser.add_argument("--warm-start-tasks", action="store_true",
                        help="also ours with each task warm-started from the model's tasks of "
                        "its kind (tune_model's warm_start; with --channels-last, in NHWC; "
                        "with --prepack-weights, packed; with --winograd, the Winograd arm "
                        "too); with --cold-cache, also both at once")  # fmt: skip
    parser.add_argument("--share-bests", action="store_true",
                        help="also ours with tasks of one design space handed each other's "
                        "best configs (tune_model's share_bests; with --channels-last, in "
                        "NHWC; with --prepack-weights, packed)")  # fmt: skip
    parser.add_argument("--warm-start-twins", action="store_true",
                        help="also ours with each task warm-started from the trials of the "
                        "model's tasks of its design space (tune_model's warm_sources='twins'; "
                        "with --channels-last, in NHWC; with --prepack-weights, "
                        "packed)")  # fmt: skip
    parser.add_argument("--beside", nargs="+", default=[], metavar="LABEL=STORAGE",
                        help="also ours from the task studies in STORAGE (an Optuna URL; a "
                        "run of other code, say), resumed to each budget in the cache "
                        "state they were timed in and timed as tensortune-LABEL beside the "
                        "rest (default none)")  # fmt: skip
    parser.add_argument("--beside-winograd", action="store_true",
                        help="the --beside studies are of the Winograd arm (NHWC with "
                        "--channels-last, packed with --prepack-weights), not the plain "
                        "one")  # fmt: skip
    parser.add_argument("--beside-unpacked", action="store_true",
                        help="with --beside-winograd and --prepack-weights: the --beside "
                        "studies are of the Winograd arm unpacked, timed beside the packed "
                        "one (default: packed as the run's)")  # fmt: skip
    parser.add_argument("--only-winograd", action="store_true",
                        help="with --winograd: leave out the direct arms that "
                        "--prepack-weights (NCHW, packed) and --channels-last (NHWC) add "
                        "beside the Winograd arm, for a run that asks about the Winograd arm "
                        "alone (default: kept)")  # fmt: skip
    parser.add_argument("--shipped", action="store_true",
                        help="also ours as tune-model ships it for a CPU (packed NHWC "
                        f"Winograd, {'warm-started' if SHIPPED_WARM else 'cold'} tasks), "
                        "whatever --prepack-weights, --winograd "
                        "and --channels-last say: the default beside the other arms "
                        "(default: off)")  # fmt: skip
    parser.add_argument("--ms-population", type=int, default=512,
                        help="MetaSchedule's evolutionary search population (default 512, its "
                        "own; --quick: 16)")  # fmt: skip
    parser.add_argument("--ms-trials-per-iter", type=int, default=None,
                        help="MetaSchedule's trials per task and batch (default: its first "
                        "visit of every task takes at most half the smallest budget; --quick: "
                        "4)")  # fmt: skip
    parser.add_argument("--finalists", type=int, default=1,
                        help="also each of our builds with every task's kernel the fastest of "
                        "its study's best N configs timed again (pick_finalists), as "
                        "SYSTEM-finalists (default 1: the studies' bests alone, as "
                        "before)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="default 0")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the "
                        f"round-robin timing (default {ROUNDS}; --quick: 2)")  # fmt: skip
    parser.add_argument("--timings", type=int, default=None, help="fresh processes that "
                        f"time every system one after another, each over --rounds rounds "
                        f"(default {TIMINGS}; --quick: 1)")  # fmt: skip
    parser.add_argument("--work", default=None, help="studies, databases and seconds kept "
                        "between runs (default studies/work/models; --quick: a fresh temporary "
                        "folder)")  # fmt: skip
    parser.add_argument("--out", default=os.path.join(HERE, "results", "models"))
    parser.add_argument("--quick", action="store_true", help="a tiny CNN, 8 and 16 trials")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.quick:
        args.models, args.budgets, args.rounds = ["tiny-cnn"], [8, 16], 2
        args.ms_population = 16
        args.ms_trials_per_iter = 4
    if args.timings is None:
        args.timings = 1 if args.quick else TIMINGS
    if args.timings < 1 or args.rounds < 1:
        parser.error("--timings and --rounds must be at least 1")
    if args.work is None:
        args.work = tempfile.mkdtemp() if args.quick else os.path.join(HERE, "work", "models")
    if sorted(args.budgets) != args.budgets or min(args.budgets) < 1:
        parser.error("--budgets must be positive and ascending")
    if args.ms_population < 1:
        parser.error("--ms-population must be positive")
    if args.ms_trials_per_iter is not None and args.ms_trials_per_iter < 1:
        parser.error("--ms-trials-per-iter must be positive")
    pairs = [item.partition("=") for item in args.beside]
    if any(not label or not sep or not url for label, sep, url in pairs):
        parser.error("--beside takes LABEL=STORAGE, e.g. new=sqlite:///work/resnet18.db")
    labels = [label for label, _, _ in pairs]
    ours = arm_labels()
    if len(set(labels)) < len(labels) or ours & set(labels):
        parser.error(f"--beside labels must differ from each other and from {sorted(ours)}")
    if any(label.endswith("-finalists") for label in labels):
        parser.error("--beside labels must not end in -finalists (--finalists's builds do)")
    if args.finalists < 1:
        parser.error("--finalists must be at least 1")
    args.beside = [(label, url) for label, _, url in pairs]
    if not args.plain and not (args.channels_last or args.prepack_weights):
        # The per-task rows and the profile take apart the channels-last arm, else the packed
        # one, else the plain.
        parser.error("--no-plain needs --channels-last or --prepack-weights: the run takes "
                     "that arm apart instead")  # fmt: skip
    if args.only_winograd and not args.winograd:
        parser.error("--only-winograd needs --winograd: the run would have no arm of ours left")
    possible = metaschedule_arms(arms("model", args), any_timing=True)
    if args.metaschedule_arms and not set(args.metaschedule_arms) <= set(possible):
        parser.error(f"--metaschedule-arms takes arms of this run: {' '.join(possible)}")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    rows, tasks, split = [], [], []
    for name in args.models:
        # A model finished by an earlier run of the same systems is not tuned or timed again.
        done = os.path.join(args.work, f"{name}-results-{run_key(args)}.json")
        if os.path.exists(done):
            with open(done) as f:
                found, per_task = json.load(f)
        else:
            found, per_task = run_model(name, args.budgets, args)
            with open(done, "w") as f:
                json.dump([found, per_task], f)
        profiles = profile_models(name, args.budgets, args)
        add_in_model_times(per_task, profiles, args.budgets[-1])
        rows += found
        tasks += per_task
        split += profile_rows(name, profiles)
    write_csv(os.path.join(args.out, "model_tuning.csv"), rows)
    write_csv(os.path.join(args.out, "model_tasks.csv"), tasks)
    write_csv(os.path.join(args.out, "model_time_split.csv"), split)
    text = summary(rows, tasks, split)
    with open(os.path.join(args.out, "model_tuning_summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
