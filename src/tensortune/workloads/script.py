"""Workloads given as TVMScript text: a TIR function a model lowered to (`tensortune.model`) or
any other, carried between processes as its text.

A study of such a workload records the text (``workload_script``), so that another process
(``best``, ``export``, a worker, a resumed run) registers it again (`register_script`). Its
reference result is TVM's own build of the unscheduled function, so no NumPy implementation is
needed: a schedule must compute what the function computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tensortune.errors import TensortuneError, last_line
from tensortune.workloads._registry import (
    _REGISTRY,
    WorkloadDef,
    _written_buffers,
)

if TYPE_CHECKING:
    from tvm import tirx


class ScriptFunction:
    """The compute of a script workload: parses its TVMScript into a ``PrimFunc`` (once per
    process). Holds only the text, so it pickles."""

    def __init__(self, script: str) -> None:
        self.script = script

    def __call__(self) -> tirx.PrimFunc:
        found = self.__dict__.get("_func")
        if found is None:
            found = self.__dict__["_func"] = parse_script(self.script)
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {"script": self.script}


class UnscheduledReference:
    """The reference of a script workload: TVM's build of the unscheduled function, run on the
    inputs; returns the outputs in argument order. Holds only the text, so it pickles."""

    def __init__(self, script: str) -> None:
        self.script = script

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        import tvm

        func = parse_script(self.script)
        written = _written_buffers(func)
        pending = list(inputs)
        arrays, outputs = [], []
        for buffer in func.params:
            if buffer.name in written:
                shape = tuple(int(d) for d in buffer.shape)
                array = tvm.runtime.tensor(np.zeros(shape, str(buffer.dtype)))
                outputs.append(array)
            else:
                array = tvm.runtime.tensor(pending.pop(0))
            arrays.append(array)
        tvm.compile(func, target="llvm")["main"](*arrays)
        return [o.numpy() for o in outputs]


def parse_script(script: str) -> tirx.PrimFunc:
    """The ``PrimFunc`` a TVMScript text defines (a module's ``main``, or its only function);
    `TensortuneError` with one line where the text defines none."""
    import tvm
    from tvm import tirx

    try:
        found = tvm.script.from_source(script)
    except Exception as err:
        raise TensortuneError(f"not a TIR function: {last_line(err)}") from None
    if isinstance(found, tvm.IRModule):
        funcs = [f for f in found.functions.values() if isinstance(f, tirx.PrimFunc)]
        main = [f for gv, f in found.functions.items() if gv.name_hint == "main"]
        found = main[0] if main else (funcs[0] if len(funcs) == 1 else None)
    if not isinstance(found, tirx.PrimFunc):
        raise TensortuneError("the script defines no single TIR function")
    return found


def register_script(name: str, script: str, module: str = "") -> WorkloadDef:
    """Register the TIR function of `script` as workload `name` (no shape parameters), with
    `UnscheduledReference` as its reference; returns the registration. Registering a name
    again with the same text is a no-op; with another text, an error.

    Args:
        name: Registry name: letters, digits and ``_``.
        script: TVMScript of one TIR function (``func.script()``).
        module: Recorded like `tensortune.workloads.WorkloadDef.module`. Default ``""``.
    """
    if not name or not name.replace("_", "").isalnum():
        raise TensortuneError(f"workload name must be letters, digits and '_', got {name!r}")
    found = _REGISTRY.get(name)
    if found is not None:
        if isinstance(found.compute, ScriptFunction) and found.compute.script == script:
            return found
        raise TensortuneError(f"a workload named {name!r} is already registered")
    parse_script(script)  # refuse a text that is no TIR function now, in one line
    definition = WorkloadDef(
        name, ScriptFunction(script), UnscheduledReference(script), None, (), module
    )
    _REGISTRY[name] = definition
    return definition


def script_of(definition: WorkloadDef) -> str | None:
    """The TVMScript of a script workload's registration; None for any other workload."""
    compute = definition.compute
    return compute.script if isinstance(compute, ScriptFunction) else None
