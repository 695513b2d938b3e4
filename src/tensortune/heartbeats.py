"""Heartbeats of running trials, so that workers sharing a study may be killed safely.

Workers that tune one study keep their running trials alive with Optuna's heartbeat
(`TrialHeartbeats`); a trial whose worker was killed stops beating and is failed as stale by
the next worker (`fail_stale_trials`), which marks it in the study's system attrs
(`tensortune.trial_records.mark_stale`) so that its config counts as never measured. The
storage enables heartbeats with `tensortune.storage.open_storage(heartbeat=True)`, at the
interval and grace period of `heartbeat_settings`.
"""

from __future__ import annotations

import copy
import datetime
import logging
import os
import threading
import warnings
from types import TracebackType

import optuna
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

from tensortune.errors import TensortuneError

#: Seconds between two heartbeats of a running trial. Default 30: one small write per worker
#: and interval, negligible next to a batch that takes seconds to minutes.
HEARTBEAT_INTERVAL = 30
#: Seconds without a heartbeat after which another worker fails a trial as stale. Default 300:
#: a live worker would have to miss ten beats in a row (storage unreachable, machine
#: suspended), while a killed worker's configs are free again within five minutes.
GRACE_PERIOD = 300
#: Environment variables that override `HEARTBEAT_INTERVAL` and `GRACE_PERIOD` (positive
#: integer seconds), e.g. for tests that kill a worker and cannot wait five minutes.
HEARTBEAT_INTERVAL_ENV = "TENSORTUNE_HEARTBEAT_INTERVAL"
GRACE_PERIOD_ENV = "TENSORTUNE_GRACE_PERIOD"

_log = logging.getLogger(__name__)


def heartbeat_settings() -> tuple[int, int]:
    """``(interval, grace period)`` in seconds: `HEARTBEAT_INTERVAL` and `GRACE_PERIOD`, or
    the environment's `HEARTBEAT_INTERVAL_ENV` and `GRACE_PERIOD_ENV` where set."""
    values = []
    for name, default in (
        (HEARTBEAT_INTERVAL_ENV, HEARTBEAT_INTERVAL),
        (GRACE_PERIOD_ENV, GRACE_PERIOD),
    ):
        text = os.environ.get(name, "").strip()
        try:
            value = int(text) if text else default
        except ValueError:
            value = 0
        if value < 1:
            raise TensortuneError(f"{name} must be a positive number of seconds, got {text!r}")
        values.append(value)
    interval, grace = values
    if grace <= interval:  # a live trial would go stale between two of its beats
        raise TensortuneError(
            f"the grace period ({grace} s) must be longer than the heartbeat interval "
            f"({interval} s); see {GRACE_PERIOD_ENV} and {HEARTBEAT_INTERVAL_ENV}"
        )
    return interval, grace


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the study's RUNNING trials whose heartbeat stopped longer than the grace period ago
    (their worker was killed) and mark them stale, so their configs are free again.

    `tensortune.tune` calls it before every batch, as ``study.optimize`` does before every
    trial. Nothing happens on a storage without heartbeat (`open_storage`'s ``heartbeat``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    TrialHeartbeats.fail_unbeaten(study)  # killed before their first beat: Optuna skips those


class TrialHeartbeats:
    """Heartbeats of the trials an ask/tell loop has in flight, recorded on one small thread.

    Optuna records heartbeats only inside ``study.optimize`` (a thread per trial); `tune`
    asks and tells whole batches, so it asks through `ask`, which records a first heartbeat at
    once (Optuna never fails a trial that has none) and keeps beating for the trial until
    `clear`. Use it as a context manager, or `close` it, to stop the thread. On a storage
    without heartbeat it only asks.

    Args:
        study: The study whose trials to keep alive.
    """

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        storage = study._storage
        self._storage = storage if is_heartbeat_enabled(storage) else None
        self._trial_ids: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TrialHeartbeats:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def ask(self) -> optuna.Trial:
        """``study.ask()``, the new trial kept alive until `clear`."""
        with warnings.catch_warnings():
            # Optuna warns that heartbeats are meant for study.optimize: this class is the
            # part of study.optimize that an ask/tell loop lacks.
            warnings.filterwarnings("ignore", message="Heartbeat of storage", category=UserWarning)
            trial = self.study.ask()
        if self._storage is not None:
            assert isinstance(self._storage, BaseHeartbeat)
            self._storage.record_heartbeat(trial._trial_id)
            with self._lock:
                self._trial_ids.append(trial._trial_id)
            if self._thread is None:
                self._stop.clear()  # asked again after `close`
                self._thread = threading.Thread(
                    target=self._beat, name="tensortune-heartbeat", daemon=True
                )
                self._thread.start()
        return trial

    def clear(self) -> None:
        """Stop beating for the trials asked so far (call it once they are told)."""
        with self._lock:
            self._trial_ids.clear()

    def close(self) -> None:
        """Stop the thread; the trials still in flight then go stale after the grace period."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @staticmethod
    def fail_unbeaten(study: optuna.Study) -> None:
        """Fail the study's RUNNING trials that never recorded a heartbeat and started longer
        than the grace period ago, and mark them stale as Optuna's own stale trials are.

        Such a trial's worker was killed between ``study.ask`` and the first heartbeat, which
        `ask` records at once; Optuna's ``fail_stale_trials`` never fails a trial without one.
        Start times are the asking worker's clock: workers on machines whose clocks differ by
        more than the grace period should not share a study. Nothing happens on a storage
        without heartbeat. `fail_stale_trials` calls it.
        """
        storage = study._storage
        rdb = getattr(storage, "_backend", storage)  # under Optuna's _CachedStorage
        if not isinstance(rdb, optuna.storages.RDBStorage):
            return
        interval = rdb.get_heartbeat_interval()
        if interval is None:
            return
        grace = rdb.grace_period or 2 * interval  # Optuna's own default
        cutoff = datetime.datetime.now() - datetime.timedelta(seconds=grace)
        running = storage.get_all_trials(
            study._study_id, deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
        )
        old = {t._trial_id for t in running if t.datetime_start and t.datetime_start < cutoff}
        if not old:
            return
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        beat = models.TrialHeartbeatModel
        with _create_scoped_session(rdb.scoped_session) as session:
            rows = session.query(beat.trial_id).filter(beat.trial_id.in_(old)).all()
        callback = rdb.get_heartbeat_stale_trial_callback()
        for trial_id in sorted(old - {row[0] for row in rows}):
            try:
                failed = storage.set_trial_state_values(
                    trial_id, state=optuna.trial.TrialState.FAIL
                )
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker was first
                continue
            if failed and callback is not None:
                callback(study, copy.deepcopy(storage.get_trial(trial_id)))

    def _beat(self) -> None:
        assert isinstance(self._storage, BaseHeartbeat)
        interval = self._storage.get_heartbeat_interval()
        assert interval is not None
        while not self._stop.wait(interval):
            with self._lock:
                trial_ids = list(self._trial_ids)
            for trial_id in trial_ids:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception as err:  # a storage hiccup: the next beat tries again
                    _log.warning("heartbeat of trial %d not recorded: %s", trial_id, err)
