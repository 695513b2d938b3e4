"""Vendor baselines: the library kernel a user would otherwise call for the same operator and
shape, and its timing.

On the CPU, with ``tensortune[baselines]`` (PyTorch) installed, every operator has PyTorch's
library path: ``torch.matmul`` / ``torch.bmm`` / ``F.linear`` + ReLU on MKL, conv2d and
depthwise conv2d (groups) on oneDNN, in the faster of NCHW and channels_last. The matmul family
also has NumPy's BLAS (OpenBLAS in the PyPI wheels), and the faster library is the vendor: on
AMD CPUs MKL takes slower code paths, and OpenBLAS ran matmul 1024 and BERT FFN 1.5-2.3x
faster than PyTorch's MKL on one thread of the project's EPYC VM. Without PyTorch, NumPy alone,
and the convolutions have no vendor. On a CUDA target, PyTorch's cuBLAS and cuDNN in fp32
(TF32 off). The library name says which ran, with its version, e.g. ``"torch-2.13.0/onednn"``
or ``"numpy-2.4.6/scipy-openblas"``.

Why a reading is robust (`vendor_time`): the libraries' thread teams busy-wait between parallel
regions (libgomp under PyTorch, OpenBLAS under NumPy). When another process holds one of the
cores, a team as wide as the machine waits for its descheduled member in every region: on the
2-core VM, matmul 128 on two OpenBLAS threads read 0.2 GFLOP/s against 50 on one, and
ResNet-18 C7 on two torch threads 2.4 against 40, while TVM's pool (which yields while it
waits) lost about 20 %. So the vendor is timed with the study's threads and with one thread,
and in each of its layouts, round-robin, and the variant with the lowest median is kept: what
a user would pick on that machine at that moment. Each is warmed up first (oneDNN creates its
primitives and MKL its buffers on the first calls), and each gets `REPEAT_FACTOR` times the
costs a candidate gets, each as long: with the default settings, 10 costs of at least 50 ms.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tensortune.measure.worker_tasks import DEVICE_OF_KIND
from tensortune.workloads import Workload

#: A vendor reading records this many times the costs a candidate does: it is the one number
#: every candidate of a study is compared with.
REPEAT_FACTOR = 2

Kernel = Callable[[], object]
#: A library's name and a zero-argument callable that runs `workload` with it.
Variant = tuple[str, Kernel]


def vendor_kernels(workload: Workload, device: str = "cpu") -> list[Variant]:
    """Every installed library's callables for `workload` (one per layout it may run in),
    with the library's name; empty when none covers the operator.

    Args:
        workload: The operator at its shape.
        device: ``"cpu"`` (default) or ``"cuda"``: PyTorch's cuBLAS / cuDNN on GPU 0, in fp32
            with TF32 off, each call waiting for the GPU.
    """
    inputs = workload.random_inputs(seed=0)
    has_torch = _import_torch() is not None
    if device == "cuda":
        return _torch_cuda(workload, inputs) if has_torch else []
    variants = _numpy(workload, inputs)
    return (_torch_cpu(workload, inputs) if has_torch else []) + variants


def vendor_time(
    workload: Workload,
    repeat: int,
    min_repeat_ms: int,
    threads: int,
    device_kind: str = "llvm",
    library: str | None = None,
) -> tuple[str, list[float]] | None:
    """Time the vendor libraries on `workload` and keep the fastest: (library name, costs in
    seconds), or None if none covers it. Runs in the timing worker
    (`tensortune.measure.Measurer.vendor_baseline`).

    Args:
        workload: The operator at its shape.
        repeat: Costs a candidate records (`MeasureSettings.repeat`); each variant records
            `REPEAT_FACTOR` times as many.
        min_repeat_ms: Least milliseconds one cost spans, as for a candidate; each variant is
            also warmed up for at least this long (and 3 calls).
        threads: CPU threads the study's kernels use; the vendor runs on these and on one,
            the faster is kept, and the library's thread settings are restored after.
        device_kind: Target kind whose device runs it. Default ``"llvm"``: the CPU.
        library: Time only this library (a name an earlier reading returned), e.g. to re-time
            the vendor a study was tuned against. Default None: every installed one.
    """
    device = DEVICE_OF_KIND.get(device_kind, device_kind)
    found = [v for v in vendor_kernels(workload, device) if library in (None, v[0])]
    if not found:
        return None
    counts = sorted({threads, 1}, reverse=True) if device == "cpu" else [threads]
    variants = [(count, name, kernel) for count in counts for name, kernel in found]
    for count, _, kernel in variants:
        with _thread_limit(count, device):
            _warm_up(kernel, min_repeat_ms)
    # Round-robin, so that a load that comes or goes mid-reading hits every variant alike.
    costs: list[list[float]] = [[] for _ in variants]
    for _ in range(REPEAT_FACTOR * repeat):
        for (count, _, kernel), mine in zip(variants, costs, strict=True):
            with _thread_limit(count, device):
                kernel()  # the thread team at its new width before the clock starts
                mine += _costs(kernel, 1, min_repeat_ms)
    best = min(range(len(variants)), key=lambda i: statistics.median(costs[i]))
    return variants[best][1], costs[best]


def _costs(kernel: Kernel, repeat: int, min_repeat_ms: float) -> list[float]:
    """`repeat` costs, each the mean seconds of as many calls as span `min_repeat_ms`."""
    costs = []
    for _ in range(repeat):
        runs, start = 0, time.perf_counter()
        while True:
            kernel()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed * 1000 >= min_repeat_ms:
                break
        costs.append(elapsed / runs)
    return costs


def _warm_up(kernel: Kernel, ms: float) -> None:
    runs, start = 0, time.perf_counter()
    while runs < 3 or (time.perf_counter() - start) * 1000 < ms:
        kernel()
        runs += 1


@contextlib.contextmanager
def _thread_limit(threads: int, device: str) -> Iterator[None]:
    """PyTorch's intra-op threads and the BLAS / OpenMP pools set to `threads`, restored after
    (on the CPU only)."""
    if device != "cpu":
        yield
        return
    from threadpoolctl import threadpool_limits

    torch = _loaded_torch()
    before = torch.get_num_threads() if torch is not None else None
    try:
        with threadpool_limits(limits=threads):
            if torch is not None:
                torch.set_num_threads(threads)
            yield
    finally:
        if torch is not None and before is not None:
            torch.set_num_threads(before)


def _import_torch() -> Any:
    """PyTorch, or None where it is not installed (or hidden: ``sys.modules["torch"] = None``)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _loaded_torch() -> Any:
    return sys.modules.get("torch")


def _torch_library(torch: Any, kind: str) -> str:
    version = torch.__version__.split("+")[0]
    if kind == "blas":
        available = torch.backends.mkl.is_available()
        return f"torch-{version}/{'mkl' if available else 'native'}"
    if kind == "conv":
        available = torch.backends.mkldnn.is_available()
        return f"torch-{version}/{'onednn' if available else 'native'}"
    return f"torch-{version}/{kind}"


def _torch_cpu(workload: Workload, inputs: list[np.ndarray]) -> list[Variant]:
    import torch
    import torch.nn.functional as F

    args = [torch.from_numpy(a) for a in inputs]
    name = workload.name
    if name in ("matmul", "batch_matmul"):
        a, b = args
        out = torch.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype)
        # torch.bmm for the batched case: one library call over the batch.
        op = torch.matmul if name == "matmul" else torch.bmm
        return [(_torch_library(torch, "blas"), _no_grad(torch, lambda: op(a, b, out=out)))]
    if name == "dense_bias_relu":
        x, w, bias = args  # w is (N, K), as F.linear wants it
        dense = _no_grad(torch, lambda: torch.relu_(F.linear(x, w, bias)))
        return [(_torch_library(torch, "blas"), dense)]
    if name in ("conv2d", "depthwise_conv2d"):
        data, weight = args
        stride, pad = workload.shape["stride"], workload.shape["pad"]
        groups = 1
        if name == "depthwise_conv2d":
            groups = weight.shape[0]
            weight = weight.unsqueeze(1)
        library, kernels = _torch_library(torch, "conv"), []
        for layout in (torch.contiguous_format, torch.channels_last):
            # Inputs already in the layout: a user running channels_last keeps it throughout.
            d, w = data.contiguous(memory_format=layout), weight.contiguous(memory_format=layout)

            def conv(d: Any = d, w: Any = w) -> object:
                return F.conv2d(d, w, stride=stride, padding=pad, groups=groups)

            kernels.append((library, _no_grad(torch, conv)))
        return kernels
    return []


def _no_grad(torch: Any, call: Kernel) -> Kernel:
    def run() -> object:
        with torch.no_grad():
            return call()

    return run


def _numpy(workload: Workload, inputs: list[np.ndarray]) -> list[Variant]:
    name = workload.name
    if name in ("matmul", "batch_matmul"):
        a, b = inputs
        out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype)
        return [(_blas_name(), lambda: np.matmul(a, b, out=out))]
    if name == "dense_bias_relu":
        x, w, bias = inputs
        wt = np.ascontiguousarray(w.T)
        out = np.empty((x.shape[0], w.shape[0]), dtype=x.dtype)

        def dense() -> object:
            np.matmul(x, wt, out=out)
            np.add(out, bias, out=out)
            return np.maximum(out, 0, out=out)

        return [(_blas_name(), dense)]
    return []


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]["name"]
        return f"numpy-{np.__version__}/{blas}"
    except Exception:  # the layout of numpy's config is not a stable API
        return f"numpy-{np.__version__}"


def _torch_cuda(workload: Workload, inputs: list[np.ndarray]) -> list[Variant]:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    args = [torch.from_numpy(a).cuda() for a in inputs]
    name = workload.name
    call: Kernel
    if name in ("matmul", "batch_matmul"):
        library = _torch_library(torch, "cublas")
        op = torch.matmul if name == "matmul" else torch.bmm

        def call() -> object:
            return op(args[0], args[1])

    elif name == "dense_bias_relu":
        library = _torch_library(torch, "cublas")

        def call() -> object:
            return torch.relu(F.linear(*args))

    elif name in ("conv2d", "depthwise_conv2d"):
        weight = args[1] if name == "conv2d" else args[1].unsqueeze(1)
        groups = 1 if name == "conv2d" else weight.shape[0]
        stride, pad = workload.shape["stride"], workload.shape["pad"]
        library = _torch_library(torch, "cudnn")

        def call() -> object:
            return F.conv2d(args[0], weight, stride=stride, padding=pad, groups=groups)

    else:
        return []

    def synced() -> object:
        with torch.no_grad():
            out = call()
        torch.cuda.synchronize()  # the timing loop measures finished kernels
        return out

    return [(library, synced)]
