"""A measurement cache for the benchmarks, never for ``tensortune tune``.

Comparing samplers on real timings costs hours and drowns in the machine's noise. With this
cache each (workload, target, config) is built, checked and timed once, by our `Measurer`, and
the result is kept in a SQLite file (``studies/work/measurements.db`` by default); whenever any
benchmarked tuner proposes that config again it gets the stored result, so the same config has
the same value for every tuner and a second sampler variant pays only for its new configs.

What a stored result is keyed by, besides the config (canonical JSON, sorted keys):

- ``workload``: the workload's key, e.g. ``matmul(M=64,N=64,K=64)``;
- ``target``: the target dict as `tensortune.storage.target_key` writes it (JSON, sorted keys);
- ``template``: the template's class and a digest of the template and operator sources, so that
  a change of how a config is scheduled (or of what the operator computes) measures afresh;
- ``timing``: the settings that shape a value (``number``, ``repeat``, ``min_repeat_ms``, the
  check and its tolerance); timeouts and build workers are not part of it.

Failed candidates are cached too (a config that fails to build, crashes or computes a wrong
result does so again), except failures at stage ``timeout`` or ``device``, which depend on the
machine's load or a remote device's presence at the time. A stored build that took longer than
`inner`'s ``build_timeout`` reads as a timeout, as it would have been measured under it.
Changes to the timing code itself are not detected: delete the file (or give another
``--cache``) after one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import hashlib
import inspect
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import Any

from common import SETTINGS, workload_of

import tensortune.templates
import tensortune.workloads
from tensortune.measure import Measurer, MeasureResult
from tensortune.storage import target_key
from tensortune.target import target_spec

#: Failure stages that say nothing lasting about a config: not cached.
TRANSIENT_STAGES = frozenset({"timeout", "device"})
#: Study user attrs the benchmarks record the cache's counts in.
HITS_ATTR = "bench:cache_hits"
MISSES_ATTR = "bench:cache_misses"

_KEY = ("workload", "target", "template", "timing", "config")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    workload TEXT NOT NULL,
    target TEXT NOT NULL,
    template TEXT NOT NULL,
    timing TEXT NOT NULL,
    config TEXT NOT NULL,
    costs TEXT NOT NULL,
    error TEXT,
    stage TEXT,
    compile_seconds REAL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (workload, target, template, timing, config)
)
"""
_WHERE = " AND ".join(f"{column} = ?" for column in _KEY)


def check_cache(path: str | os.PathLike[str]) -> None:
    """Create the cache file at `path` (and its folder) if missing, and make sure it is one;
    raises ValueError with the reason otherwise (a folder, an unwritable place, a file that
    is not SQLite or holds another table of that name)."""
    try:
        with contextlib.closing(_open(os.fspath(path))) as db:
            db.execute(
                f"SELECT costs, error, stage, compile_seconds FROM measurements WHERE {_WHERE}",
                ("",) * len(_KEY),
            ).fetchall()
    except (OSError, sqlite3.Error) as err:
        raise ValueError(f"cannot use {os.fspath(path)!r} as a measurement cache: {err}") from err


def _open(path: str) -> sqlite3.Connection:
    """A connection to the cache at `path`, its folder and table created if missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # One connection shared by threads (CachedMeasurer uses it under its lock only).
    db = sqlite3.connect(path, timeout=60.0, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")  # other benchmark processes may read meanwhile
        db.execute(_SCHEMA)
        db.commit()
    except BaseException:
        db.close()
        raise
    return db


def template_key(template: Any) -> str:
    """The template's class name and a digest of the sources that decide what a config
    builds: `tensortune.templates`, the operators of `tensortune.workloads`, and the module
    folder of the template's own class when it lives elsewhere."""
    cls = type(template)
    folders = {os.path.dirname(tensortune.templates.__file__)}
    with contextlib.suppress(TypeError, OSError):  # e.g. a class defined in a notebook
        source = inspect.getsourcefile(cls)
        if source:
            folders.add(os.path.dirname(os.path.abspath(source)))
    files = sorted(path for folder in folders for path in glob.glob(os.path.join(folder, "*.py")))
    files.append(os.path.join(os.path.dirname(tensortune.workloads.__file__), "operators.py"))
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            digest.update(os.path.basename(path).encode() + b"\0" + f.read() + b"\0")
    return f"{cls.__module__}.{cls.__qualname__}@{digest.hexdigest()[:12]}"


def config_key(config: dict[str, Any]) -> str:
    """Canonical JSON of a config: sorted keys, no spaces."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


class CachedMeasurer:
    """A `Measurer` behind a SQLite cache of its results (see the module docstring); it
    satisfies `tensortune.measure.MeasurerLike`, so ``tensortune.tune(..., measurer=...)``
    takes it.

    A batch looks every config up, measures only the misses, in one batch of `inner` (so they
    are built in parallel), stores them and returns all results in order. Results carry no
    ``library``. Thread-safe: threads of ``study.optimize(n_jobs=...)`` share it, and a config
    that one thread is measuring is waited for by the others, never measured twice. Several
    processes may share the file (WAL); the first result stored for a key is the one every
    reader gets.

    Args:
        inner: Measures the misses; its workload, target, template and settings make the key.
            Closed by `close`.
        path: The SQLite file, created (with its folder) on the first `measure`.

    Attributes:
        hits: Configs answered without measuring: found in the file, measured earlier in the
            same batch, or being measured by another thread.
        misses: Configs `inner` measured.
    """

    def __init__(self, inner: Measurer, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = os.fspath(path)
        settings = inner.settings
        self._prefix = (
            inner.workload.key,
            target_key(inner.target),
            template_key(inner.template),
            json.dumps(
                {
                    "number": settings.number,
                    "repeat": settings.repeat,
                    "min_repeat_ms": settings.min_repeat_ms,
                    "check_results": settings.check_results,
                    "rtol": settings.rtol,
                },
                sort_keys=True,
            ),
        )
        self.hits = 0
        self.misses = 0
        self._db: sqlite3.Connection | None = None
        # Guards the connection, the counters and _pending; never held while measuring.
        self._lock = threading.Lock()
        # Config key -> the result another thread is measuring now.
        self._pending: dict[str, concurrent.futures.Future[MeasureResult]] = {}

    def __enter__(self) -> CachedMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close `inner` and the file; never raises."""
        with contextlib.suppress(Exception):
            self.inner.close()
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()

    def vendor_baseline(self) -> tuple[str, float] | None:
        """`inner`'s vendor baseline, measured afresh (never cached)."""
        return self.inner.vendor_baseline()

    def measure(self, configs: Sequence[dict[str, Any]]) -> list[MeasureResult]:
        """One result per config, in order: stored ones from the file, the others measured in
        one batch of `inner` and stored (failures at a transient stage are returned, not
        stored)."""
        keys = [config_key(c) for c in configs]
        results: list[MeasureResult | None] = [None] * len(keys)
        waits: dict[int, concurrent.futures.Future[MeasureResult]] = {}
        mine: dict[str, tuple[int, concurrent.futures.Future[MeasureResult]]] = {}
        with self._lock:
            db = self._connect()
            for i, key in enumerate(keys):
                if key in mine:  # the same config twice in one batch
                    waits[i] = mine[key][1]
                elif key in self._pending:
                    waits[i] = self._pending[key]
                elif (stored := self._read(db, key)) is not None:
                    results[i] = stored
                else:
                    future: concurrent.futures.Future[MeasureResult] = concurrent.futures.Future()
                    mine[key] = (i, future)
                    self._pending[key] = future
                    continue
                self.hits += 1
            self.misses += len(mine)
        try:
            measured = self.inner.measure([configs[i] for i, _ in mine.values()]) if mine else []
            with self._lock:
                db = self._connect()
                for (key, (i, future)), result in zip(mine.items(), measured, strict=True):
                    results[i] = self._store(db, key, result)
                    del self._pending[key]
                    future.set_result(results[i])
        except BaseException:
            # Threads waiting on these configs must not wait forever.
            with self._lock:
                for key, (_, future) in mine.items():
                    if not future.done():
                        self._pending.pop(key, None)
                        future.set_exception(RuntimeError("its measurement was interrupted"))
            raise
        for i, future in waits.items():
            results[i] = future.result()
        out = []
        for result in results:
            assert result is not None
            out.append(_copy(result))
        return out

    # -- the file; callers hold self._lock --------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = _open(self.path)
        return self._db

    def _read(self, db: sqlite3.Connection, key: str) -> MeasureResult | None:
        row = db.execute(
            f"SELECT costs, error, stage, compile_seconds FROM measurements WHERE {_WHERE}",
            (*self._prefix, key),
        ).fetchone()
        if row is None:
            return None
        costs, error, stage, seconds = row
        limit = self.inner.settings.build_timeout
        if error is None and seconds is not None and seconds > limit:
            return MeasureResult(
                error=f"build timed out after {limit:g} s (it took {seconds:.1f} s when stored)",
                stage="timeout",
            )
        return MeasureResult(
            costs=json.loads(costs),
            error=error,
            stage=stage,
            compile_seconds=float("nan") if seconds is None else seconds,
        )

    def _store(self, db: sqlite3.Connection, key: str, result: MeasureResult) -> MeasureResult:
        """Store `result` unless it failed transiently; the result stored for `key`, which is
        another process's where one stored it first."""
        fresh = MeasureResult(
            costs=list(result.costs),
            error=result.error,
            stage=result.stage,
            compile_seconds=result.compile_seconds,
        )
        if result.error is not None and result.stage in TRANSIENT_STAGES:
            return fresh
        seconds = None if math.isnan(result.compile_seconds) else result.compile_seconds
        with db:
            db.execute(
                "INSERT OR IGNORE INTO measurements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *self._prefix,
                    key,
                    json.dumps(result.costs),
                    result.error,
                    result.stage,
                    seconds,
                    time.time(),
                ),
            )
        stored = self._read(db, key)
        return stored if stored is not None else fresh


def _copy(result: MeasureResult) -> MeasureResult:
    """A result of its own for each caller (the Objective never changes one, but its costs
    list is shared otherwise)."""
    return MeasureResult(
        costs=list(result.costs),
        error=result.error,
        stage=result.stage,
        compile_seconds=result.compile_seconds,
    )


def tune_cached(
    workload: Any,
    target: dict[str, Any],
    cache: str | None,
    settings: Any,
    space: str = "template",
    **tune_args: Any,
) -> Any:
    """`tensortune.tune` of `workload` on `target` in `space` (default ``"template"``) with
    `settings`, measuring through the cache file `cache` (None: measuring everything afresh);
    the study records `HITS_ATTR` / `MISSES_ATTR` when a cache was used. `tune_args` go to
    `tensortune.tune`."""
    measurer = None
    if cache is not None:
        template = tensortune.templates.template_for(workload, target, space)
        inner = Measurer(template, target, settings)
        measurer = CachedMeasurer(inner, cache)
    try:
        study = tensortune.tune(
            workload, target, settings=settings, measurer=measurer, space=space, **tune_args
        )
    finally:
        if measurer is not None:  # tune closes it too, except when it refused to start
            measurer.close()
    if measurer is not None:
        study.set_user_attr(HITS_ATTR, measurer.hits)
        study.set_user_attr(MISSES_ATTR, measurer.misses)
    return study


def tune_label(
    label: str,
    name: str,
    sampler: Any,
    trials: int,
    storage: str,
    cache: str | None,
    space: str = "template",
) -> Any:
    """`tune_cached` as the benchmarks tune: the workload `label` names
    (`common.workload_of`) on this machine's llvm target in `space` (default ``"template"``)
    with `common.SETTINGS`, until study `name` of `storage` holds `trials` finished trials,
    with `sampler`, no progress bar. The benchmarks call it on fresh studies only:
    `common.finished` deletes an interrupted one first, so that it runs again from scratch."""
    return tune_cached(
        workload_of(label),
        target_spec("llvm"),
        cache,
        SETTINGS,
        space,
        total_trials=trials,
        storage=storage,
        study_name=name,
        sampler=sampler,
        show_progress=False,
    )
