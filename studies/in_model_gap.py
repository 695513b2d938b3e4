"""Why our kernels take longer in a model than alone: each task's best kernel timed alone
(repeated runs on the same warm data, as tuning times it) and in the model (all its calls of
a run, each timed by TVM's timer right after the run's other calls, replayed:
`kernel_profile.call_times`), in one process, at the thread count of this process
(``TVM_NUM_THREADS``). Run it once per thread count and compare: a gap that shrinks on one
thread comes from the threads (data a kernel's other thread wrote, a pool waking up), one that
stays comes from the data (weights and activations cold in the model). Each kernel is also
called a second time in the model, right after its own call, on the same buffers (the same
replay, through its own call): a gap that the repeat closes is the caches the model's other
kernels left, one it keeps is the model's buffers or the kernel's place in the run.

    TVM_NUM_THREADS=1 python studies/in_model_gap.py --storage sqlite:///work/resnet18.db \
        --out studies/results/in-model-gap/threads-1.csv
    TVM_NUM_THREADS=2 python studies/in_model_gap.py ... --out .../threads-2.csv

With ``--prepack-weights`` the storage's studies are those of the packed arm
(``model_tuning.py --prepack-weights``, its ``<model>-prepacked.db``): a kernel that packs its
weight is timed alone as the model calls it, on the weight packed once by its own ``prepack``
function (`tensortune.templates.weight_packing`), and found in the model under the name TVM's
``SplitLayoutRewritePreproc`` gives it (`kernel_profile.IN_MODEL_SUFFIX`).

The storage holds a finished `model_tuning.py` run's task studies (its ``<model>.db``); nothing
is tuned. Writes one row per task: weight, µs as its best trial recorded them, µs alone now
(all its calls of a run), the same with the caches flushed and with them dirtied before each
call (as ``MeasureSettings(cache=...)`` times), µs in the model, µs of its repeat in the
model, in the model ÷ alone and repeat ÷ alone, and prints the sums, with the whole run
(TVM's timer) and what all its calls (tuned or not) leave of it: the VM between them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import model_zoo
import numpy as np
from kernel_profile import call_times, in_model_name
from results_io import write_csv

from tensortune.measure import MeasureSettings
from tensortune.measure.settings import CACHE_STATES
from tensortune.model import build, from_torch
from tensortune.model.database import best_config, write_database
from tensortune.model.tuning import ModelTuning, model_tuning
from tensortune.target import target_spec
from tensortune.templates.compile import compile_config
from tensortune.templates.metaschedule import MetaScheduleTemplate
from tensortune.templates.weight_packing import pack_arguments

#: Warm timing: as tuning times a kernel (repeats of many calls back to back).
TUNING = MeasureSettings()
#: Flushed and dirty timing: single calls, each after a flush or a sweep, so more of them for a
#: steady median.
FLUSHED_CALLS = 50


def built_kernel(task: object, config: dict, target: dict, seed: int = 0) -> tuple:
    """`task`'s kernel for `config`, compiled as the tuner compiles it
    (`tensortune.templates.compile.compile_config`), and its arguments: random inputs, zero
    outputs. A kernel that packs a weight (a task of a model tuned with packed weights) is split
    as the model's build splits it: the module's ``main`` takes the weight packed, and its
    argument here is the packed copy, made once."""
    import tvm

    workload = task.workload()  # type: ignore[attr-defined]
    rng = np.random.default_rng(seed)
    arrays = [
        tvm.runtime.tensor(rng.uniform(-1, 1, s).astype(d) if inp else np.zeros(s, d))
        for s, d, inp in workload.argument_specs()
    ]
    _, executable, packed = compile_config(MetaScheduleTemplate(workload, target), config, target)
    module = executable.jit()
    return module, pack_arguments(module, arrays, packed, tvm.cpu())


def alone_seconds(module: Any, arrays: list, cache: str = CACHE_STATES[0]) -> float:
    """Median seconds of one call of a `built_kernel`, repeated on warm data (`cache`
    ``"warm"``, the default), or one call at a time after every argument but the first was
    evicted from the caches (``"flushed"``: TVM's ``cache_flush_cpu_non_first_arg``, as
    ``MeasureSettings(cache="flushed")`` times) or after 64 MiB were written on every thread
    (``"dirty"``: `tensortune.measure.cache_sweep`, as ``MeasureSettings(cache="dirty")``
    times), as a kernel meets its data in a model run."""
    import tvm

    from tensortune.measure.worker_tasks import cache_preprocess

    if cache != CACHE_STATES[0]:
        preproc = cache_preprocess(cache)
        # One call a cost, as the run worker times cold states: TVM's timer otherwise makes
        # 10, and all but the first find the caches warm again.
        timer = module.time_evaluator(
            "main", tvm.cpu(), number=1, repeat=FLUSHED_CALLS, f_preproc=preproc
        )
    else:
        timer = module.time_evaluator(
            "main", tvm.cpu(), min_repeat_ms=TUNING.min_repeat_ms, repeat=TUNING.repeat
        )
    return float(timer(*arrays).median)


def add_run_arguments(parser: argparse.ArgumentParser, packed: bool = False) -> None:
    """``--model``, ``--storage`` (required), ``--channels-last``, ``--winograd`` and ``--out``
    (required): which finished `model_tuning.py` run's studies to read, and the CSV to write; with
    `packed` (default False) also ``--prepack-weights``, for a script that times each kernel
    on its own packed arguments (elsewhere the studies are never the packed arm's)."""
    parser.add_argument("--model", default="resnet18", choices=model_zoo.MODELS)
    parser.add_argument("--storage", required=True, help="the run's task studies (Optuna URL)")
    parser.add_argument("--out", required=True, help="the CSV to write")
    parser.add_argument("--channels-last", action="store_true",
                        help="the studies are of channels-last tasks (model_tuning.py's "
                        "--channels-last arm; default: NCHW, its plain arm)")  # fmt: skip
    parser.add_argument("--winograd", action="store_true",
                        help="the studies are of Winograd tasks (model_tuning.py's --winograd arm; "
                        "with --channels-last, NHWC; default: direct ones)")  # fmt: skip
    if packed:
        parser.add_argument("--prepack-weights", action="store_true",
                            help="the studies are of tasks with packed weights (model_tuning.py's "
                            "--prepack-weights arm, its <model>-prepacked.db)")  # fmt: skip
    else:
        parser.set_defaults(prepack_weights=False)


def run_studies(args: argparse.Namespace) -> tuple[Any, list, ModelTuning]:
    """The model of `args` (see `add_run_arguments`), its example inputs and where its tuning
    stands in ``args.storage`` (tuning nothing)."""
    net, example = model_zoo.model(args.model)
    program = from_torch(net, example, name=args.model)
    tuning = model_tuning(program, target_spec("llvm"), args.storage,
                          channels_last=args.channels_last, winograd=args.winograd,
                          prepack_weights=args.prepack_weights)  # fmt: skip
    return program, example, tuning


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_run_arguments(parser, packed=True)
    args = parser.parse_args()
    program, example, tuning = run_studies(args)
    target = target_spec("llvm")
    database = tempfile.mkdtemp(prefix="in-model-gap-")
    write_database(tuning.tasks, tuning.studies, tuning.target, database)
    built = build(program, target, database, tuning.rewrites)
    inputs = [t.numpy() for t in example]
    profiles = call_times(built, inputs, again=True)
    in_model = profiles["in_order"]
    names = {t.name: in_model_name(t.name, in_model["functions"]) for t in tuning.tasks}
    again = {name: f["seconds"] for name, f in profiles["again"]["functions"].items()}
    rows = []
    for task, study in zip(tuning.tasks, tuning.studies, strict=True):
        found = best_config(study)
        name = names[task.name]
        measured = in_model["functions"].get(name)
        if found is None or measured is None:
            continue
        module, arrays = built_kernel(task, found[0], tuning.target)
        alone = alone_seconds(module, arrays) * task.weight
        flushed = alone_seconds(module, arrays, "flushed") * task.weight
        dirty = alone_seconds(module, arrays, "dirty") * task.weight
        rows.append({
            "task": task.name, "weight": task.weight,
            "tuning_us": round(found[1] * task.weight * 1e6, 1),  # as its trial recorded it
            "alone_us": round(alone * 1e6, 1),
            "flushed_us": round(flushed * 1e6, 1),
            "dirty_us": round(dirty * 1e6, 1),
            "in_model_us": round(measured["seconds"] * 1e6, 1),
            "again_us": round(again[name] * 1e6, 1),
            "ratio": round(measured["seconds"] / alone, 3),
            "again_ratio": round(again[name] / alone, 3),
        })  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(args.out, rows)
    tuning_ms = sum(r["tuning_us"] for r in rows) / 1e3
    alone_ms = sum(r["alone_us"] for r in rows) / 1e3
    model_ms = sum(r["in_model_us"] for r in rows) / 1e3
    flushed_ms = sum(r["flushed_us"] for r in rows) / 1e3
    dirty_ms = sum(r["dirty_us"] for r in rows) / 1e3
    again_ms = sum(r["again_us"] for r in rows) / 1e3
    threads = os.environ.get("TVM_NUM_THREADS", "all cores")
    run_ms = in_model["run_seconds"] * 1e3
    calls_ms = sum(f["seconds"] for f in in_model["functions"].values()) * 1e3
    print(f"threads {threads}: tuned kernels {tuning_ms:.2f} ms as tuning timed them, "
          f"{alone_ms:.2f} ms alone now, {flushed_ms:.2f} ms alone with flushed caches, "
          f"{dirty_ms:.2f} ms alone with dirty ones, "
          f"{model_ms:.2f} ms in the model "
          f"({model_ms / alone_ms:.2f}x), {again_ms:.2f} ms repeated in the model "
          f"({again_ms / alone_ms:.2f}x); whole run {run_ms:.2f} ms, of which its calls "
          f"{calls_ms:.2f} ms and the VM between them {run_ms - calls_ms:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
