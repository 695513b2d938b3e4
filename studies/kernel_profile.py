"""Where a built model's time goes: the seconds of each function its Relax VM calls, each call
timed by TVM's timer after the run's other calls, replayed (TVM 0.27's VM has no profiler of
its own).

A kernel's time in the model can differ from its time alone (`model_tuning.task_rows`): alone it
runs again and again on the same warm data, in the model its weights and inputs come cold from
memory. What the calls leave of the end-to-end time is the VM's own work between them.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

import numpy as np

#: Single calls timed per model call (each after the run's other calls), medians.
RUNS = 20
#: Whole runs read after each call's timing; the run's seconds are their median.
RUNS_PER_CALL = 3
#: Turns of `kernel_times_in_turns`: one profile per build and turn, the order reversed every
#: other turn. One profile each, taken one after the other, read two BERT builds 1.3x apart
#: where a timing in rounds had read them level; six turns beside six timed rounds read the
#: same two builds alike both ways (1.09x and 1.17x).
TURNS = 5
#: Seconds between two readings (profiles here, timings in `model_tuning.round_robin`): the
#: thread pools of the system read before (OpenMP's, ONNX Runtime's, TVM's) spin a while after
#: their last call, and took cores from the next one (ONNX Runtime once read 33.4 ms on a BERT
#: layer where it reads 13.7).
PAUSE_S = 0.5
#: What TVM's ``SplitLayoutRewritePreproc`` appends to the name of a task's function in a
#: model built with packed weights: the kernel that takes them packed.
IN_MODEL_SUFFIX = "_prepacked"


def kernel_times(executable: Any, inputs: list[np.ndarray], runs: int = RUNS) -> dict[str, Any]:
    """Per compiled function the VM calls in `executable`'s ``main``: calls and seconds per
    model run, each call timed by TVM's timer, one call a cost, right after the run's other
    calls (replayed on the model's own buffers, from the call after it round to the call
    before it), and the run's own seconds timed by the same timer between the calls'
    timings. What the calls leave of the run is the VM's own work between them (its builtins:
    allocation, shape checks).

    A VM instrument calls back into Python around every call, and Python's own work then costs
    each call 20-40 µs more after a kernel that evicted it from the caches (the fc layer of
    ResNet-18 read 48 µs for 14; `studies/README.md`). So calls are timed here by TVM's timer
    only, and the instrument is used once, to find the calls.

    Args:
        executable: A built Relax model (``relax.build`` / ``compile_relax``) or one loaded from
            its exported library.
        inputs: Its inputs, as NumPy arrays.
        runs: Single calls timed per model call: medians. Default `RUNS`. The run's seconds are
            the median of `RUNS_PER_CALL` runs read after each call's timing.

    Returns:
        ``{"functions": {name: {"calls": n, "seconds": s}}, "run_seconds": s}``, per run.
    """
    return call_times(executable, inputs, runs)["in_order"]


def call_times(
    executable: Any, inputs: list[np.ndarray], runs: int = RUNS, again: bool = False
) -> dict[str, Any]:
    """`kernel_times`'s profile under ``"in_order"`` and, with `again` (default False), under
    ``"again"`` each call timed a second time right after its own call in the run (the run's
    other calls and then itself replayed first): the kernel on the model's buffers with the data
    its first call left in the caches. Between the two, a call's gap to its time alone splits
    into what the model's other calls leave in the caches (gone on the repeat) and what stays
    with its buffers. `runs` as in `kernel_times` (default `RUNS`)."""
    import tvm
    from tvm import relax

    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(a) for a in inputs]
    vm["main"](*args)  # warm-up: first-call allocation and page faults
    calls = _model_calls(vm, args)
    vm.set_input("main", *args)
    run_timer = vm.time_evaluator("invoke_stateful", device, number=1, repeat=RUNS_PER_CALL)
    module = getattr(executable, "mod", executable)
    libraries = {name: _library(module, name) for name, _, _ in calls}
    for name, library in libraries.items():
        if library is None:  # resolved elsewhere: TVM's timer cannot time it by name
            raise LookupError(f"no module of the build compiled {name!r}")
    timed = {"index": 0, "again": 0}

    def replay(*_: Any) -> None:
        # The run's calls from the one after the timed call round to the one before it (or to
        # it, timed again): runs follow each other, so what the previous run's later calls
        # left in the caches counts too (a replay of the run's earlier calls alone left a 7x7
        # convolution's weights cached from its last timing).
        index = timed["index"]
        for _, function, arguments in calls[index + 1 :] + calls[: index + timed["again"]]:
            function(*arguments)

    tvm.register_global_func(_REPLAY, replay, override=True)
    profiles = {}
    for key, extra in (("in_order", 0), ("again", 1))[: 2 if again else 1]:
        spent: dict[str, float] = defaultdict(float)
        counted: dict[str, int] = defaultdict(int)
        run_seconds: list[float] = []
        for index, (name, _, arguments) in enumerate(calls):
            timed.update(index=index, again=extra)
            # One call a cost: TVM's timer otherwise makes 10, all but the first on warm data.
            timer = libraries[name].time_evaluator(
                name, device, number=1, repeat=runs, f_preproc=_REPLAY
            )
            spent[name] += float(timer(*arguments).median)
            counted[name] += 1
            # Runs read between the calls' timings, so that run and calls share one window:
            # read seconds apart on a drifting guest, the residual once came out at -0.45 ms.
            run_seconds.extend(float(r) for r in run_timer("main").results)
        functions = {n: {"calls": counted[n], "seconds": spent[n]} for n in spent}
        profiles[key] = {"functions": functions, "run_seconds": statistics.median(run_seconds)}
    return profiles


#: The global function TVM's timer calls before each timed call (`call_times`).
_REPLAY = "kernel_profile.replay"


def _model_calls(vm: Any, args: list) -> list[tuple[str, Any, list]]:
    """The calls one run of `vm`'s ``main`` makes to compiled functions (not to the VM's
    builtins), in order: name, function and arguments (the model's buffers, which these
    references keep alive)."""
    calls: list[tuple[str, Any, list]] = []

    def instrument(func: Any, symbol: str, before_run: bool, ret_value: Any, *rest: Any) -> int:
        if before_run and not str(symbol).startswith("vm.builtin."):
            calls.append((str(symbol), func, list(rest)))
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    vm.set_instrument(instrument)
    vm["main"](*args)
    vm.set_instrument(None)
    return calls


def _library(module: Any, name: str) -> Any:
    """The module among `module` and its imports (depth first) that compiled function `name`,
    or None."""
    if module.implements_function(name):
        return module
    for imported in module.imports:
        found = _library(imported, name)
        if found is not None:
            return found
    return None


def kernel_times_in_turns(
    executables: dict[str, Any], inputs: list[np.ndarray], turns: int = TURNS, runs: int = RUNS
) -> dict[str, dict[str, Any]]:
    """`kernel_times` of several builds, taken in turns (each build once a turn, the order
    reversed every other turn, a pause of `PAUSE_S` before each), and per build the median over
    the turns of each function's seconds and of the run's: on a machine whose speed drifts,
    builds profiled one after the other differ by when they ran.

    Args:
        executables: Built Relax models of one model by name (``relax.build`` /
            ``compile_relax``).
        inputs: Their inputs, as NumPy arrays.
        turns: Profiles per build. Default `TURNS`.
        runs: Runs averaged over in each profile. Default `RUNS`.

    Returns:
        Per name, what `kernel_times` returns, each figure the median over the turns.
    """
    taken: dict[str, list[dict[str, Any]]] = {name: [] for name in executables}
    order = list(executables)
    for turn in range(turns):
        for name in order if turn % 2 == 0 else order[::-1]:
            time.sleep(PAUSE_S)
            taken[name].append(kernel_times(executables[name], inputs, runs))
    return {name: _median_profile(profiles) for name, profiles in taken.items()}


def _median_profile(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    """Per function, the median of its seconds over `profiles` (a function one profile lacks
    counts 0 there), and the median run."""
    names = {name for profile in profiles for name in profile["functions"]}
    functions = {}
    for name in names:
        found = [p["functions"].get(name, {"calls": 0, "seconds": 0.0}) for p in profiles]
        functions[name] = {
            "calls": max(f["calls"] for f in found),
            "seconds": statistics.median(f["seconds"] for f in found),
        }
    return {
        "functions": functions,
        "run_seconds": statistics.median(p["run_seconds"] for p in profiles),
    }


def in_model_name(task: str, functions: dict[str, Any]) -> str:
    """The name under which the model calls `task`'s function, among the `functions` of its
    profile: its own, or with `IN_MODEL_SUFFIX` where its weights are packed."""
    packed = task + IN_MODEL_SUFFIX
    return packed if task not in functions and packed in functions else task


def where_time_goes(profile: dict[str, Any], kernels: set[str]) -> dict[str, float]:
    """A profile's seconds per run split into the `kernels` (the model's tuned functions, by
    task name: `in_model_name`), the rest of its calls (untuned functions; builtins too in
    profiles taken with an instrument before 2026-12-06) and the VM between calls."""
    functions = profile["functions"]
    named = {in_model_name(task, functions) for task in kernels}
    in_kernels = sum(f["seconds"] for name, f in functions.items() if name in named)
    in_other = sum(f["seconds"] for name, f in functions.items() if name not in named)
    return {
        "kernels_s": in_kernels,
        "other_calls_s": in_other,
        "between_calls_s": max(0.0, profile["run_seconds"] - in_kernels - in_other),
        "run_s": profile["run_seconds"],
    }
