"""The caches as a kernel might find them in a whole model: full of the other kernels' writes.

A kernel of a model runs after the model's other kernels, which read their own weights and
wrote their outputs. Timed alone, on repeated runs, it finds its data cached; timed after TVM's
``cache_flush_cpu_non_first_arg``, it finds the caches clean. `dirty_caches` registers a sweep
that writes `SWEEP_MIB` MiB on every thread, which TVM's timer runs before each timed run for
`tensortune.measure.settings.MeasureSettings`' ``cache="dirty"``. On a 2-vCPU Intel guest
ResNet-18's tuned kernels took 1.15-1.24x their time alone in the model (each call timed by
TVM's timer after the run's other calls), 1.05-1.09x after this sweep and 1.27-1.33x after TVM's
flush, one call a cost (``studies/README.md``): the sweep reproduces part of the model's state.
"""

from __future__ import annotations

from typing import Any

#: The name `dirty_caches` registers its sweep under, for ``time_evaluator``'s ``f_preproc``.
DIRTY_CACHES = "tensortune.dirty_caches"
#: MiB the sweep writes: about what one run of ResNet-18 reads and writes (47 MB of weights
#: and its activations), far more than the cores' L2 caches.
SWEEP_MIB = 64
#: Floats written by one vector store of the sweep.
LANES = 16

# The compiled sweep and its buffer, made once per process.
_SWEEP: list[Any] = []


def dirty_caches() -> str:
    """Compile (once per process) a kernel that adds 1 to every float of a `SWEEP_MIB` MiB
    buffer on all of TVM's threads, register it as `DIRTY_CACHES` (its arguments, the timed
    kernel's, are ignored) and return that name."""
    import numpy as np
    import tvm
    from tvm import te

    if _SWEEP:
        return DIRTY_CACHES
    count = SWEEP_MIB * 2**20 // 4
    data = te.placeholder((count,), "float32", name="data")
    swept = te.compute((count,), lambda i: data[i] + 1.0, name="swept")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([data, swept]))
    (loop,) = schedule.get_loops(schedule.get_sblock("swept"))
    outer, inner = schedule.split(loop, [None, LANES])
    schedule.parallel(outer)  # on every thread, as the model's kernels ran: every core's cache
    schedule.vectorize(inner)
    sweep = tvm.compile(schedule.mod, target=tvm.target.Target({"kind": "llvm"}))["main"]
    buffer = tvm.runtime.tensor(np.zeros(count, np.float32))
    _SWEEP.extend([sweep, buffer])

    def run(*_: Any) -> None:
        sweep(buffer, buffer)  # in place: every line read, then written

    tvm.register_global_func(DIRTY_CACHES, run, override=True)
    return DIRTY_CACHES
