"""GPU study, for the lent GPU machine: tensortune's CUDA template against cuBLAS / cuDNN.

Tunes matmul 1024³ and the ResNet-18 C7 and C12 convolutions on a CUDA target with tensortune
and prints each study's best time beside PyTorch's (cuBLAS for matmul, cuDNN for conv2d; TF32
off on both, so all run in plain float32), timed with CUDA events on the same GPU. The ratio
column is torch time / tensortune time: above 1 when tensortune is faster.

    python studies/gpu_study.py                        # 256 trials each, arch sm_90a (H100)
    python studies/gpu_study.py --trials 64 --arch sm_80 --workloads matmul-1024

Status: `tensortune.templates.CudaTemplate` exists but is not wired into `target_spec`, `tune`
and the measurer yet. Until it is, this script stops at the first step with a message saying
what is missing, instead of tuning on the CPU or printing made-up numbers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from tensortune.errors import TensortuneError
from tensortune.workloads import PRESETS, get_workload

#: Label → (workload name, shape).
WORKLOADS = {
    "matmul-1024": ("matmul", dict(M=1024, N=1024, K=1024)),
    "resnet18-c7": PRESETS["resnet18-c7"],
    "resnet18-c12": PRESETS["resnet18-c12"],
}
MISSING = """\
tensortune cannot tune for CUDA yet: {reason}
The CUDA template exists (tensortune.templates.CudaTemplate) but these pieces are missing:
  - target.py: "cuda" in SUPPORTED_KINDS / target_spec;
  - tuning.py (tune, Objective) and cli.py: pick CudaTemplate for target kind "cuda";
  - measure/: build with nvcc and time on tvm.cuda(0) instead of tvm.cpu(0);
  - features/, cost model: GPU features (threads, blocks, shared memory, occupancy).
See the module docstring of src/tensortune/templates/cuda.py."""


def torch_seconds(name: str, shape: dict[str, int], repeat: int = 100) -> float:
    """Median seconds of PyTorch's float32 kernel (cuBLAS / cuDNN, TF32 off) for the workload."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its best algorithm, as tuning does
    dev = torch.device("cuda")
    if name == "matmul":
        a = torch.randn(shape["M"], shape["K"], device=dev)
        b = torch.randn(shape["K"], shape["N"], device=dev)

        def run() -> object:
            return a @ b

    else:
        data = torch.randn(shape["N"], shape["C"], shape["H"], shape["W"], device=dev)
        weight = torch.randn(shape["OC"], shape["C"], shape["KH"], shape["KW"], device=dev)

        def run() -> object:
            return torch.nn.functional.conv2d(
                data, weight, stride=shape["stride"], padding=shape["pad"]
            )

    for _ in range(10):  # warm-up, cuDNN autotuning
        run()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=256, help="trials per study (default 256)")
    parser.add_argument("--arch", default="sm_90a", help="CUDA arch (default sm_90a, H100)")
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=list(WORKLOADS),
        default=list(WORKLOADS),
        help="default: all of " + ", ".join(WORKLOADS),
    )
    parser.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    parser.add_argument("--storage", default=None, help="Optuna storage (default: temp SQLite)")
    args = parser.parse_args()

    from tensortune.target import target_spec

    try:
        spec = target_spec({"kind": "cuda", "arch": args.arch})
    except TensortuneError as err:
        print(MISSING.format(reason=err), file=sys.stderr)
        return 2
    import tvm

    if not tvm.cuda(0).exist:
        print("no CUDA device visible to TVM: run this on the GPU machine", file=sys.stderr)
        return 2

    import tensortune
    from tensortune.storage import best_summary

    storage = args.storage or f"sqlite:///{tempfile.mkdtemp()}/gpu_study.db"
    print(f"{'workload':14} {'tensortune ms':>14} {'GFLOP/s':>9} {'torch ms':>9} {'ratio':>6}")
    for label in args.workloads:
        name, shape = WORKLOADS[label]
        study = tensortune.tune(
            name,
            target=spec,
            shape=shape,
            n_trials=args.trials,
            storage=storage,
            study_name=f"gpu-{label}",
            sampler="tpe",
            seed=args.seed,
            show_progress=False,
        )
        best = best_summary(study)
        seconds = best["seconds"] or get_workload(name, **shape).flop_count() / best["gflops"] / 1e9
        vendor = torch_seconds(name, shape)
        print(
            f"{label:14} {seconds * 1e3:14.4f} {best['gflops']:9.1f} {vendor * 1e3:9.4f} "
            f"{vendor / seconds:6.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
