"""Configs of one template → feature rows, cached per config, lowered in parallel processes."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortune.features.decisions import DecisionFeatures
from tensortune.features.encodings import (
    curve_features,
    curve_length,
    itervar_features,
    itervar_length,
)
from tensortune.features.knob import LENGTH as KNOB_LENGTH
from tensortune.features.knob import KnobFeatures
from tensortune.features.loop_tree import LENGTH as LOOP_TREE_LENGTH
from tensortune.features.loop_tree import loop_tree_features
from tensortune.features.loops import loop_program
from tensortune.features.per_store import LENGTH as PER_STORE_LENGTH
from tensortune.features.per_store import PerStoreExtractor

if TYPE_CHECKING:
    from tensortune.templates import Template

#: Feature sets by name: the relation encoding (length independent of the operator), the
#: per-loop encoding, TVM MetaSchedule's per-store features, and the loop tree itself (the
#: TreeGRU's input, see `tensortune.features.loop_tree`), and knob-level features (no TVM
#: lowering, ~1000x cheaper: the CPU template's loop nest from its knobs,
#: `tensortune.features.knob`; any other template's decisions, `tensortune.features.decisions`).
#: The first is the default.
FEATURE_SETS = ("curve", "itervar", "per-store", "loop-tree", "knob")


def feature_length(feature_set: str) -> int:
    """Length of one row of `feature_set` (with the default encoding sizes; ``"knob"``: the CPU
    template's, see `FeatureExtractor.length` for another template's)."""
    if feature_set == "curve":
        return curve_length(24, 3)
    if feature_set == "itervar":
        return itervar_length(16, 4, 4)
    if feature_set == "per-store":
        return PER_STORE_LENGTH
    if feature_set == "loop-tree":
        return LOOP_TREE_LENGTH
    if feature_set == "knob":
        return KNOB_LENGTH
    raise ValueError(f"unknown feature set {feature_set!r}; choose one of {FEATURE_SETS}")


def knob_features(template: Template) -> KnobFeatures | DecisionFeatures:
    """The knob-level featurizer of `template`: the loop-nest one for the CPU template, the
    decision one for any other."""
    from tensortune.templates import CpuTemplate

    if isinstance(template, CpuTemplate):
        return KnobFeatures(template)
    return DecisionFeatures(template)


def knob_features_fit(template: Template) -> bool:
    """Whether knob-level features can stand in for program features on `template` in a study
    of its own: on the CPU template, and on MetaSchedule's space for a CPU. They rank the
    configs of a study almost as well as ``curve`` there (``studies/space_features.py``) at
    ~1000x less cost, but cannot see a config the postprocessors reject, which on a CPU none
    of 300 random ones was; on a GPU many are (thread and memory limits), and lowering finds
    them before they are built."""
    from tensortune.templates import CpuTemplate, MetaScheduleTemplate

    if isinstance(template, CpuTemplate):
        return True
    return isinstance(template, MetaScheduleTemplate) and template.target.get("kind") == "llvm"


class FeatureExtractor:
    """Feature rows for configs of one template, each config scheduled and walked once.

    A config the template cannot schedule gets a row of NaN, so that a model can rank it last
    without it ever being built.

    Args:
        template: Knobs → schedule; its `knobs` fix the order of a config's values.
        feature_set: One of `FEATURE_SETS`. Default ``"curve"``: it is comparable across
            operators and shapes, which transfer between studies needs, and ranks as well as
            the others within one study (``studies/features.py``).
        cache_size: Configs whose rows are kept (least recently used dropped first).
            Default None: as many as fit in 80 MB (100000 curve rows, more than a long search
            visits; 10000 loop trees).
        processes: Processes that schedule and lower the configs of one call, this one
            included: the others are worker processes shared by every extractor of this
            process (`worker_pool`), started on first use. Default 1: all here. Each
            gets at least `MIN_CHUNK` configs; knob features are never sent.
    """

    def __init__(
        self,
        template: Template,
        feature_set: str = FEATURE_SETS[0],
        cache_size: int | None = None,
        processes: int = 1,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.template = template
        self.feature_set = feature_set
        self.processes = processes
        self._cache: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._per_store: PerStoreExtractor | None = None
        # Knob features need no cache: computing a row costs less than looking one up.
        self.knob = knob_features(template) if feature_set == "knob" else None
        self.length = self.knob.length if self.knob is not None else feature_length(feature_set)
        self.cache_size = cache_size or max(1000, 80_000_000 // (4 * self.length))

    def key(self, config: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(config[knob.name] for knob in self.template.knobs)

    def __call__(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """A ``(len(configs), length)`` float32 array."""
        if self.knob is not None:
            return self.knob(configs)
        keys = [self.key(c) for c in configs]
        missing = {k: c for k, c in zip(keys, configs, strict=True) if k not in self._cache}
        if missing:
            rows = self._extract_split(list(missing.values()))
            for key, row in zip(missing, rows, strict=True):
                self._cache[key] = row
        out = np.empty((len(keys), self.length), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = self._cache[key]
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    def _extract_split(self, configs: list[Mapping[str, Any]]) -> list[np.ndarray]:
        """`_extract`, its configs split between this process and `processes` - 1 workers.
        A chunk a worker fails on (killed, out of memory) is extracted here instead."""
        parts = min(self.processes, len(configs) // MIN_CHUNK)
        if parts <= 1:
            return self._extract(configs)
        bounds = np.linspace(0, len(configs), parts + 1).astype(int)
        chunks = [configs[a:b] for a, b in itertools.pairwise(bounds)]
        # One pool per process count, however many chunks this call makes: its workers
        # start as chunks reach them.
        pool = worker_pool(self.processes - 1)
        futures = [
            pool.submit(extract_rows, self.template, self.feature_set, chunk)
            for chunk in chunks[1:]
        ]
        rows = self._extract(chunks[0])
        for future, chunk in zip(futures, chunks[1:], strict=True):
            try:
                rows += future.result()
            except Exception:  # the worker died: its configs are extracted here
                rows += self._extract(chunk)
        return rows

    def _extract(self, configs: list[Mapping[str, Any]]) -> list[np.ndarray]:
        from tensortune.templates.base import InvalidConfig

        nan = np.full(self.length, np.nan, dtype=np.float32)
        rows: list[np.ndarray] = [nan] * len(configs)
        schedules, where = [], []
        for i, config in enumerate(configs):
            try:
                schedules.append(self.template.apply(config))
            except InvalidConfig:
                continue
            where.append(i)
        if self.feature_set == "per-store":
            if self._per_store is None:
                # MetaSchedule reads GPU features (threads, shared memory) off a cuda target.
                target = getattr(self.template, "target", None)
                self._per_store = PerStoreExtractor(self.template.workload, target)
            for i, row in zip(where, self._per_store(schedules), strict=True):
                rows[i] = row
            return rows
        encode = {
            "curve": curve_features,
            "itervar": itervar_features,
            "loop-tree": loop_tree_features,
        }[self.feature_set]
        for i, schedule in zip(where, schedules, strict=True):
            rows[i] = encode(loop_program(schedule.mod))
        return rows


#: Fewest configs a worker process is handed: with fewer, sending them and their rows costs
#: about what lowering them here would. Calls of 32 conv2d C7 configs took 16.5 ms a config
#: whole and 8.5 split in two (2-core VM), calls of 64 8.4 and 8.3 with chunks of 32 or 16: a
#: screened search step (`tensortune.sampler.screening`) lowers 32 at a time.
MIN_CHUNK = 16


def extract_rows(
    template: Template, feature_set: str, configs: list[Mapping[str, Any]]
) -> list[np.ndarray]:
    """The rows of `configs` (run in a worker process of `worker_pool`)."""
    return FeatureExtractor(template, feature_set)._extract(configs)


_POOLS: dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()


def worker_pool(workers: int) -> Any:
    """The process's pool of `workers` feature workers (`tensortune.worker_pool.WorkerPool`),
    started on first use and closed at exit: every extractor and study of the process shares
    it, so a new sampler (one a batch, in a model's tuning) pays no start-up."""
    from tensortune.worker_pool import WorkerPool

    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = WorkerPool(max_workers=workers)
        return pool


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        with contextlib.suppress(Exception):
            pool.close()
