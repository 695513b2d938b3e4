"""Models into Relax: an ONNX file or a PyTorch module, with the shapes of its inputs, and the
framework's own run of it (the outputs a tuned build must reproduce).

The frameworks are optional extras (``tensortune[models]``): they are imported only here, and
only when a model of theirs is given.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensortune.errors import TensortuneError

#: Element types an input may have, by the names ``--input`` takes.
DTYPES = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """A model input: name, static shape and element type (default ``float32``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """An array of this shape and type: uniform in [-1, 1) for floats, small integers
        otherwise (valid indices for an embedding of 2 rows or more)."""
        if np.issubdtype(np.dtype(self.dtype), np.floating):
            return rng.uniform(-1.0, 1.0, self.shape).astype(self.dtype)
        return rng.integers(0, 2, self.shape).astype(self.dtype)


def parse_input(text: str) -> InputSpec:
    """``NAME:SHAPE[:DTYPE]``, the shape as ``1x3x224x224`` (or with commas), e.g.
    ``input:1x3x224x224`` or ``ids:1x128:int64``; `TensortuneError` with one line otherwise."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0].strip():
        raise TensortuneError(
            f"malformed input {text!r}: give NAME:SHAPE[:DTYPE], e.g. x:1x3x224x224"
        )
    name, shape_text = parts[0].strip(), parts[1].strip()
    dtype = parts[2].strip() if len(parts) == 3 else "float32"
    if dtype not in DTYPES:
        raise TensortuneError(f"input {name}: unknown type {dtype!r}; one of {', '.join(DTYPES)}")
    try:
        shape = tuple(int(d) for d in shape_text.replace(",", "x").split("x"))
    except ValueError:
        raise TensortuneError(
            f"input {name}: shape {shape_text!r} is not integers joined by 'x'"
        ) from None
    if not shape or any(d <= 0 for d in shape):
        raise TensortuneError(f"input {name}: every dimension must be positive, got {shape_text}")
    return InputSpec(name, shape, dtype)


@dataclasses.dataclass
class ModelProgram:
    """A model as a Relax module, with its inputs and the framework's run of it.

    Attributes:
        name: A readable name (the file's stem, or the module's class name).
        mod: The Relax ``IRModule``; weights are bound as constants.
        inputs: The model's inputs, in the order its ``main`` takes them.
        reference: Runs the model in its own framework on input arrays (in `inputs` order)
            and returns its outputs; None where that framework is not installed.
        reference_name: What `reference` runs, e.g. ``"onnxruntime-1.32.0"``.
    """

    name: str
    mod: Any
    inputs: list[InputSpec]
    reference: Callable[[list[np.ndarray]], list[np.ndarray]] | None
    reference_name: str


def load_onnx(path: str, inputs: Sequence[InputSpec]) -> ModelProgram:
    """The ONNX model at `path` in Relax, every graph input given a static shape by `inputs`.

    Raises:
        TensortuneError: One line: no such file, not an ONNX model, an input missing from
            `inputs` or not in the graph, a shape that contradicts the graph's own, or an
            operator the frontend cannot import.
    """
    onnx = _require("onnx", "ONNX models")
    if not os.path.isfile(path):
        raise TensortuneError(f"no model file {path}")
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as err:
        raise TensortuneError(f"{path} is not an ONNX model: {_first_line(err)}") from None
    given = {spec.name: spec for spec in inputs}
    if len(given) != len(inputs):
        raise TensortuneError("an input is given twice")
    initialized = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initialized]
    names = [i.name for i in graph_inputs]
    for name in given:
        if name not in names:
            raise TensortuneError(
                f"the model has no input {name!r}; its inputs: {', '.join(names)}"
            )
    ordered = []
    for graph_input in graph_inputs:
        spec = given.get(graph_input.name)
        if spec is None:
            raise TensortuneError(
                f"no shape for input {graph_input.name!r}: give --input {graph_input.name}:SHAPE"
            )
        _check_against_graph(spec, graph_input, onnx)
        ordered.append(spec)
    from tvm.relax.frontend.onnx import from_onnx

    try:
        mod = from_onnx(
            model,
            shape_dict={s.name: list(s.shape) for s in ordered},
            dtype_dict={s.name: s.dtype for s in ordered},
            keep_params_in_input=False,
        )
    except Exception as err:
        raise TensortuneError(
            f"the ONNX frontend cannot import {path}: {_first_line(err)}"
        ) from None
    name = os.path.splitext(os.path.basename(path))[0]
    reference, reference_name = _onnxruntime(path, ordered)
    return ModelProgram(name, for_inference(mod), ordered, reference, reference_name)


def _check_against_graph(spec: InputSpec, graph_input: Any, onnx: Any) -> None:
    tensor = graph_input.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if tensor.HasField("shape") and len(dims) != len(spec.shape):
        raise TensortuneError(
            f"input {spec.name}: the model takes {len(dims)} dimensions, got {len(spec.shape)}"
        )
    for axis, (declared, given) in enumerate(zip(dims, spec.shape, strict=False)):
        if declared and declared != given:
            raise TensortuneError(
                f"input {spec.name}: dimension {axis} is {declared} in the model, got {given}"
            )
    if tensor.elem_type:
        declared_type = str(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        if declared_type != spec.dtype:
            raise TensortuneError(
                f"input {spec.name}: the model takes {declared_type}, got {spec.dtype}"
            )


def _onnxruntime(
    path: str, inputs: list[InputSpec]
) -> tuple[Callable[[list[np.ndarray]], list[np.ndarray]] | None, str]:
    try:
        import onnxruntime
    except ImportError:
        return None, ""
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        feed = {spec.name: array for spec, array in zip(inputs, arrays, strict=True)}
        return [np.asarray(o) for o in session.run(None, feed)]

    return run, f"onnxruntime-{onnxruntime.__version__}"


def from_torch(module: Any, example_inputs: Sequence[Any], name: str | None = None) -> ModelProgram:
    """A ``torch.nn.Module`` in Relax, through ``torch.export`` at the shapes and types of
    `example_inputs` (tensors); its eager run is the reference.

    Args:
        module: The model; put in eval mode here.
        example_inputs: One tensor per positional input.
        name: Default None: the module's class name.

    Raises:
        TensortuneError: One line where ``torch.export`` or the frontend fails.
    """
    torch = _require("torch", "PyTorch modules")
    from tvm.relax.frontend.torch import from_exported_program

    module = module.eval()
    examples = tuple(example_inputs)
    try:
        with torch.no_grad():
            exported = torch.export.export(module, examples)
        mod = from_exported_program(exported, keep_params_as_input=False)
    except Exception as err:
        raise TensortuneError(f"cannot import the module: {_first_line(err)}") from None
    specs = [
        InputSpec(f"input{i}", tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))
        for i, t in enumerate(examples)
    ]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.from_numpy(a) for a in arrays))
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [o.detach().numpy() for o in outs]

    return ModelProgram(
        name or type(module).__name__, for_inference(mod), specs, run, f"torch-{torch.__version__}"
    )


def for_inference(mod: Any) -> Any:
    """`mod` with each batch norm after a convolution folded into the convolution's weights
    and bias (``torch.export`` keeps them apart; the ONNX exporter folds them itself), so that
    the convolution fuses with what follows it; and its GELU, ``erf``, ``exp``, ``tanh`` and
    softmax in vectorizable arithmetic (`tensortune.model.fast_math`)."""
    from tvm import relax

    from tensortune.model.fast_math import with_fast_math

    folded = relax.transform.FoldConstant()(relax.transform.FoldBatchnormToConv2D()(mod))
    return with_fast_math(folded)


def _require(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TensortuneError(
            f"{what} need the {module} package: pip install 'tensortune[models]'"
        ) from None


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
