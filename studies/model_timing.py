"""Timing whole models: every build and framework read in turns, round after round, in fresh
processes.

One process's timing of a set of builds agrees with itself (its rounds cancel the machine's
drift) but not always with another process's timing of the same builds: on a shared guest two
timings a quarter of an hour apart have read the same pair 0.94× and 1.13×, each beyond the
other's interval (`studies/README.md`). So `time_in_processes` exports the builds and times
them in ``timings`` fresh processes, one after another, each a round-robin of ``rounds``
rounds, the systems' order turned by one place from each process to the next. The readings
carry their process's number (``timing``), and `round_ratios.py` pools over the processes.

A process is this file run as a script on a manifest that `time_in_processes` writes:

    python studies/model_timing.py MANIFEST.json --timing 0 --out READINGS.json

It builds PyTorch eager, ``torch.compile`` and ONNX Runtime afresh (`frameworks`) from
`model_zoo.model` (seeded: the same weights and inputs each time) and loads each exported
build into a Relax VM.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import model_zoo
import numpy as np
import torch
from kernel_profile import PAUSE_S

#: Rounds of a round-robin timing; each reading is the mean of runs of >= 50 ms.
ROUNDS = 5
#: Fresh processes that time the builds one after another (`time_in_processes`).
TIMINGS = 3


def timer(call: Callable[[], Any]) -> Callable[[], float]:
    """Seconds of one call, averaged over runs of at least 50 ms, each reading after an untimed
    call: it warms the system up, and wakes the thread pool that slept during the pause."""

    def reading() -> float:
        call()
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.05 or runs < 2:
            call()
            runs += 1
        return (time.perf_counter() - start) / runs

    return reading


def round_robin(
    readers: dict[str, Callable[[], float]],
    rounds: int = ROUNDS,
    readings: dict[str, list[float]] | None = None,
) -> dict[str, float]:
    """Median seconds of each system over `rounds` rounds, every system once per round in the
    order of `readers`, each reading after a pause of `PAUSE_S`; every reading goes to
    `readings` too, where given (default None)."""
    found: dict[str, list[float]] = readings if readings is not None else {}
    found.update({name: [] for name in readers})
    for _ in range(rounds):
        for name, reading in readers.items():
            time.sleep(PAUSE_S)
            found[name].append(reading())
    return {name: statistics.median(values) for name, values in found.items()}


def frameworks(net: Any, example: list[torch.Tensor], folder: str) -> dict[str, Callable]:
    """Callables running the model in PyTorch eager, ``torch.compile`` and ONNX Runtime (those
    that work here; a failure is printed and the system left out). ONNX Runtime's model file is
    written to `folder`."""
    torch.set_num_threads(int(os.environ.get("TVM_NUM_THREADS", "2")))
    calls: dict[str, Callable] = {}

    def eager() -> Any:
        with torch.no_grad():
            return net(*example)

    calls["pytorch-eager"] = eager
    try:
        compiled = torch.compile(net)
        with torch.no_grad():
            compiled(*example)

        def inductor() -> Any:
            with torch.no_grad():
                return compiled(*example)

        calls["torch.compile"] = inductor
    except Exception as err:  # no C++ compiler, or an unsupported op
        print(f"torch.compile left out: {str(err).strip().splitlines()[0][:200]}", flush=True)
    try:
        import onnxruntime

        path = os.path.join(folder, "model.onnx")
        torch.onnx.export(net, tuple(example), path, input_names=["x"], dynamo=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {"x": example[0].numpy()}
        calls["onnxruntime"] = lambda: session.run(None, feed)
    except Exception as err:
        print(f"onnxruntime left out: {str(err).strip().splitlines()[0][:200]}", flush=True)
    return calls


def vm_call(executable: Any, inputs: list[np.ndarray]) -> Callable[[], Any]:
    """A callable running `executable` (a built or loaded Relax module) on `inputs` in a VM."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in inputs]
    return lambda: vm["main"](*args)


def turned(names: list[str], places: int) -> list[str]:
    """`names` with its first `places` (modulo its length) moved to the end: each process reads
    the systems in another order, so no system is always read first after the pause."""
    if not names:
        return []
    cut = places % len(names)
    return names[cut:] + names[:cut]


def time_in_processes(
    model: str,
    builds: dict[str, Any],
    rounds: int = ROUNDS,
    timings: int = TIMINGS,
    folder: str | None = None,
) -> list[dict]:
    """Every framework (`frameworks`) and every build of `builds` (system → built Relax
    executable) of `model_zoo` model `model`, timed in `timings` fresh processes (default
    `TIMINGS`), one after another, each a `round_robin` of `rounds` rounds (default `ROUNDS`).
    The builds are exported to `folder` (default a new temporary folder). Returns a row per
    reading: ``system``, ``timing`` (the process, from 0), ``round`` (counted across the
    processes, so a file of them reads as one long run) and ``seconds``."""
    if timings < 1 or rounds < 1:
        raise ValueError(f"timings and rounds must be >= 1, not {timings} and {rounds}")
    folder = folder or tempfile.mkdtemp(prefix=f"{model}-timing-")
    systems = []
    for index, (system, executable) in enumerate(builds.items()):
        path = os.path.join(folder, f"build-{index}.so")
        executable.export_library(path)
        systems.append([system, path])
    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w") as f:
        json.dump({"model": model, "rounds": rounds, "builds": systems}, f)
    rows: list[dict] = []
    for timing in range(timings):
        out = os.path.join(folder, f"readings-{timing}.json")
        print(f"{model}: timing {timing + 1} of {timings} in a fresh process", flush=True)
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), manifest, "--timing", str(timing),
             "--out", out],
            check=True,
        )  # fmt: skip
        with open(out) as f:
            readings: dict[str, list[float]] = json.load(f)
        for system, values in readings.items():
            rows += [
                {"system": system, "timing": timing, "round": timing * rounds + i, "seconds": s}
                for i, s in enumerate(values)
            ]
    return rows


def medians(rows: list[dict]) -> dict[str, float]:
    """Each system's median seconds over all its readings in `rows` (`time_in_processes`'s),
    in the order the systems first appear."""
    found: dict[str, list[float]] = {}
    for row in rows:
        found.setdefault(row["system"], []).append(row["seconds"])
    return {system: statistics.median(values) for system, values in found.items()}


def time_one_process(manifest: dict, timing: int) -> dict[str, list[float]]:
    """One process's readings: the frameworks and `manifest`'s builds, read in turns, the order
    turned by `timing` places."""
    import tvm

    net, example = model_zoo.model(manifest["model"])
    inputs = [t.numpy() for t in example]
    calls = frameworks(net, example, tempfile.mkdtemp(prefix="frameworks-"))
    for system, path in manifest["builds"]:
        calls[system] = vm_call(tvm.runtime.load_module(path), inputs)
    order = turned(list(calls), timing)
    readings: dict[str, list[float]] = {}
    round_robin({name: timer(calls[name]) for name in order}, manifest["rounds"], readings)
    return {name: readings[name] for name in calls}  # the manifest's order, not the turn's


def main() -> None:
    parser = argparse.ArgumentParser(description="One fresh process of `time_in_processes`.")
    parser.add_argument("manifest", help="the manifest.json that time_in_processes wrote")
    parser.add_argument(
        "--timing",
        type=int,
        default=0,
        help="this process's number, which turns the order (default 0)",
    )
    parser.add_argument("--out", required=True, help="where its readings go (JSON)")
    args = parser.parse_args()
    try:
        with open(args.manifest) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        parser.error(f"{args.manifest}: not a timing manifest ({error})")
    missing = {"model", "rounds", "builds"} - set(manifest if isinstance(manifest, dict) else {})
    if missing:
        parser.error(f"{args.manifest}: not a timing manifest (no {', '.join(sorted(missing))})")
    readings = time_one_process(manifest, args.timing)
    with open(args.out, "w") as f:
        json.dump(readings, f)


if __name__ == "__main__":
    main()
