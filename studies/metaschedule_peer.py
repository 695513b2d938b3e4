"""TVM's own tuner, MetaSchedule, as a peer: `tune_tir` with its XGBoost cost model and
evolutionary search, recorded trial by trial so that its curve is drawn like ours.

Its builds use a fast ``f_build``, just ``tvm.compile(mod, target=target).mod`` (the default
builder spends about 20 s per batch re-importing TVM in a fresh pool), and its runner times each
candidate with the same number / repeat / min_repeat_ms as our `MeasureSettings`. Its best
kernel is then re-timed (and checked against NumPy) by our own measure code through
`ScriptTemplate`.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import statistics
import sys
import time
from typing import Any

import cloudpickle

from tensortune.measure import MeasureSettings
from tensortune.templates.metaschedule import RULE_SETS
from tensortune.workloads import Workload

# Worker processes cannot import this folder: send `fast_build` and `ScriptTemplate` by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin``, which `TuneContext`'s constructor imports, in
    seconds rather than minutes.

    Each of its TVMScript functions calls ``inspect.stack()``, and on every frame of a pseudo-file
    (``<ast>``, ``<frozen importlib._bootstrap>``) ``inspect.getmodule`` walks all of
    ``sys.modules`` before finding nothing: 70 s here with TVM alone, 2 min with torch loaded,
    and so the bulk of a short MetaSchedule run. Such a frame has no module, so answering that
    at once changes nothing the parser sees. A no-op once imported.
    """
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    getmodule = inspect.getmodule

    def known_module(obj: object, _filename: str | None = None) -> Any:
        if _filename is not None and _filename.startswith("<"):
            return None
        return getmodule(obj, _filename)

    inspect.getmodule = known_module
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.getmodule = getmodule


@dataclasses.dataclass
class PeerRun:
    """One MetaSchedule tuning run.

    Attributes:
        gflops: GFLOP/s of each measured candidate in order (0.0 for a failed one).
        elapsed_s: Seconds from the start of the run to the end of each candidate's batch.
        best_script: TVMScript of the fastest candidate.
        wall_s: Seconds the whole run took, start-up included.
    """

    gflops: list[float]
    elapsed_s: list[float]
    best_script: str
    wall_s: float


class ScriptTemplate:
    """A template with no knobs: ``apply({"script": text})`` parses TVMScript back into a
    schedule, so that `tensortune.measure.Measurer` can time a kernel another tuner wrote."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def apply(self, config: dict[str, Any]) -> Any:
        import tvm
        from tvm import s_tir

        return s_tir.Schedule(tvm.script.from_source(config["script"]))


def cuda_peer_target(target: dict[str, Any]) -> dict[str, Any]:
    """A cuda target with the limits MetaSchedule's GPU rules read, as TVM's H100 tag has them
    (1024 threads, 48 KiB shared memory per block without opt-in, warps of 32)."""
    return {
        "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32,
        "registers_per_block": 65536,
        **target,
    }


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's build without its per-batch re-import of TVM's tensor intrinsics: a
    candidate that packs a weight is built without the packing, which its runner's arguments
    leave out too (as MetaSchedule's own ``default_build``)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.compile(mod, target=target).mod


def tune(
    workload: Workload,
    target: dict[str, Any],
    n_trials: int,
    seed: int,
    settings: MeasureSettings,
    work_dir: str,
    trials_per_iter: int = 32,
) -> PeerRun:
    """Run `tune_tir` on `workload` for `n_trials` candidates.

    Args:
        workload: The operator and shape.
        target: Target dict (`tensortune.target.target_spec`); a cuda one must name its limits
            (`cuda_peer_target`). ``num-cores`` sets the search threads (default: all cores).
        n_trials: Candidates to build and time.
        seed: MetaSchedule's random seed.
        settings: Timing settings shared with our tuners (number, repeat, min_repeat_ms).
        work_dir: Folder for MetaSchedule's logs and database.
        trials_per_iter: Candidates per search round. Default 32, the round size MetaSchedule
            was first run with for this comparison (``tune_tir``'s own default is 64).
    """
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    gflops: list[float] = []
    elapsed: list[float] = []
    best = {"gflops": 0.0, "script": ""}
    start = time.perf_counter()
    import_tensor_intrinsics()

    @derived_object
    class Recorder(ms.measure_callback.PyMeasureCallback):
        def apply(self, _scheduler, _task, candidates, built_all, ran_all):  # type: ignore[no-untyped-def]
            now = time.perf_counter() - start
            for candidate, built, ran in zip(candidates, built_all, ran_all, strict=True):
                value = 0.0
                if built.error_msg is None and ran.error_msg is None and ran.run_secs:
                    cost = statistics.median(float(s) for s in ran.run_secs)
                    value = workload.flop_count / cost / 1e9
                gflops.append(value)
                elapsed.append(now)
                if value > best["gflops"]:
                    best.update(gflops=value, script=candidate.sch.mod.script())

    cores = int(target.get("num-cores") or os.cpu_count() or 1)  # a cuda target names none
    os.environ.setdefault("TVM_NUM_THREADS", str(cores))
    # Its per-task tables and XGBoost iterations also go to work_dir/logs.
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), Recorder()]
    evaluator = ms.runner.EvaluatorConfig(
        number=settings.number,
        repeat=settings.repeat,
        min_repeat_ms=settings.min_repeat_ms,
        enable_cpu_cache_flush=False,
    )
    # The rule set named, not "from-target": it is then the space `MetaScheduleTemplate` gives
    # our samplers (on a CPU with VNNI, "from-target" adds int8 rules that fp32 never uses).
    kind = RULE_SETS[target["kind"]]
    space = ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs=kind)
    ms.tune_tir(
        mod=tvm.IRModule({"main": workload.prim_func()}),
        target=tvm.target.Target(target),
        work_dir=work_dir,
        max_trials_global=n_trials,
        num_trials_per_iter=min(trials_per_iter, n_trials),
        cost_model="xgb",
        strategy="evolutionary",
        space=space,
        num_tuning_cores=cores,
        seed=seed,
        builder=ms.builder.LocalBuilder(max_workers=settings.build_workers, f_build=fast_build),
        runner=ms.runner.LocalRunner(evaluator_config=evaluator),
        measure_callbacks=callbacks,
    )
    return PeerRun(gflops, elapsed, best["script"], time.perf_counter() - start)
