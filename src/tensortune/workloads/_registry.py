"""Workloads: an operator written once as a TVM tensor expression, plus what tuning needs of it."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortune.errors import TensortuneError
from tensortune.workloads.presets import PRESETS

if TYPE_CHECKING:
    from tvm import te, tirx

ComputeFn = Callable[..., Sequence["te.Tensor"]]
ReferenceFn = Callable[..., Any]
FlopsFn = Callable[..., float]


@dataclasses.dataclass(frozen=True)
class WorkloadDef:
    """A registered operator: how to build it for any shape.

    Attributes:
        name: Registry name, e.g. ``"matmul"``.
        compute: Returns the kernel's arguments as te tensors, inputs (placeholders) first, outputs
            last, or the kernel as a TIR ``PrimFunc`` (its parameters are the arguments; those
            no block writes are the inputs). Called with the shape parameters as keyword
            arguments.
        reference: NumPy implementation, called with the input arrays in argument order (plus,
            as keywords, any shape parameters its signature names); returns the output array (or
            a tuple of them, one per output).
        flops: FLOP count for given shape parameters; ``None`` counts two FLOPs per iteration of
            the main reduction (a multiply-add).
        params: Parameter names in order, with their defaults (``None`` when required).
        module: The module that registers it, where that is not tensortune's own: a study of
            the workload records it, so that another process (``best``, ``export``, workers)
            can import it to find the workload again. Default ``""``.
    """

    name: str
    compute: ComputeFn
    reference: ReferenceFn
    flops: FlopsFn | None
    params: tuple[tuple[str, int | None], ...]
    module: str = ""

    def bind(self, *args: int, **kwargs: int) -> Workload:
        """Fix the shape parameters, positionally or by name, and check them."""
        names = [p for p, _ in self.params]
        if len(args) > len(names):
            raise TensortuneError(
                f"{self.name} takes {len(names)} shape values ({', '.join(names)}), got {len(args)}"
            )
        values: dict[str, Any] = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names:
                raise TensortuneError(
                    f"{self.name} has no shape parameter {key!r}; its parameters are "
                    f"{', '.join(names)}"
                )
            if key in values:
                raise TensortuneError(f"{self.name}: {key} given twice")
            values[key] = value
        for name, default in self.params:
            if name not in values:
                if default is None:
                    raise TensortuneError(f"{self.name} needs a value for {name}")
                values[name] = default
        for name in names:
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TensortuneError(f"{self.name}: {name} must be an integer, got {value!r}")
        shape = {name: int(values[name]) for name in names}
        workload = Workload(self, shape)
        workload.check()
        return workload


@dataclasses.dataclass(frozen=True)
class Workload:
    """An operator at a fixed shape: builds its tensor program, inputs and reference result."""

    definition: WorkloadDef
    shape: Mapping[str, int]

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def key(self) -> str:
        """A stable, readable identity, e.g. ``matmul(M=64,N=64,K=64)``."""
        inner = ",".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.name}({inner})"

    def check(self) -> None:
        """Raise `TensortuneError` unless the shape gives a well-formed, non-empty program
        whose tensors fit in `MEMORY_FRACTION` of this machine's physical memory."""
        try:
            arguments = self._arguments()
        except TensortuneError:
            raise
        except Exception as err:  # the compute function rejects the shape in its own words
            raise TensortuneError(f"{self.key}: invalid shape ({err})") from err
        for name, dims, _, _ in arguments:
            if any(d <= 0 for d in dims):
                raise TensortuneError(
                    f"{self.key}: tensor {name} would have shape {tuple(dims)}; "
                    "every dimension must be positive"
                )
        total = physical_memory()
        if total is not None and self.nbytes > total * MEMORY_FRACTION:
            # Every measurement holds all of them (and the check a float64 reference), in
            # several processes: refuse now, not with a worker's MemoryError and files left.
            raise TensortuneError(
                f"{self.key}: its tensors need {_size(self.nbytes)} of memory, more than "
                f"{MEMORY_FRACTION:.0%} of this machine's {_size(total)}"
            )

    @property
    def nbytes(self) -> int:
        """Bytes of all the kernel's arguments together, inputs and outputs."""
        return sum(
            math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype, _ in self.argument_specs()
        )

    def tensors(self) -> list[te.Tensor]:
        """The kernel's arguments as te tensors: inputs first, then outputs; `TensortuneError`
        for a workload defined as a ``PrimFunc``, which has none."""
        found = self._computed()
        if not isinstance(found, list):
            raise TensortuneError(f"{self.name} is a TIR function, not a tensor expression")
        return found

    def prim_func(self) -> tirx.PrimFunc:
        """The unscheduled TIR function (`te.create_prim_func` of the tensors, or the
        workload's own ``PrimFunc``)."""
        from tvm import te

        found = self._computed()
        return te.create_prim_func(found) if isinstance(found, list) else found

    def argument_specs(self) -> list[tuple[tuple[int, ...], str, bool]]:
        """(shape, dtype, is_input) for each argument, in order."""
        return [(shape, dtype, is_input) for _, shape, dtype, is_input in self._arguments()]

    def _computed(self) -> list[te.Tensor] | tirx.PrimFunc:
        """What the definition's compute function returns for this shape: a list of tensors or
        a ``PrimFunc``."""
        from tvm import tirx

        for name, value in self.shape.items():
            if value <= 0 and name not in _NON_NEGATIVE:
                raise TensortuneError(f"{self.name}: {name} must be positive, got {value}")
            if value < 0:
                raise TensortuneError(f"{self.name}: {name} must not be negative, got {value}")
        found = self.definition.compute(**self.shape)
        return found if isinstance(found, tirx.PrimFunc) else list(found)

    def _arguments(self) -> list[tuple[str, tuple[int, ...], str, bool]]:
        """(name, shape, dtype, is_input) of each argument, in order."""
        from tvm import te

        found = self._computed()
        if isinstance(found, list):
            return [
                (t.name, tuple(int(d) for d in t.shape), str(t.dtype),
                 isinstance(t.op, te.PlaceholderOp))
                for t in found
            ]  # fmt: skip
        buffers = list(found.params)  # TVM 0.27: the parameters are the buffers
        written = _written_buffers(found)
        return [
            (b.name, tuple(int(d) for d in b.shape), str(b.dtype), b.name not in written)
            for b in buffers
        ]

    @property
    def flop_count(self) -> float:
        """Floating-point operations of one run of the kernel."""
        if self.definition.flops is not None:
            return float(self.definition.flops(**self.shape))
        return _count_reduction_flops(self)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Input arrays drawn uniformly from [-1, 1), reproducible from `seed` (default 0)."""
        rng = np.random.default_rng(seed)
        return [
            rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
            for shape, dtype, is_input in self.argument_specs()
            if is_input
        ]

    def reference(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The NumPy result for `inputs`, one array per output argument."""
        wanted = inspect.signature(self.definition.reference).parameters
        extra = {k: v for k, v in self.shape.items() if k in wanted}
        out = self.definition.reference(*inputs, **extra)
        outputs = list(out) if isinstance(out, (tuple, list)) else [out]
        specs = [(s, d) for s, d, is_input in self.argument_specs() if not is_input]
        return [np.asarray(o, dtype=d).reshape(s) for o, (s, d) in zip(outputs, specs, strict=True)]


# Padding may be zero; every other parameter is a size or a stride.
_NON_NEGATIVE = frozenset({"pad"})

#: The share of physical memory a workload's tensors may take (`Workload.check`): the parent
#: keeps inputs and a float64 reference, the timing worker its own copies.
MEMORY_FRACTION = 0.25


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine; None where the system does not say (then
    no workload is refused for its size)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX, or the name is unknown
        return None


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 / 10 else f"{nbytes / 2**20:.1f} MiB"


_REGISTRY: dict[str, WorkloadDef] = {}


def register_workload(
    name: str,
    *,
    reference: ReferenceFn,
    flops: FlopsFn | None = None,
    overwrite: bool = False,
) -> Callable[[ComputeFn], ComputeFn]:
    """Register an operator so that `get_workload`, `tune` and the CLI know it by `name`.

    Use it as a decorator on a function that takes the shape parameters as integer arguments
    (defaults allowed) and returns the kernel's arguments as te tensors, inputs first::

        @tensortune.register_workload("scale_add", reference=lambda x, y: 2 * x + y,
                                      flops=lambda n: 2 * n)
        def scale_add(n: int):
            x = te.placeholder((n,), name="x")
            y = te.placeholder((n,), name="y")
            return [x, y, te.compute((n,), lambda i: 2 * x[i] + y[i], name="out")]

    Args:
        name: Name to register under.
        reference: NumPy function of the input arrays returning the output(s); shape
            parameters that its signature names are passed as keywords.
        flops: FLOP count from the shape parameters. Default ``None``: two FLOPs per iteration
            of the main reduction, or one per output element when there is none.
        overwrite: Replace an existing registration of the same name. Default ``False`` (a name
            that is taken is an error).
    """

    def decorate(compute: ComputeFn) -> ComputeFn:
        if not name or not name.replace("_", "").isalnum():
            raise TensortuneError(f"workload name must be letters, digits and '_', got {name!r}")
        if name in _REGISTRY and not overwrite:
            raise TensortuneError(f"a workload named {name!r} is already registered")
        if not callable(reference):
            raise TensortuneError(f"reference for {name!r} must be callable")
        params = []
        for param in inspect.signature(compute).parameters.values():
            if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                raise TensortuneError(f"{name}: shape parameters must be named, not *args/**kwargs")
            default = None if param.default is param.empty else param.default
            params.append((param.name, default))
        module = compute.__module__ if not compute.__module__.startswith("tensortune.") else ""
        _REGISTRY[name] = WorkloadDef(name, compute, reference, flops, tuple(params), module)
        setattr(compute, NAME_ATTR, name)  # so that ``module:function`` finds it
        return compute

    return decorate


#: The attribute `register_workload` sets on the function it registers: the workload's name.
NAME_ATTR = "tensortune_workload"


def import_workload(reference: str) -> str:
    """Import the ``module:function`` `reference` and return the name of the workload that
    function registers (it must be decorated with `register_workload`). The working folder
    is searched first, as ``python -m`` would; `TensortuneError` with one line if the module
    does not import or the function is not a registered workload."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise TensortuneError(f"{reference!r} is not module:function")
    module = import_module(module_name)
    found = getattr(module, attr, None)
    if found is None:
        raise TensortuneError(f"module {module_name} has no {attr!r}")
    name = getattr(found, NAME_ATTR, None)
    if not isinstance(name, str) or name not in _REGISTRY:
        raise TensortuneError(
            f"{reference} is not a workload: decorate it with @tensortune.register_workload"
        )
    return name


def import_module(name: str) -> Any:
    """Import the user module `name` (working folder first); `TensortuneError` with one line
    if it does not import."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise TensortuneError(
            f"cannot import module {name}: {type(err).__name__}" + (f": {first}" if first else "")
        ) from None


def workload_names() -> list[str]:
    """Names of all registered workloads, sorted."""
    return sorted(_REGISTRY)


def workload_definition(name: str) -> WorkloadDef:
    """The registration of `name`; `TensortuneError` if there is none."""
    if name not in _REGISTRY:
        raise TensortuneError(
            f"unknown workload {name!r}; known workloads: {', '.join(workload_names())}"
        )
    return _REGISTRY[name]


def get_workload(name: str, *args: int, **shape: int) -> Workload:
    """The registered workload `name` at the given shape (positional or by name)."""
    return workload_definition(name).bind(*args, **shape)


def parse_shape(name: str, text: str) -> Workload:
    """Parse a CLI shape for `name`: ``1024,1024,1024``, ``M=1024,N=512,K=256``, or a preset
    name from `tensortune.workloads.PRESETS` such as ``resnet18-c7``."""
    if text.strip().lower() in PRESETS:
        preset_op, preset_shape = PRESETS[text.strip().lower()]
        if preset_op != name:
            raise TensortuneError(f"shape preset {text!r} is for {preset_op}, not {name}")
        return get_workload(name, **preset_shape)
    positional: list[int] = []
    named: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise TensortuneError(f"malformed shape {text!r}: empty value")
        key, sep, value = part.partition("=")
        raw = value if sep else key
        try:
            number = int(raw)
        except ValueError:
            raise TensortuneError(f"malformed shape {text!r}: {raw!r} is not an integer") from None
        if sep:
            if key.strip() in named:  # else the last value would win without a word
                raise TensortuneError(f"malformed shape {text!r}: {key.strip()} given twice")
            named[key.strip()] = number
        elif named:
            raise TensortuneError(f"malformed shape {text!r}: positional value after a named one")
        else:
            positional.append(number)
    return get_workload(name, *positional, **named)


def _written_buffers(func: tirx.PrimFunc) -> set[str]:
    """Names of the buffers some block of `func` writes."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    written: set[str] = set()
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block = stack.pop()
        # TVM 0.27: a region names its buffer as ``source``.
        written.update(region.source.name for region in sch.get(block).writes)
        stack.extend(sch.get_child_blocks(block))
    return written


def _count_reduction_flops(workload: Workload) -> float:
    from tvm import s_tir

    sch = s_tir.Schedule(workload.prim_func())
    best = 0.0
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        iters = sch.get(block_rv).iter_vars
        volume = math.prod(int(iv.dom.extent) for iv in iters)
        has_reduce = any(int(iv.iter_type) == 2 for iv in iters)
        best = max(best, volume * (2.0 if has_reduce else 1.0))
    return best
