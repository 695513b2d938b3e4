"""Trials in batches: ask a batch, build and time it in parallel, tell it, and show progress.

Optuna's ``study.optimize`` runs one trial per thread; measuring is cheaper in batches that
build in parallel and time one after another, so `tensortune.tune` asks and tells whole
batches through `run_batches`. Trials stay alive with heartbeats while their batch runs, and
a Ctrl-C is held back where it would leave a trial RUNNING with no one to tell it.
"""

from __future__ import annotations

import contextlib
import gc
import math
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import optuna
from optuna.trial import TrialState

from tensortune.dashboard import publish_kernel, publish_progress
from tensortune.heartbeats import TrialHeartbeats, fail_stale_trials
from tensortune.trial_records import count_finished

if TYPE_CHECKING:
    from tensortune.templates import Template


class BatchObjective(Protocol):
    """What `run_batches` measures with (`tensortune.tuning.Objective`)."""

    template: Template
    target: dict[str, Any]

    def evaluate(self, trials: Sequence[optuna.Trial]) -> list[float]:
        """GFLOP/s per trial (NaN: failed), each trial's user attrs recorded."""
        ...


def run_batches(
    study: optuna.Study,
    objective: BatchObjective,
    n_trials: int,
    batch_size: int,
    show_progress: bool,
    store: optuna.artifacts.FileSystemArtifactStore | None = None,
    total_trials: int | None = None,
) -> None:
    """Run `n_trials` trials of `study` in batches of `batch_size` measured by `objective`.

    Args:
        study: The study to ask and tell.
        objective: Measures a batch of asked trials (`BatchObjective`).
        n_trials: Trials to run.
        batch_size: Trials asked at once and measured together.
        show_progress: Show a progress bar on stderr.
        store: Where the kernel code of each new best trial is kept as an optuna-dashboard
            artifact. Default None: none kept.
        total_trials: Stop once the study holds this many finished trials, whoever ran them
            (`tensortune.trial_records.count_finished`). Default None: `n_trials` more.
    """
    from tqdm.auto import tqdm

    bar = tqdm(total=n_trials, disable=not show_progress, unit="trial", desc=study.study_name)
    start, done = time.perf_counter(), 0
    heartbeats = TrialHeartbeats(study)  # what study.optimize would do for each trial
    try:
        while done < n_trials:
            fail_stale_trials(study)  # a killed worker's trials: FAIL, their configs free again
            todo = n_trials - done
            if total_trials is not None:  # other workers may have brought the study nearer
                todo = min(todo, total_trials - count_finished(study))
                if todo <= 0:
                    break
            trials: list[optuna.Trial] = []
            values: list[float] | None = None
            told = False
            try:
                for _ in range(min(batch_size, todo)):
                    # A Ctrl-C inside the ask, after Optuna created the trial, would leave it
                    # RUNNING with no one holding it; it waits until the trial is in `trials`.
                    with _interrupts_deferred():
                        trials.append(heartbeats.ask())
                values = objective.evaluate(trials)
                if store is not None:
                    # Before the tell: Optuna refuses artifacts on a finished trial. An
                    # interrupt here still tells the measured values (below).
                    _publish_new_best(study, trials, values, objective, store)
                with _interrupts_deferred():  # a Ctrl-C now waits until the batch is told
                    _tell_batch(study, trials, values)
                    told = True
            except BaseException as err:
                # Interrupted (or failed) mid-batch: what was measured is told, the rest is
                # closed so that none stays RUNNING; a second Ctrl-C waits until then.
                if not told:
                    with _interrupts_deferred(), contextlib.suppress(Exception):
                        _release_storage_calls(err)
                        _close_batch(study, trials, values)
                raise
            heartbeats.clear()
            done += len(trials)
            bar.update(len(trials))
            publish_progress(study)
            best = _best_value(study)
            if best is not None:
                bar.set_postfix(
                    best=f"{best:.1f} GFLOP/s", elapsed=f"{time.perf_counter() - start:.0f}s"
                )
    finally:
        heartbeats.close()
        bar.close()


def _release_storage_calls(err: BaseException) -> None:
    """Let go of what a storage call that `err` cut short still holds.

    A Ctrl-C inside a SQLite statement makes SQLAlchemy drop the connection without closing
    its cursor; while the traceback's frames keep that cursor, SQLite keeps the connection
    open, and with it the database lock, so every tell after it waits 5 s and fails. Clearing
    the frames' locals (not the lines a traceback prints) and collecting their cycles closes
    it."""
    traceback.clear_frames(err.__traceback__)
    gc.collect()


def _tell_batch(
    study: optuna.Study, trials: Sequence[optuna.Trial], values: Sequence[float]
) -> None:
    for trial, value in zip(trials, values, strict=True):
        # skip_if_finished: another worker may have failed it as stale meanwhile
        if math.isnan(value):
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            study.tell(trial, value, skip_if_finished=True)


def _close_batch(
    study: optuna.Study, trials: Sequence[optuna.Trial], values: Sequence[float] | None
) -> None:
    """Tell each of a batch's `trials` that an interrupt or an error cut short: its value
    when `values` are known (the batch was measured), else what its user attrs show was
    recorded; a trial with no result is failed with ``failed_stage`` ``"interrupted"``, so
    that the sampler neither counts its config as taken nor learns from it. Never raises for
    one trial: the storage may be what failed."""
    for index, trial in enumerate(trials):
        with contextlib.suppress(Exception):
            if values is not None:
                _tell_batch(study, [trial], [values[index]])
                continue
            attrs = trial.user_attrs
            if "costs_s" in attrs:  # recorded whole (`Objective._record` sets it last)
                study.tell(trial, attrs["gflops"], skip_if_finished=True)
                continue
            if "failed_stage" not in attrs:
                trial.set_user_attr("failed_stage", "interrupted")
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) inside the block, then act on it at the end as the handler in
    place would have (`KeyboardInterrupt` by default). Outside the main thread, where Python
    never delivers SIGINT, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[tuple[int, Any]] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: seen.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if seen:
            if callable(old):
                old(*seen[0])
            elif old != signal.SIG_IGN:
                raise KeyboardInterrupt


def _publish_new_best(
    study: optuna.Study,
    trials: Sequence[optuna.Trial],
    values: Sequence[float],
    objective: BatchObjective,
    store: optuna.artifacts.FileSystemArtifactStore,
) -> None:
    """Attach the kernel code of this batch's best trial, if it beats the study's best."""
    measured = [(v, t) for t, v in zip(trials, values, strict=True) if not math.isnan(v)]
    if not measured:
        return
    value, leader = max(measured, key=lambda pair: pair[0])
    best = _best_value(study)
    if best is not None and value <= best:
        return
    try:
        publish_kernel(leader, objective.template, objective.target, store)
    except Exception as err:  # the kernel was measured; losing its code listing is no reason
        warnings.warn(f"could not save trial {leader.number}'s kernel code: {err}", stacklevel=2)


def _best_value(study: optuna.Study) -> float | None:
    try:
        return study.best_value
    except ValueError:  # no completed trial yet
        return None
