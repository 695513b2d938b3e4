"""Vendor baselines: the library a user would otherwise call for the same operator and shape.

NumPy (its BLAS, OpenBLAS in the PyPI wheels) for matmul, batch_matmul and dense; PyTorch's CPU
convolution (oneDNN) for conv2d and depthwise_conv2d when ``tensortune[baselines]`` is installed.
On a CUDA target, PyTorch's cuBLAS and cuDNN in fp32 (TF32 off).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np

from tensortune.workloads import Workload


def vendor_kernel(
    workload: Workload, threads: int, device: str = "cpu"
) -> tuple[str, Callable[[], object]] | None:
    """A zero-argument callable running the vendor's version of `workload`, with its name.

    Args:
        workload: The operator at its shape.
        threads: CPU threads the library may use.
        device: ``"cpu"`` (default) or ``"cuda"``: PyTorch's cuBLAS / cuDNN on GPU 0, in fp32
            with TF32 off, each call waiting for the GPU.
    """
    inputs = workload.random_inputs(seed=0)
    if device == "cuda":
        return _torch_cuda(workload, inputs) if importlib.util.find_spec("torch") else None
    name = workload.name
    if name in ("matmul", "batch_matmul"):
        a, b = inputs
        out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype)
        return _blas_name(), lambda: np.matmul(a, b, out=out)
    if name == "dense_bias_relu":
        x, w, bias = inputs
        wt = np.ascontiguousarray(w.T)
        out = np.empty((x.shape[0], w.shape[0]), dtype=x.dtype)

        def dense() -> object:
            np.matmul(x, wt, out=out)
            np.add(out, bias, out=out)
            return np.maximum(out, 0, out=out)

        return _blas_name(), dense
    if name in ("conv2d", "depthwise_conv2d") and importlib.util.find_spec("torch") is not None:
        return _torch_conv(workload, inputs, threads)
    return None


def _torch_cuda(
    workload: Workload, inputs: list[np.ndarray]
) -> tuple[str, Callable[[], object]] | None:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    args = [torch.from_numpy(a).cuda() for a in inputs]
    name = workload.name
    call: Callable[[], object]
    if name in ("matmul", "batch_matmul"):
        library = "torch/cublas"

        def call() -> object:
            return torch.matmul(args[0], args[1])

    elif name == "dense_bias_relu":
        library = "torch/cublas"

        def call() -> object:
            return torch.relu(F.linear(*args))

    elif name in ("conv2d", "depthwise_conv2d"):
        weight = args[1] if name == "conv2d" else args[1].unsqueeze(1)
        groups = 1 if name == "conv2d" else weight.shape[0]
        stride, pad = workload.shape["stride"], workload.shape["pad"]
        library = "torch/cudnn"

        def call() -> object:
            return F.conv2d(args[0], weight, stride=stride, padding=pad, groups=groups)

    else:
        return None

    def synced() -> object:
        with torch.no_grad():
            out = call()
        torch.cuda.synchronize()  # the timing loop measures finished kernels
        return out

    return library, synced


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]["name"]
        return f"numpy/{blas}"
    except Exception:  # the layout of numpy's config is not a stable API
        return "numpy"


def _torch_conv(
    workload: Workload, inputs: list[np.ndarray], threads: int
) -> tuple[str, Callable[[], object]]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    data = torch.from_numpy(inputs[0])
    weight = torch.from_numpy(inputs[1])
    stride, pad = workload.shape["stride"], workload.shape["pad"]
    groups = 1
    if workload.name == "depthwise_conv2d":
        groups = weight.shape[0]
        weight = weight.unsqueeze(1)
    library = "onednn" if torch.backends.mkldnn.is_available() else "native"

    def conv() -> object:
        with torch.no_grad():
            return F.conv2d(data, weight, stride=stride, padding=pad, groups=groups)

    return f"torch/{library}", conv
