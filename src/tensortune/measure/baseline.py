"""Vendor baselines: the library a user would otherwise call for the same operator and shape.

NumPy (its BLAS, OpenBLAS in the PyPI wheels) for matmul, batch_matmul and dense; PyTorch's CPU
convolution (oneDNN) for conv2d and depthwise_conv2d when ``tensortune[baselines]`` is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np

from tensortune.workloads import Workload


def vendor_kernel(workload: Workload, threads: int) -> tuple[str, Callable[[], object]] | None:
    """A zero-argument callable running the vendor's version of `workload`, with its name."""
    inputs = workload.random_inputs(seed=0)
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
