"""The built-in operators: each a tensor expression, a NumPy reference and a FLOP count."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tensortune.workloads._registry import register_workload

if TYPE_CHECKING:
    from tvm import te


def output_size(size: int, kernel: int, stride: int, pad: int) -> int:
    """Output extent of a convolution along one axis; `ValueError` if the kernel does not fit."""
    if stride <= 0:
        raise ValueError(f"stride must be positive, got {stride}")
    out = (size + 2 * pad - kernel) // stride + 1
    if out <= 0:
        raise ValueError(f"a {kernel}-wide kernel with pad {pad} does not fit input size {size}")
    return out


def _padded(data: te.Tensor, pad: int) -> te.Tensor:
    """Zero-pad the spatial axes of an NCHW tensor, as a stage of its own."""
    from tvm import te

    if pad == 0:
        return data
    n, c, h, w = (int(d) for d in data.shape)
    return te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda i, j, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[i, j, y - pad, x - pad],
            te.const(0.0, data.dtype),
        ),
        name="pad",
    )


def conv2d_reference(
    data: np.ndarray, weight: np.ndarray, stride: int, pad: int, depthwise: bool = False
) -> np.ndarray:
    """NumPy NCHW convolution in float64; `weight` is OIHW, or (C, KH, KW) when `depthwise`."""
    kh, kw = weight.shape[-2:]
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    pattern = "ncyxhw,chw->ncyx" if depthwise else "ncyxhw,fchw->nfyx"
    return np.einsum(pattern, windows, weight.astype(np.float64), optimize=True)


def _matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@register_workload("matmul", reference=_matmul_reference, flops=lambda M, N, K: 2.0 * M * N * K)
def matmul(M: int, N: int, K: int) -> list[te.Tensor]:
    """C[M, N] = A[M, K] @ B[K, N] in float32."""
    from tvm import te

    a = te.placeholder((M, K), "float32", name="A")
    b = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return [a, b, c]


@register_workload(
    "batch_matmul",
    reference=_matmul_reference,
    flops=lambda B, M, N, K: 2.0 * B * M * N * K,
)
def batch_matmul(B: int, M: int, N: int, K: int) -> list[te.Tensor]:
    """C[B, M, N] = A[B, M, K] @ W[B, K, N] in float32."""
    from tvm import te

    a = te.placeholder((B, M, K), "float32", name="A")
    w = te.placeholder((B, K, N), "float32", name="W")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((B, M, N), lambda b, i, j: te.sum(a[b, i, k] * w[b, k, j], axis=k), name="C")
    return [a, w, c]


def _dense_bias_relu_reference(data: np.ndarray, weight: np.ndarray, bias: np.ndarray):
    dense = data.astype(np.float64) @ weight.astype(np.float64).T
    return np.maximum(dense + bias, 0.0)


@register_workload(
    "dense_bias_relu",
    reference=_dense_bias_relu_reference,
    flops=lambda M, N, K: 2.0 * M * N * K + 2.0 * M * N,
)
def dense_bias_relu(M: int, N: int, K: int) -> list[te.Tensor]:
    """Out[M, N] = max(X[M, K] @ W[N, K]^T + bias[N], 0): a dense layer with a fused epilogue."""
    from tvm import te

    x = te.placeholder((M, K), "float32", name="X")
    w = te.placeholder((N, K), "float32", name="W")
    bias = te.placeholder((N,), "float32", name="bias")
    k = te.reduce_axis((0, K), name="k")
    dense = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="dense")
    out = te.compute(
        (M, N),
        lambda i, j: te.max(dense[i, j] + bias[j], te.const(0.0, "float32")),
        name="bias_relu",
    )
    return [x, w, bias, out]


def _conv2d_flops(
    N: int, C: int, H: int, W: int, OC: int, KH: int, KW: int, stride: int, pad: int
) -> float:
    oh, ow = output_size(H, KH, stride, pad), output_size(W, KW, stride, pad)
    return 2.0 * N * OC * oh * ow * C * KH * KW


def _conv2d_reference(data: np.ndarray, weight: np.ndarray, stride: int, pad: int) -> np.ndarray:
    return conv2d_reference(data, weight, stride, pad)


@register_workload("conv2d", reference=_conv2d_reference, flops=_conv2d_flops)
def conv2d(
    N: int,
    C: int,
    H: int,
    W: int,
    OC: int,
    KH: int = 3,
    KW: int = 3,
    stride: int = 1,
    pad: int = 1,
) -> list[te.Tensor]:
    """NCHW convolution of data[N, C, H, W] with weight[OC, C, KH, KW], float32."""
    from tvm import te

    oh, ow = output_size(H, KH, stride, pad), output_size(W, KW, stride, pad)
    data = te.placeholder((N, C, H, W), "float32", name="data")
    weight = te.placeholder((OC, C, KH, KW), "float32", name="weight")
    padded = _padded(data, pad)
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, OC, oh, ow),
        lambda n, f, y, x: te.sum(
            padded[n, rc, y * stride + ry, x * stride + rx] * weight[f, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="conv",
    )
    return [data, weight, out]


def _depthwise_flops(N: int, C: int, H: int, W: int, KH: int, KW: int, stride: int, pad: int):
    oh, ow = output_size(H, KH, stride, pad), output_size(W, KW, stride, pad)
    return 2.0 * N * C * oh * ow * KH * KW


def _depthwise_reference(data: np.ndarray, weight: np.ndarray, stride: int, pad: int) -> np.ndarray:
    return conv2d_reference(data, weight, stride, pad, depthwise=True)


@register_workload("depthwise_conv2d", reference=_depthwise_reference, flops=_depthwise_flops)
def depthwise_conv2d(
    N: int, C: int, H: int, W: int, KH: int = 3, KW: int = 3, stride: int = 1, pad: int = 1
) -> list[te.Tensor]:
    """Depthwise NCHW convolution: channel c of data[N, C, H, W] with weight[C, KH, KW]."""
    from tvm import te

    oh, ow = output_size(H, KH, stride, pad), output_size(W, KW, stride, pad)
    data = te.placeholder((N, C, H, W), "float32", name="data")
    weight = te.placeholder((C, KH, KW), "float32", name="weight")
    padded = _padded(data, pad)
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, C, oh, ow),
        lambda n, c, y, x: te.sum(
            padded[n, c, y * stride + ry, x * stride + rx] * weight[c, ry, rx], axis=[ry, rx]
        ),
        name="depthwise",
    )
    return [data, weight, out]
