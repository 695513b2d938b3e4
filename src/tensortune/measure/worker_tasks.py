"""Functions that run inside the build and run worker processes.

They take only plain Python arguments (a template, a workload, a config dict, a target dict,
paths), sent with cloudpickle, never TVM IR: tvm-ffi 0.1.15 segfaults when it pickles or
serializes IR that holds a ``PrimType``, and a workload registered in a user's script travels
by value.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortune.measure.cache_sweep import dirty_caches
from tensortune.measure.settings import CACHE_STATES, MeasureSettings
from tensortune.templates.weight_packing import pack_arguments
from tensortune.workloads import Workload

if TYPE_CHECKING:
    from tensortune.templates import Template
    from tensortune.templates.weight_packing import PackedWeight

#: TVM device name of each target kind.
DEVICE_OF_KIND = {"llvm": "cpu", "c": "cpu", "cuda": "cuda"}


def cache_state(settings: MeasureSettings, kind: str) -> str:
    """How `settings` leave the caches before each timed run on a target of `kind`
    (`MeasureSettings.cache`): warm on anything but a CPU, whose timings ignore it."""
    return settings.cache if DEVICE_OF_KIND.get(kind) == "cpu" else CACHE_STATES[0]


#: TVM's runtime function that evicts a call's arguments but the first from the CPU caches.
FLUSH_CACHE = "cache_flush_cpu_non_first_arg"


def cache_preprocess(cache: str) -> str:
    """The global function TVM's ``time_evaluator`` runs before each timed run to leave the
    caches in state `cache` (one of `CACHE_STATES`): none (``""``) for warm, `FLUSH_CACHE`
    for flushed, the sweep of `tensortune.measure.cache_sweep` for dirty."""
    if cache == CACHE_STATES[0]:
        return ""
    return FLUSH_CACHE if cache == "flushed" else dirty_caches()


# Inputs and reference outputs per workload, kept for the life of the run worker.
_DATA: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}


def warm_up() -> None:
    """Import TVM so the first timed task does not pay for it."""
    import tvm  # noqa: F401


def build(
    template: Template, config: dict[str, Any], target: dict[str, Any], path: str
) -> tuple[float, tuple[PackedWeight, ...]]:
    """Schedule `config` with `template`, compile it and export it to `path`; returns compile
    seconds and the arguments its ``main`` takes packed (see
    `tensortune.templates.compile.compile_config`)."""
    from tensortune.templates.compile import compile_config

    start = time.perf_counter()
    _, executable, packed = compile_config(template, config, target)
    executable.export_library(path)
    return time.perf_counter() - start, packed


def workload_data(workload: Workload) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Seeded inputs and the NumPy reference outputs for `workload`, cached.

    The reference runs on one BLAS thread: a multi-threaded BLAS leaves its threads spinning
    after a call, and kernels timed next to them in this process measured up to 100x slow."""
    from threadpoolctl import threadpool_limits

    if workload.key not in _DATA:
        inputs = workload.random_inputs(seed=0)
        with threadpool_limits(limits=1):
            _DATA[workload.key] = (inputs, workload.reference(inputs))
    return _DATA[workload.key]


def run(
    path: str,
    workload: Workload,
    settings: MeasureSettings,
    device_kind: str = "llvm",
    packed: Sequence[PackedWeight] = (),
) -> list[float] | str:
    """Load the kernel at `path`, check one run against NumPy, then time it with `settings`
    (``number``, ``repeat``, ``min_repeat_ms``, ``check_results``, ``rtol``) on this machine's
    device of the target kind `device_kind` (default ``"llvm"``: the CPU; ``"cuda"``: GPU 0).
    `packed`: the arguments its ``main`` takes packed, which its ``prepack`` packs before the
    check and the timing (default none; see `build`).

    A kernel so slow that the full timing would not fit in half of ``settings.run_timeout`` is
    timed once: it gets a (bad) cost the sampler can learn from instead of a timeout.
    Returns the costs in seconds, or a string saying why the result is wrong.
    """
    import tvm

    module = tvm.runtime.load_module(path)
    dev = tvm.device(DEVICE_OF_KIND.get(device_kind, device_kind), 0)
    return check_and_time(module, dev, workload, settings, packed)


def check_and_time(
    module: Any,
    dev: Any,
    workload: Workload,
    settings: MeasureSettings,
    packed: Sequence[PackedWeight] = (),
) -> list[float] | str:
    """Run the loaded `module` once on `dev` (this machine's or an RPC session's), check its
    outputs against NumPy, then time it; the arguments and the result are `run`'s."""
    import tvm

    inputs, expected = workload_data(workload)
    # Outputs start as NaN so a kernel that skips elements cannot pass the check.
    outputs = [np.full(e.shape, np.nan, dtype=e.dtype) for e in expected]
    args = [tvm.runtime.tensor(a, dev) for a in [*inputs, *outputs]]
    # Packed once, outside the timing, as a built model packs its weights at build time.
    args = pack_arguments(module, args, packed, dev)
    # Wall time of the first run (a remote round trip included): it only decides the short cut.
    start = time.perf_counter()
    module["main"](*args)
    dev.sync()
    first = time.perf_counter() - start
    number, repeat, min_repeat_ms = settings.number, settings.repeat, settings.min_repeat_ms
    if first * (2 + number * repeat) > settings.run_timeout / 2:
        number, repeat, min_repeat_ms = 1, 1, 0
    if settings.check_results:
        for index, want in enumerate(expected):
            error = mismatch(args[len(inputs) + index].numpy(), want, settings.rtol)
            if error:
                return f"wrong result in output {index}: {error}"
    preprocess = ""
    if (
        settings.cache != CACHE_STATES[0]
        and dev.dlpack_device_type() == tvm.cpu(0).dlpack_device_type()
    ):
        # One run per cost: runs after the first in a cost would find the arguments cached.
        number, min_repeat_ms = 1, 0
        preprocess = cache_preprocess(settings.cache)
    timer = module.time_evaluator(
        "main", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, f_preproc=preprocess
    )
    return [float(c) for c in timer(*args).results]


def mismatch(got: np.ndarray, want: np.ndarray, rtol: float) -> str | None:
    """Why `got` differs from `want` (relative to the largest reference value), or None."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    scale = max(scale, 1e-6)
    if not np.all(np.isfinite(got)):
        return f"{int(np.sum(~np.isfinite(got)))} of {got.size} values are not finite"
    worst = float(np.max(np.abs(got.astype(np.float64) - want)) / scale) if want.size else 0.0
    if worst > rtol:
        return f"max relative error {worst:.2e} exceeds {rtol:.0e}"
    return None
