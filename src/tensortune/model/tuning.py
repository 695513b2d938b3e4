"""Tune a whole model: its tasks under one trial budget, one Optuna study per task.

Each task is tuned in MetaSchedule's design space of its fused TIR function
(``space="metaschedule"``) through `tensortune.tune`, batch by batch, in the study named after
the task's function (`tensortune.tuning.default_study_name` of its workload): a task met
before, in this model or another, resumes its study. Each task keeps one sampler for the whole
run, so that its batches search as one study tuned in one go would. The budget counts every
finished trial of the model's task studies, so running the same call again after a kill goes
on where it stopped, and measures nothing twice.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import optuna

from tensortune.errors import TensortuneError
from tensortune.measure import Measurer, MeasureSettings
from tensortune.measure.worker_tasks import cache_state
from tensortune.model.frontend import ModelProgram
from tensortune.model.scheduler import TaskState, model_seconds, next_task
from tensortune.model.sharing import same_space_twins, untried_bests
from tensortune.model.tasks import (
    NO_REWRITES,
    ModelTask,
    Rewrites,
    extract_tasks,
    model_rewrites,
)
from tensortune.sampler.source_weighting import SOURCE_WEIGHTINGS
from tensortune.templates.metaschedule import MetaScheduleTemplate
from tensortune.trial_records import check_same_timing

#: Trials a task gets at a time (and first of all): one batch of `tensortune.tune`.
BATCH = 8
#: Which of the model's tasks a warm-started task learns from; the first is the default.
#: ``"kin"``: those of its kind, nearest program first, in program features (`kin_sources`);
#: ``"twins"``: those whose design space has the same knobs (`twin_sources`), in the knob-level
#: features of a cold study, so that no candidate is lowered.
WARM_SOURCES = ("kin", "twins")


@dataclasses.dataclass
class ModelTuning:
    """Where a model's tuning stands.

    Attributes:
        program: The model.
        target: The target dict.
        tasks: Its tasks, heaviest first.
        studies: Per task, its study (None for a task whose space has no knobs, or not begun).
        study_names: Per task, the name of its study.
        templates: Per task, its MetaSchedule design space (made once, used for every batch).
        rewrites: The rewrites the tasks were made with (`tensortune.model.tasks.Rewrites`):
            the build must make the same functions to find their kernels.
    """

    program: ModelProgram
    target: dict[str, Any]
    tasks: list[ModelTask]
    studies: list[optuna.Study | None]
    study_names: list[str] = dataclasses.field(default_factory=list)
    templates: list[MetaScheduleTemplate] = dataclasses.field(default_factory=list)
    rewrites: Rewrites = NO_REWRITES

    @property
    def tunable(self) -> list[bool]:
        """Per task, whether its design space has knobs to search."""
        return [bool(template.knobs) for template in self.templates]

    def states(self) -> list[TaskState]:
        """The scheduler's view of the tunable tasks (those with a study)."""
        return [
            task_state(task, study)
            for task, study in zip(self.tasks, self.studies, strict=True)
            if study is not None
        ]

    def estimate_s(self) -> float:
        """The model's seconds as its tuned tasks' best kernels add up (`model_seconds`)."""
        return model_seconds(self.states())


def task_state(task: ModelTask, study: optuna.Study | None) -> TaskState:
    """The best seconds after each finished trial of `study` (failed trials repeat the best;
    none for a study not begun, None). Trials a killed run left behind (failed as stale, see
    `tensortune.trial_records.count_finished`) measured nothing and do not count."""
    from tensortune.trial_records import is_abandoned, is_finished, stale_among, study_trials

    if study is None:
        return TaskState(task.weight, (), task.flops, task.kind)
    finished = [t for t in study_trials(study) if is_finished(t)]
    stale = stale_among(study, finished)
    best, bests = math.inf, []
    for trial in sorted(finished, key=lambda t: t.number):
        if is_abandoned(trial, stale):
            continue
        seconds = trial.user_attrs.get("cost_s")
        if trial.state == optuna.trial.TrialState.COMPLETE and seconds:
            best = min(best, float(seconds))
        bests.append(best)
    return TaskState(task.weight, tuple(bests), task.flops, task.kind)


def tune_model(
    program: ModelProgram,
    total_trials: int,
    target: str | dict[str, Any] = "llvm",
    *,
    storage: str | None = None,
    sampler: str = "costmodel",
    seed: int | None = 0,
    batch_size: int = BATCH,
    progress: Callable[[str], None] | None = None,
    settings: MeasureSettings | None = None,
    prepack_weights: bool | None = None,
    winograd: bool | None = None,
    channels_last: bool | None = None,
    warm_start: bool = False,
    source_weighting: str | None = None,
    share_bests: bool = False,
    warm_sources: str | None = None,
) -> ModelTuning:
    """Tune the tasks of `program` until their studies hold `total_trials` finished trials in
    all, each next batch going to the task `tensortune.model.scheduler.next_task` picks.

    Args:
        program: From `tensortune.model.load_onnx` or `tensortune.model.from_torch`.
        total_trials: The model's budget, counting trials of earlier runs (positive).
        target: As for `tensortune.tune`. Default ``"llvm"``: this machine.
        storage: Optuna storage URL of the task studies. Default None: ``tensortune.db`` in
            the working folder, as `tensortune.tune`.
        sampler: A name from `tensortune.tuning.SAMPLERS`. Default ``"costmodel"``.
        seed: Seed of each task's sampler. Default 0.
        batch_size: Trials a task gets at a time. Default `BATCH`.
        progress: Called with a line after each batch. Default None: printed to stderr.
        settings: How candidates are built and timed. Default None: `MeasureSettings()`.
        prepack_weights: Let each kernel read the model's weights in a layout of its own,
            packed once at build time, as ONNX Runtime and MetaSchedule's
            ``cpu_weight_prepack`` do (CPU targets only). Its tasks are other functions, so
            other studies than those of a run without it. Default None: on for CPU (llvm)
            targets. On ResNet-18's Winograd build (a Zen 4 with AVX-512, seeds 0-1, 1000
            trials, ``studies/README.md``) it made ours 1.10x as fast as unpacked weights did.
        winograd: Compute the model's 3x3 convolutions of stride 1 (float32, constant
            weights) as Winograd convolutions, whose weights are transformed once at build
            time (`tensortune.model.winograd`; CPU targets only): NHWC ones with
            `channels_last`, F(4x4, 3x3) or F(2x2, 3x3) by the layer's size, else NCHW
            F(4x4, 3x3) ones. Other tasks, so other studies, as with `prepack_weights`.
            Default None: on for CPU (llvm) targets. With packed weights and NHWC, on
            ResNet-18 on a Zen 4 with AVX-512 (2026-12-07, seeds 0-1, 1000 trials), it made
            our build 1.29x ONNX Runtime's speed and 1.61x that of the build of direct NHWC
            convolutions with unpacked weights (the default before), timed side by side.
            A model without such convolutions has the same tasks either way.
        channels_last: Compute the model's convolutions on NHWC data, converted by TVM's
            ``ConvertLayout`` (the model's inputs and outputs keep their layout; CPU targets
            only; with `winograd`, NHWC Winograd ones): a kernel can vectorize along the
            output channels (`tensortune.model.tasks.Rewrites`). Other tasks, so other
            studies, as with `prepack_weights`. Default None: on for CPU (llvm) targets. On
            ResNet-18 (an Emerald Rapids guest, ``studies/README.md``) it made our build
            1.61-1.92x as fast as NCHW's at 500 and 1000 trials with packed weights, and 1.59x
            and 1.61x at 1000 without (two seeds each), direct convolutions all. A model
            without convolutions has the same tasks either way.
        warm_start: Warm-start each batch's cost model from the studies of other tasks of
            the model that have a measured kernel, as ``--transfer-from`` does for one
            operator: by default those of the same kind
            (`tensortune.model.tasks.ModelTask.kind`), up to
            `tensortune.sampler.nearest_studies.AUTO_SOURCES` of them, nearest program first
            (`kin_sources`); see `warm_sources`. The ``costmodel`` sampler only. Default
            False: each task learns from its own trials alone. With the default rewrites, on
            ResNet-18 on a Zen 4 (``studies/README.md``, 2026-12-07, two seeds, 1000 trials)
            it tied cold tasks (1.02x their build's speed) in 2.1-2.4x their tuning time, and
            on a BERT-base layer it tied or trailed them; on direct NHWC convolutions it had
            made ResNet-18 1.15x as fast at 1000 trials in 1.35-1.70x the time.
        source_weighting: How those sources weigh against a task's own trials, one of
            `tensortune.sampler.source_weighting.SOURCE_WEIGHTINGS` (see
            `tensortune.CostModelSampler`); not with cold tasks. Default None: ``"evidence"``, and
            ``"decay"`` with ``warm_sources="twins"``: a twin has the task's own decisions, and
            judged on its first 8 trials it ranked the task's no better than chance, so the task
            dropped it, for 3 of ResNet-18's 8 twin tasks (one seed, ``studies/README.md``; then
            for good: a dropped source now comes back when it has grown, `WarmStart.use`).
        share_bests: Before each batch of a task, hand it the best config of each other task
            with the same design space (the same convolution with another epilogue, say) that
            it has not tried, as a trial of that batch (`tensortune.model.sharing`); each
            task's sampler is then seeded with `seed` plus the task's index (modulo 2**32), as
            tasks of one space with one seed propose the same configs. Default False: each
            task runs only the configs its own sampler proposes.
        warm_sources: Which tasks a warm-started task learns from, one of `WARM_SOURCES`;
            not with cold tasks. With ``"twins"`` each task's sampler is seeded apart, as
            with `share_bests`. Default None: ``"kin"``.
    """
    if total_trials < 1:
        raise TensortuneError(f"total trials must be at least 1, got {total_trials}")
    if batch_size < 1:
        raise TensortuneError(f"batch size must be at least 1, got {batch_size}")
    if warm_start and sampler != "costmodel":
        raise TensortuneError(f"warm-starting tasks needs the costmodel sampler, not {sampler}")
    if source_weighting is not None and not warm_start:
        raise TensortuneError(
            "a source weighting weighs warm-start sources: warm-start the tasks (costmodel sampler)"
        )
    if warm_sources is not None and not warm_start:
        raise TensortuneError(
            "warm sources are what tasks warm-start from: warm-start the tasks (costmodel sampler)"
        )
    if warm_sources is not None and warm_sources not in WARM_SOURCES:
        raise TensortuneError(
            f"unknown warm sources {warm_sources!r}; choose one of {', '.join(WARM_SOURCES)}"
        )
    if source_weighting is not None and source_weighting not in SOURCE_WEIGHTINGS:
        raise TensortuneError(
            f"unknown source weighting {source_weighting!r}; choose one of "
            f"{', '.join(SOURCE_WEIGHTINGS)}"
        )
    from tensortune.tuning import check_sampler

    check_sampler(sampler, seed)  # before the storage is opened: nothing written
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    tuning = model_tuning(
        program, target, storage, create=True, prepack_weights=prepack_weights,
        winograd=winograd, channels_last=channels_last,
    )  # fmt: skip
    cache = cache_state(settings or MeasureSettings(), tuning.target["kind"])
    for study in tuning.studies:  # every task before any is measured: nothing half-done
        if study is not None:
            check_same_timing(study, cache)
    say(
        f"{program.name}: {len(tuning.tasks)} tasks, {sum(tuning.tunable)} with a design space "
        f"to search; {total_trials} trials in all"
    )
    _fail_stale(tuning)
    # One set of build and timing workers for all tasks (started on the first batch): a set
    # per task held three processes of ~300 MB each per task, 54 for ResNet-18's 18 tasks.
    if any(tuning.tunable):
        with Measurer(tuning.templates[0], tuning.target, settings) as measurer:
            _tune_batches(
                tuning, total_trials, storage, sampler, seed, batch_size, say, measurer,
                (warm_sources or WARM_SOURCES[0]) if warm_start else None,
                source_weighting or ("decay" if warm_sources == "twins" else None),
                share_bests,
            )  # fmt: skip
    _fail_stale(tuning)
    return tuning


def _fail_stale(tuning: ModelTuning) -> None:
    """Fail the trials a killed run left RUNNING in any task study (once their heartbeat is
    older than the grace period): a task the budget does not reach again keeps none."""
    from tensortune.heartbeats import fail_stale_trials

    for study in tuning.studies:
        if study is not None:
            fail_stale_trials(study)


def _tune_batches(
    tuning: ModelTuning,
    total_trials: int,
    storage: str | None,
    sampler: str,
    seed: int | None,
    batch_size: int,
    say: Callable[[str], None],
    measurer: Measurer,
    warm_sources: str | None,
    source_weighting: str | None,
    share_bests: bool,
) -> None:
    """Tune batch after batch until the budget is spent; `warm_sources`: one of
    `WARM_SOURCES`, or None for cold tasks."""
    from tensortune.tuning import make_sampler, tune

    tasks, studies, names, spec = tuning.tasks, tuning.studies, tuning.study_names, tuning.target
    indices = [i for i, knobs in enumerate(tuning.tunable) if knobs]
    # One sampler per task for the whole run, as for a study tuned in one go: what it learnt
    # in a batch (its model, the configs it lowered and the screen they train, its random
    # state) serves the next, where a sampler per batch began each one afresh.
    samplers: dict[int, Any] = {}
    twins = same_space_twins([template.knobs for template in tuning.templates])
    while True:
        states = [task_state(tasks[i], studies[i]) for i in indices]
        done = sum(s.trials for s in states)
        if done >= total_trials or not indices:
            break
        pick = indices[next_task(states, batch_size)]
        task = tasks[pick]
        count = min(batch_size, total_trials - done)
        before = states[indices.index(pick)].trials
        if warm_sources == "twins":
            sources = twin_sources(tuning, twins[pick], states, indices)
        elif warm_sources == "kin":
            sources = kin_sources(tuning, pick, states, indices)
        else:
            sources = []
        chosen = samplers.get(pick)
        if chosen is None or (sources and not getattr(chosen, "source_studies", ())):
            # A task's first sources come with a sampler of their own: a cold one chose its
            # features for no sources (`tensortune.CostModelSampler`).
            # Twins sharing bests search apart: with one seed, tasks of one design space
            # propose the same configs (ResNet-18's twins ran the same first 8, and 16-22 of
            # the same in all), so a twin's best was often one the task had run already.
            apart = share_bests or warm_sources == "twins"
            own_seed = (seed + pick) % 2**32 if apart and seed is not None else seed
            chosen = make_sampler(
                sampler, own_seed, batch_size=batch_size, source_studies=sources,
                source_weighting=source_weighting,
            )  # fmt: skip
            samplers[pick] = chosen
        elif sources:
            chosen.source_studies = sources  # read again where they changed
        if share_bests and (own := studies[pick]) is not None:
            started = [study for j in twins[pick] if (study := studies[j]) is not None]
            for twin_name, params in untried_bests(own, started)[:count]:
                own.enqueue_trial(params, user_attrs={"shared_from": twin_name})
        studies[pick] = tune(
            task.workload(),
            spec,
            storage=storage,
            study_name=names[pick],
            sampler=chosen,
            seed=seed,
            batch_size=batch_size,
            show_progress=False,
            total_trials=before + count,
            space="metaschedule",
            measurer=_TaskMeasurer(measurer, tuning.templates[pick]),
        )
        # The other tasks' states stand as read at the top of the loop: one study read here.
        states[indices.index(pick)] = picked = task_state(task, studies[pick])
        begun = [state for i, state in zip(indices, states, strict=True) if studies[i] is not None]
        estimate = model_seconds(begun)  # what `ModelTuning.estimate_s` gives, without a reread
        shown = f"{estimate * 1e3:.3f} ms" if math.isfinite(estimate) else "not yet known"
        say(
            f"[{done + count}/{total_trials}] {task.name} (x{task.weight}): "
            f"best {picked.best * 1e6:.1f} us; model estimate {shown}"
        )


def kin_sources(
    tuning: ModelTuning, pick: int, states: list[TaskState], indices: list[int]
) -> list[optuna.Study]:
    """The studies task `pick` warm-starts from: those of the other tasks of its kind with a
    measured kernel (`states`, of the tasks at `indices`), nearest program first
    (`tensortune.sampler.nearest_studies.program_distance`), up to
    `tensortune.sampler.nearest_studies.AUTO_SOURCES`."""
    from tensortune.sampler.nearest_studies import AUTO_SOURCES, program_distance

    task = tuning.tasks[pick]
    kin = [
        i
        for i, state in zip(indices, states, strict=True)
        if i != pick and tuning.tasks[i].kind == task.kind and math.isfinite(state.best)
    ]
    mine = task.workload()
    kin.sort(key=lambda i: program_distance(mine, tuning.tasks[i].workload()))
    return [study for i in kin[:AUTO_SOURCES] if (study := tuning.studies[i]) is not None]


def twin_sources(
    tuning: ModelTuning, twins: list[int], states: list[TaskState], indices: list[int]
) -> list[optuna.Study]:
    """The studies of `twins` (tasks whose design space has the knobs of the task at hand,
    `tensortune.model.sharing.same_space_twins`) with a measured kernel (`states`, of the
    tasks at `indices`)."""
    measured = {i for i, state in zip(indices, states, strict=True) if math.isfinite(state.best)}
    return [study for i in twins if i in measured and (study := tuning.studies[i]) is not None]


class _TaskMeasurer:
    """One task's view of the model's measurer: it measures the task's configs with workers
    that every task shares, and `tensortune.tune` may close it after each batch without
    stopping them (starting workers costs seconds, a batch of a small kernel less than one)."""

    def __init__(self, shared: Any, template: Any) -> None:
        self.shared = shared
        self.template = template

    def measure(self, configs: Any) -> Any:
        self.shared.use_template(self.template)
        return self.shared.measure(configs)

    def vendor_baseline(self) -> Any:
        self.shared.use_template(self.template)
        return self.shared.vendor_baseline()

    def close(self) -> None:
        pass


def model_tuning(
    program: ModelProgram,
    target: str | dict[str, Any] = "llvm",
    storage: str | None = None,
    *,
    create: bool = False,
    prepack_weights: bool | None = None,
    winograd: bool | None = None,
    channels_last: bool | None = None,
) -> ModelTuning:
    """Where the tuning of `program` stands in `storage`: its tasks and their studies, tuning
    nothing.

    Args:
        program: The model.
        target: As for `tune_model`. Default ``"llvm"``.
        storage: As for `tune_model`. Default None: ``tensortune.db`` in the working folder.
        create: Whether a missing SQLite file may be created. Default False: it is an error.
        prepack_weights: As for `tune_model`. Default None: on for CPU targets.
        winograd: As for `tune_model`. Default None: on for CPU targets.
        channels_last: As for `tune_model`. Default None: on for CPU targets.
    """
    from tensortune.storage import open_storage
    from tensortune.target import make_target, target_spec
    from tensortune.tuning import default_study_name

    spec = target_spec(target)
    rewrites = model_rewrites(spec["kind"], prepack_weights, winograd, channels_last)
    tasks = extract_tasks(program.mod, make_target(spec), rewrites)
    if not tasks:
        raise TensortuneError(f"{program.name} has no kernel to tune")
    # A tuning run opens it with heartbeats, so that it can fail a killed run's trials.
    db = open_storage(storage, must_exist=not create, heartbeat=create)
    names = [default_study_name(t.workload(), spec, "metaschedule") for t in tasks]
    templates = [MetaScheduleTemplate(t.workload(), spec) for t in tasks]
    studies = [
        load_task_study(db, name) if template.knobs else None
        for name, template in zip(names, templates, strict=True)
    ]
    return ModelTuning(program, spec, tasks, studies, names, templates, rewrites)


def load_task_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study | None:
    """The study `name` in `storage` (a task's, `ModelTuning.study_names`); None where there
    is none yet."""
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
