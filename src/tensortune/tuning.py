"""Optuna integration: an objective for any sampler, and `tune`, the one-call entry point."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import optuna

from tensortune.batches import run_batches
from tensortune.cost_model import ACQUISITIONS, DEFAULT_COST_MODEL, LOSSES
from tensortune.dashboard import (
    artifact_store,
    check_artifact_dir,
    default_artifact_dir,
    publish_note,
)
from tensortune.errors import TensortuneError
from tensortune.heartbeats import fail_stale_trials
from tensortune.measure import Measurer, MeasureResult, MeasurerLike, MeasureSettings, RpcDevice
from tensortune.measure.settings import CACHE_STATES
from tensortune.measure.worker_tasks import cache_state
from tensortune.sampler.nearest_studies import AUTO, find_sources
from tensortune.sampler.source_weighting import SOURCE_WEIGHTINGS
from tensortune.sampler.transfer import check_sources
from tensortune.storage import create_study, find_study, open_storage, target_key
from tensortune.target import describe, gpu_present, target_spec
from tensortune.templates import SPACES, InvalidConfig, Template, template_for
from tensortune.trial_records import CACHE_ATTR, check_same_timing, count_finished
from tensortune.workloads import Workload, get_workload

#: Samplers by name; the first is the default.
SAMPLERS = ("costmodel", "tpe", "random", "gp")


class Objective:
    """Optuna objective: suggest a config from the template, build it, check it, time it.

    Returns GFLOP/s (maximise). A config that cannot be scheduled, fails to build, crashes,
    hangs or computes a wrong result returns NaN, which Optuna records as a FAIL and moves on
    from; the reason is in the trial's ``error`` and ``failed_stage`` user attrs. Completed
    trials carry ``gflops``, ``cost_s`` (median seconds), ``costs_s``, ``compile_s`` and, when a
    vendor baseline is known, ``vendor_ratio``.

    Use it with ``study.optimize(objective, ...)`` or through `tune`, and close it (or use it as
    a context manager) to stop its worker processes.

    Args:
        workload: The operator at its shape.
        target: Target description (see `tensortune.target.target_spec`). Default ``"llvm"``,
            this machine.
        settings: Build and timing settings. Default `MeasureSettings()`.
        vendor_gflops: The vendor library's GFLOP/s, for ``vendor_ratio``. Default None.
        template: Knobs → schedule, a `tensortune.templates.Template`. Default None: the
            target kind's template (`tensortune.templates.template_for`).
        device: Time candidates on this device of a TVM RPC tracker (they are still built
            here, for `target`, which should then describe that device). Default None: time
            on this machine.
        measurer: What builds and times the configs, anything with ``measure`` and ``close``
            (`tensortune.measure.MeasurerLike`); the objective closes it. `settings` and
            `device` then configure nothing here. Default None: a `Measurer` of `template`,
            `target`, `settings` and `device`.
    """

    def __init__(
        self,
        workload: Workload,
        target: str | dict[str, Any] = "llvm",
        settings: MeasureSettings | None = None,
        vendor_gflops: float | None = None,
        template: Template | None = None,
        device: RpcDevice | None = None,
        measurer: MeasurerLike | None = None,
    ) -> None:
        self.workload = workload
        self.target = target_spec(target)
        self.template = template if template is not None else template_for(workload, self.target)
        self.measurer: MeasurerLike = (
            measurer
            if measurer is not None
            else Measurer(self.template, self.target, settings, device)
        )
        self.vendor_gflops = vendor_gflops

    def __enter__(self) -> Objective:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.measurer.close()

    def __call__(self, trial: optuna.Trial) -> float:
        return self.evaluate([trial])[0]

    def evaluate(self, trials: Sequence[optuna.Trial]) -> list[float]:
        """Measure one config per trial as a batch (builds in parallel); GFLOP/s or NaN each."""
        results: list[MeasureResult | None] = []
        configs = []
        for trial in trials:
            try:
                config = self.template.suggest(trial)
            except ValueError as err:  # e.g. an enqueued value that is not in a knob's space
                results.append(
                    MeasureResult(error=f"knob value outside the space: {err}", stage="invalid")
                )
                continue
            try:
                self.template.apply(config)
            except InvalidConfig as err:
                results.append(MeasureResult(error=f"invalid config: {err}", stage="invalid"))
                continue
            except Exception as err:  # a template's own bug fails this trial, not the study
                reason = f"template failed: {type(err).__name__}: {err}"
                results.append(MeasureResult(error=reason, stage="invalid"))
                continue
            results.append(None)
            configs.append(config)
        measured = iter(self.measurer.measure(configs))
        values = []
        for trial, known in zip(trials, results, strict=True):
            result = known if known is not None else next(measured)
            try:
                values.append(self._record(trial, result))
            except optuna.exceptions.UpdateFinishedTrialError:
                # Another worker failed it as stale (this one was silent past the grace
                # period, e.g. suspended): the result is dropped and the config is free again.
                warnings.warn(f"trial {trial.number} was failed as stale meanwhile", stacklevel=2)
                values.append(float("nan"))
        return values

    def _record(self, trial: optuna.Trial, result: MeasureResult) -> float:
        if not math.isnan(result.compile_seconds):
            trial.set_user_attr("compile_s", round(result.compile_seconds, 4))
        if result.error is not None:
            trial.set_user_attr("error", result.error[:2000])
            trial.set_user_attr("failed_stage", result.stage)
            return float("nan")
        gflops = self.workload.flop_count / result.cost / 1e9
        trial.set_user_attr("gflops", gflops)
        trial.set_user_attr("cost_s", result.cost)
        trial.set_user_attr("costs_s", result.costs)
        if result.cache != CACHE_STATES[0]:  # a cold-cache cost: not comparable with warm ones
            trial.set_user_attr(CACHE_ATTR, result.cache)
        if self.vendor_gflops:
            trial.set_user_attr("vendor_ratio", gflops / self.vendor_gflops)
        return gflops


def make_sampler(
    name: str,
    seed: int | None = None,
    *,
    template: Template | None = None,
    batch_size: int = 8,
    acquisition: str | None = None,
    loss: str | None = None,
    source_studies: Sequence[optuna.Study] | str = (),
    cost_model: str | None = None,
    source_weighting: str | None = None,
) -> optuna.samplers.BaseSampler:
    """An Optuna sampler by name, seeded with `seed` (default None: unseeded).

    Args:
        name: One of `SAMPLERS`: ``costmodel`` (`tensortune.CostModelSampler`, the learned
            search), ``tpe``, ``random`` or ``gp``.
        seed: Seed of every random choice, 0 to 2**32 - 1. Default None.
        template: The template the costmodel sampler proposes for. Default None: taken from
            the study's workload.
        batch_size: Configs the costmodel sampler proposes per model round. Default 8.
        acquisition: One of `tensortune.cost_model.ACQUISITIONS` (``mean``, ``ei`` or
            ``ucb``); costmodel only. Default None (``mean``).
        loss: One of `tensortune.cost_model.LOSSES` (``rank`` or ``reg``); costmodel only.
            Default None (``rank``).
        source_studies: Prior studies that warm-start the cost model, or ``"auto"`` to find
            them in the study's storage (see `tensortune.CostModelSampler`); costmodel only.
            Default ``()``: a cold start.
        cost_model: One of `tensortune.cost_model.COST_MODELS` (``xgb`` or ``treegru``, which
            needs PyTorch); costmodel only. Default None (``xgb``).
        source_weighting: How the `source_studies` weigh, one of
            `tensortune.sampler.source_weighting.SOURCE_WEIGHTINGS` (see
            `tensortune.CostModelSampler`); costmodel only. Default None (``evidence``).
    """
    check_sampler(name, seed)
    if name != "costmodel" and (acquisition, loss, cost_model, source_weighting) != (None,) * 4:
        raise TensortuneError(
            "--acquisition, --loss, --cost-model and --source-weighting apply to the costmodel "
            "sampler only"
        )
    if cost_model == "treegru":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise TensortuneError(
                "the treegru cost model needs PyTorch: pip install 'tensortune[treegru]'"
            )
    if name != "costmodel" and source_studies:
        raise TensortuneError("transfer from prior studies needs the costmodel sampler")
    if name == "costmodel":
        from tensortune.sampler import CostModelSampler

        try:
            return CostModelSampler(
                template,
                cost_model=cost_model or DEFAULT_COST_MODEL,
                acquisition=acquisition or ACQUISITIONS[0],
                loss=loss or LOSSES[0],
                batch_size=batch_size,
                source_studies=source_studies,
                source_weighting=source_weighting or SOURCE_WEIGHTINGS[0],
                seed=seed,
            )
        except ValueError as err:
            raise TensortuneError(str(err)) from err
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        # constant_liar: trials asked in one batch see each other as pending, not as holes.
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    return optuna.samplers.GPSampler(seed=seed)


def check_sampler(name: str, seed: int | None = None) -> None:
    """Raise `TensortuneError` with one line unless `make_sampler` can make sampler `name`
    with `seed` (default None): for callers that must refuse before they write anything.

    Args:
        name: A sampler name, one of `SAMPLERS`.
        seed: A seed, 0 to 2**32 - 1, or None. Default None.
    """
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**32
    ):  # what NumPy's and Optuna's generators take; anything else fails deep inside them
        raise TensortuneError(f"seed must be an integer from 0 to 2**32 - 1, got {seed!r}")
    if name not in SAMPLERS:
        raise TensortuneError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    if name == "gp":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise TensortuneError(
                "the gp sampler needs PyTorch: pip install 'tensortune[baselines]'"
            )


def default_study_name(workload: Workload, target: dict[str, Any], space: str = SPACES[0]) -> str:
    """``"<workload key>@<target>"``, with ``"@<space>"`` for a space other than the
    hand-written template's (default: the template's), so that the two never share a study."""
    name = f"{workload.key}@{describe(target)}"
    return name if space == SPACES[0] else f"{name}@{space}"


def tune(
    workload: Workload | str,
    target: str | dict[str, Any] = "llvm",
    n_trials: int = 64,
    *,
    shape: dict[str, int] | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    sampler: optuna.samplers.BaseSampler | str | None = None,
    seed: int | None = None,
    settings: MeasureSettings | None = None,
    batch_size: int = 8,
    show_progress: bool = True,
    template: Template | None = None,
    artifact_dir: str | None = None,
    device: RpcDevice | None = None,
    total_trials: int | None = None,
    measurer: MeasurerLike | None = None,
    space: str = SPACES[0],
) -> optuna.Study:
    """Tune `workload` on `target` for `n_trials` more trials; returns the Optuna study.

    Running it again with the same storage and study name resumes the study, adding trials.

    Args:
        workload: A `Workload`, or a registered workload name together with `shape`.
        target: Target description. Default ``"llvm"``: this machine, its CPU and cores detected.
        n_trials: Trials to run now (a resumed study keeps its earlier ones). Default 64.
        shape: Shape parameters when `workload` is a name. Default None.
        storage: Optuna storage URL. Default ``sqlite:///tensortune.db`` in the working folder.
            Running trials record a heartbeat there, and trials of killed workers on the
            study are failed as stale before each batch (`tensortune.heartbeats.TrialHeartbeats`).
        study_name: Default ``"<workload key>@<target>"``, e.g.
            ``"matmul(M=64,N=64,K=64)@llvm-znver4"``, with ``"@<device key>"`` appended when
            timing on a remote `device` (its timings are not this machine's). Printable
            characters only: no newline or terminal escape code.
        sampler: An Optuna sampler, or a name from `SAMPLERS` (see `make_sampler`). Default
            ``"costmodel"``: `tensortune.CostModelSampler`, the learned search. A sampler with
            ``source_studies`` has them checked before the study is created or resumed, and
            their names are kept in its ``transfer_sources`` user attr.
        seed: Seed for a sampler given by name, 0 to 2**32 - 1. Default None (unseeded).
        settings: Build and timing settings. Default `MeasureSettings()`.
        batch_size: Trials asked of the sampler at once and built in parallel. Default 8.
        show_progress: Show a progress bar on stderr. Default True. optuna-dashboard shows the
            study's note (workload, target, vendor, sampler settings) and a best-so-far plot
            that is updated after every batch, whatever this says.
        template: Knobs → schedule (see `Objective`). Default None: the target kind's template,
            `CpuTemplate` for llvm, `CudaTemplate` for cuda.
        artifact_dir: Folder where the best kernel's TIR and generated code are kept as
            optuna-dashboard artifacts of its trial, refreshed whenever the best changes.
            Default None: ``<name>-artifacts`` beside a SQLite file (see
            `tensortune.dashboard.default_artifact_dir`); no artifacts with a server storage
            unless a folder all workers share is given.
        device: Time candidates on this device of a TVM RPC tracker, e.g.
            ``RpcDevice("10.0.0.5:9190", "rasp4")``; they are built here for `target`, which
            should describe that device. No vendor baseline is measured then (it would run on
            this machine, not the device): the study has no ``vendor_gflops``. A trial the
            device dies under fails (``failed_stage`` ``"run"``); later ones run on a device the
            tracker hands out next, or fail with ``failed_stage`` ``"device"`` when none comes
            within ``device.wait_for_device``. Default None: time on this machine.
        total_trials: Run until the study holds this many finished trials (see
            `tensortune.trial_records.count_finished`; trials of a killed run are not
            counted), instead of `n_trials` more: the same call then resumes an interrupted
            run to where it was headed. Rechecked before each batch, so that workers sharing
            the study stop together, overshooting by at most the batches others have in
            flight. Default None: run `n_trials` more.
        measurer: What builds and times the configs (see `Objective`), e.g. the benchmarks'
            measurement cache; its ``vendor_baseline()``, where it has one, gives a new
            study's baseline. Default None: a `Measurer` of `template`, `target`, `settings`
            and `device`, as the command line uses.
        space: The search space, one of `tensortune.templates.SPACES`. Default
            ``"template"``: the target kind's hand-written template. ``"metaschedule"`` tunes
            the decisions of MetaSchedule's design space of the workload's TIR
            (`tensortune.templates.MetaScheduleTemplate`), for operators without a template;
            the default study name then ends in ``"@metaschedule"``. Recorded in the study's
            ``space`` user attr, which `best`, `export` and transfer read.
    """
    if isinstance(workload, str):
        workload = get_workload(workload, **(shape or {}))
    if n_trials < 1:
        raise TensortuneError(f"n_trials must be at least 1, got {n_trials}")
    if total_trials is not None and total_trials < 1:
        raise TensortuneError(f"total_trials must be at least 1, got {total_trials}")
    if batch_size < 1:
        raise TensortuneError(f"batch_size must be at least 1, got {batch_size}")
    if space not in SPACES:
        raise TensortuneError(f"unknown search space {space!r}: one of {', '.join(SPACES)}")
    if template is not None and space != SPACES[0]:
        raise TensortuneError("give a template or a search space, not both")
    spec = target_spec(target)
    if spec["kind"] == "cuda" and device is None and not gpu_present():
        raise TensortuneError(
            "no CUDA GPU on this machine to time kernels on: tune on a GPU machine, or time on "
            "one through an RPC tracker (--rpc-tracker, --device-key)"
        )
    if sampler is None or isinstance(sampler, str):
        sampler = make_sampler(
            sampler or SAMPLERS[0], seed, template=template, batch_size=batch_size
        )
    name = default_study_name(workload, spec, space) if study_name is None else study_name
    if study_name is None and device is not None:
        name += f"@{device.key}"
    if not name.strip():
        raise TensortuneError("study name must not be empty")
    if not name.isprintable():  # a newline or terminal escape code would garble every listing
        raise TensortuneError(
            f"study name {name!r} holds a control character; use printable characters only"
        )
    folder = artifact_dir or default_artifact_dir(storage)
    if folder:
        check_artifact_dir(folder)  # now, not after the study was created
    sources = getattr(sampler, "source_studies", ())
    if sources != AUTO:
        check_sources(list(sources), target_key(spec), name)  # before anything is written
    db = open_storage(storage, heartbeat=True)  # workers that die leave no trial RUNNING
    if sources == AUTO:
        found = find_sources(db, workload, target_key(spec), exclude=name)
        sources = [source for source, _ in found]
        sampler.source_studies = sources  # type: ignore[attr-defined]
    study = find_study(db, name, workload, spec, space=space)
    if study is not None and measurer is None:  # a measurer given times as it was set up
        check_same_timing(study, cache_state(settings or MeasureSettings(), spec["kind"]))
    if template is None and space != SPACES[0]:
        template_used: Template | None = template_for(workload, spec, space)
    else:
        template_used = template
    with Objective(
        workload, spec, settings, template=template_used, device=device, measurer=measurer
    ) as objective:
        if study is None:
            baseline = getattr(objective.measurer, "vendor_baseline", None)
            vendor = baseline() if baseline is not None else None
            study = create_study(db, name, workload, spec, vendor, sampler, space)
        else:
            study.sampler = sampler
        if sources:
            study.set_user_attr("transfer_sources", [s.study_name for s in sources])
        publish_note(study, sampler)
        objective.vendor_gflops = study.user_attrs.get("vendor_gflops")
        folder = artifact_dir or default_artifact_dir(storage)
        store = artifact_store(folder) if folder else None
        fail_stale_trials(study)  # before counting: a killed run's trials are not done
        if total_trials is not None:
            n_trials = total_trials - count_finished(study)
        if n_trials > 0:
            run_batches(study, objective, n_trials, batch_size, show_progress, store, total_trials)
    return study
