"""Where a built model's time goes: the seconds of each function its Relax VM calls, timed
from inside a run by a VM instrument (TVM 0.27's VM has no profiler of its own).

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

#: Model runs timed with the instrument, after one warm-up run without it.
RUNS = 20
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
    """Per function the VM calls in `executable`'s ``main`` (kernels, and builtins such as
    allocation): calls and seconds per model run, and the instrumented run's own seconds.

    Args:
        executable: A built Relax model (``relax.build`` / ``compile_relax``).
        inputs: Its inputs, as NumPy arrays.
        runs: Runs averaged over. Default `RUNS`.

    Returns:
        ``{"functions": {name: {"calls": n, "seconds": s}}, "run_seconds": s}``, per run.
    """
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in inputs]
    vm["main"](*args)  # warm-up: first-call allocation and page faults
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    open_calls: list[float] = []

    def instrument(func: Any, symbol: str, before_run: bool, ret_value: Any, *rest: Any) -> int:
        now = time.perf_counter()
        if before_run:
            open_calls.append(now)
        else:  # calls nest only where a function calls another; each is timed whole
            spent[str(symbol)] += now - open_calls.pop()
            calls[str(symbol)] += 1
        return 0  # VMInstrumentReturnKind.NO_OP: run the call

    vm.set_instrument(instrument)
    start = time.perf_counter()
    for _ in range(runs):
        vm["main"](*args)
    total = time.perf_counter() - start
    functions = {
        name: {"calls": calls[name] // runs, "seconds": spent[name] / runs} for name in spent
    }
    return {"functions": functions, "run_seconds": total / runs}


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


def repeat_times(
    executable: Any, inputs: list[np.ndarray], kernels: set[str], runs: int = RUNS
) -> dict[str, float]:
    """Per function of `kernels`, the seconds per model run of calling it a second time right
    after the model's own call, on the same arguments: the kernel on the model's buffers, with
    the data its first call left in the caches. Next to `kernel_times`'s seconds (the same
    calls as the model makes them) it splits a kernel's gap between the model and alone into
    what the model leaves in the caches (gone on the repeat) and what stays with its buffers.

    Args:
        executable: A built Relax model (``relax.build`` / ``compile_relax``).
        inputs: Its inputs, as NumPy arrays.
        kernels: The functions to repeat (the model's tuned kernels: they write only their
            output arguments, so a second call leaves the run's results as they were; a
            `RuntimeError` says where the model's output changed all the same).
        runs: Runs averaged over. Default `RUNS`.
    """
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in inputs]
    expected = _first_output(vm["main"](*args))
    spent: dict[str, float] = defaultdict(float)

    def instrument(func: Any, symbol: str, before_run: bool, ret_value: Any, *rest: Any) -> int:
        if not before_run and str(symbol) in kernels:
            start = time.perf_counter()
            func(*rest)
            spent[str(symbol)] += time.perf_counter() - start
        return 0

    vm.set_instrument(instrument)
    for _ in range(runs):
        found = vm["main"](*args)
    if not np.array_equal(_first_output(found), expected):
        raise RuntimeError("a repeated kernel changed the model's output: it is not idempotent")
    return {name: seconds / runs for name, seconds in spent.items()}


def _first_output(result: Any) -> np.ndarray:
    """The model's first output of a VM call's result (a tensor or a tuple of them)."""
    while not hasattr(result, "numpy"):
        result = result[0]
    return result.numpy()


def in_model_name(task: str, functions: dict[str, Any]) -> str:
    """The name under which the model calls `task`'s function, among the `functions` of its
    profile: its own, or with `IN_MODEL_SUFFIX` where its weights are packed."""
    packed = task + IN_MODEL_SUFFIX
    return packed if task not in functions and packed in functions else task


def where_time_goes(profile: dict[str, Any], kernels: set[str]) -> dict[str, float]:
    """A profile's seconds per run split into the `kernels` (the model's tuned functions, by
    task name: `in_model_name`), the rest of its calls (builtins, untuned functions) and the VM
    between calls."""
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
