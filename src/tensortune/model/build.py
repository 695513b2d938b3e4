"""A model built with the tuned kernels: compile with the database, check against the
framework's outputs, time end to end, export."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensortune.errors import TensortuneError, last_line
from tensortune.model.database import RECORDS_FILE, WORKLOADS_FILE
from tensortune.model.frontend import ModelProgram
from tensortune.model.tasks import NO_REWRITES, Rewrites, task_passes

#: Tolerance of the output check, as in the kernels' own check (float32 sums in another order).
RTOL, ATOL = 1e-3, 1e-4


def build(
    program: ModelProgram,
    target: dict[str, Any],
    database_dir: str | None,
    rewrites: Rewrites = NO_REWRITES,
) -> Any:
    """The model compiled for `target` with the kernels of the MetaSchedule database in
    `database_dir` (None: TVM's own build, untuned); a Relax ``VMExecutable``.

    With `rewrites` (default none) the database's kernels are those of tasks extracted with
    them (`tensortune.model.tasks.extract_tasks`): the build makes the same functions, and
    what those compute from the weights alone (a packed layout, a Winograd transform) is
    computed here, once, into constants of the build."""
    import os

    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tensortune.target import make_target

    tvm_target = make_target(target)
    try:
        if database_dir is None:
            return relax.build(program.mod, target=tvm_target)
        database = ms.database.JSONDatabase(
            path_workload=os.path.join(database_dir, WORKLOADS_FILE),
            path_tuning_record=os.path.join(database_dir, RECORDS_FILE),
            allow_missing=False,
        )
        if rewrites.names():
            return _build_rewritten(program.mod, tvm_target, database, rewrites)
        return ms.relax_integration.compile_relax(database, program.mod, tvm_target, None)
    except Exception as err:  # TVM's errors have no common base of their own in 0.27
        raise TensortuneError(
            f"TVM cannot build {program.name} for {target.get('kind')}: "
            f"{last_line(err, 'unknown error')}"
        ) from None


def _build_rewritten(mod: Any, target: Any, database: Any, rewrites: Rewrites) -> Any:
    """`compile_relax`'s pipeline with `rewrites` before the database's kernels go in, and
    each kernel's weight packing split off and folded into the constants after."""
    import tvm
    from tvm import relax

    # TVM 0.27's `relax.pipeline` dispatch misses the CPU backend's lists (the rewrites are
    # for CPU targets only), so they come from the backend's module.
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    # The database pass reads the target and the database from the context it is made in.
    with target, database, tvm.transform.PassContext(opt_level=3):
        passes = [
            *task_passes(target, rewrites),
            relax.transform.MetaScheduleApplyDatabase(enable_warning=False),
            relax.transform.SplitLayoutRewritePreproc(),
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),  # the packing functions, now unused
            *cpu.dataflow_lower_passes(target),
            *cpu.finalize_passes(target),
        ]
        return relax.build(mod, target=target, relax_pipeline=tvm.transform.Sequential(passes))


def run(executable: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs for `inputs`, as arrays."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*(tvm.runtime.tensor(a) for a in inputs))
    return [o.numpy() for o in _flatten(out)]


def _flatten(value: Any) -> list[Any]:
    if hasattr(value, "numpy"):
        return [value]
    return [leaf for item in value for leaf in _flatten(item)]


def check_outputs(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> float:
    """The largest absolute difference; `TensortuneError` where the outputs differ in number,
    shape or (beyond `RTOL`/`ATOL`) value."""
    if len(got) != len(expected):
        raise TensortuneError(
            f"the build returns {len(got)} outputs, the framework {len(expected)}"
        )
    worst = 0.0
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        b = np.asarray(b)
        if a.shape != b.shape:
            raise TensortuneError(f"output {i}: shape {a.shape}, the framework's {b.shape}")
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL):
            diff = float(np.max(np.abs(a.astype(np.float64) - b)))
            raise TensortuneError(f"output {i} differs from the framework's by up to {diff:.3g}")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    return worst


@dataclasses.dataclass(frozen=True)
class Latency:
    """Median seconds of one model run over `repeat` readings, each the mean of `number`."""

    median_s: float
    readings: tuple[float, ...]


def time_model(executable: Any, inputs: Sequence[np.ndarray], repeat: int = 10) -> Latency:
    """End-to-end seconds of one run of the built model (VM included), after a warm-up run.

    Args:
        executable: From `build`.
        inputs: The model's inputs.
        repeat: Readings, each averaging runs of at least 50 ms. Default 10.
    """
    import tvm
    from tvm import relax

    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(a) for a in inputs]
    vm["main"](*args)
    timer = vm.time_evaluator("main", device, number=1, repeat=repeat, min_repeat_ms=50)
    readings = tuple(float(r) for r in timer(*args).results)
    return Latency(statistics.median(readings), readings)
