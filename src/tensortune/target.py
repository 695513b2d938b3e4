"""Targets: what the user types (``llvm``, a JSON object, ``llvm -mcpu=...``) → a TVM target.

The host's core count and LLVM CPU name are detected, never assumed.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import TYPE_CHECKING, Any

from tensortune.errors import TensortuneError

if TYPE_CHECKING:
    from tvm.target import Target

#: Target kinds that have a schedule template.
SUPPORTED_KINDS = ("llvm", "cuda")


def host_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def host_cpu() -> str:
    """The LLVM name of this machine's CPU (``-mcpu``), e.g. ``znver4`` or ``skylake-avx512``."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def host_missing_features(mcpu: str, cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """LLVM ``mattr`` entries (``"-avx512f"``, ...) turning off the vector instruction sets the
    CPU named `mcpu` has but this machine does not offer, per the ``flags`` line of `cpuinfo`
    (default ``"/proc/cpuinfo"``, Linux's own).

    LLVM names the host CPU by its model, and a hypervisor may hide some of its sets: a Zen 4
    guest without AVX-512 is still ``znver4``, and kernels built for that name alone die of an
    illegal instruction. Empty where nothing is missing or where `cpuinfo` cannot be read.
    """
    from tvm.target import Target, codegen

    try:
        with open(cpuinfo) as lines:
            flags = next((line for line in lines if line.startswith("flags")), "")
    except OSError:
        return []
    offered = {_feature_key(flag) for flag in flags.partition(":")[2].split()}
    if not offered:
        return []
    implied = codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": mcpu}))
    return sorted(
        f"-{name}"
        for name in map(str, implied)
        if name.startswith(_VECTOR_FEATURE_PREFIXES) and "." not in name
        and _feature_key(name) not in offered
    )  # fmt: skip


# Instruction sets a hypervisor may hide. LLVM's ``avx10.*`` have no spelling in
# /proc/cpuinfo to compare with, so they are left alone.
_VECTOR_FEATURE_PREFIXES = ("avx", "amx", "fma", "f16c")


def _feature_key(name: str) -> str:
    """A feature's name as both LLVM (``avx512vnni``) and Linux (``avx512_vnni``) spell it."""
    return name.replace("_", "").replace("-", "").lower()


def target_spec(text: str | dict[str, Any] | None = "llvm") -> dict[str, Any]:
    """Parse a target description into a TVM target dict, filling in host details for llvm.

    Accepts ``"llvm"`` (this machine: its CPU, less any vector instruction set the machine does
    not offer (`host_missing_features`), and its core count), a dict or JSON object such as
    ``{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 8}``, or the pre-0.27 flag form
    ``"llvm -mcpu=znver4 -num-cores=2"``. ``"cuda"`` takes the ``arch`` of this machine's first
    GPU (``nvidia-smi``); give it, e.g. ``{"kind": "cuda", "arch": "sm_90"}``, where there is
    none. Raises `TensortuneError` for anything else, and for an llvm ``mcpu`` or ``mtriple``
    that LLVM does not know or a ``num-cores`` that is not a positive integer.
    """
    if text is None:
        text = "llvm"
    if isinstance(text, dict):
        spec = dict(text)
    elif text.strip().startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as err:
            raise TensortuneError(
                f"malformed target {text!r}: not valid JSON ({err.msg})"
            ) from None
        if not isinstance(spec, dict):
            raise TensortuneError(f"malformed target {text!r}: expected a JSON object")
    else:
        spec = _parse_flags(text)
    kind = spec.get("kind")
    if not isinstance(kind, str) or not kind:
        raise TensortuneError(f"malformed target {text!r}: no kind given")
    if kind not in SUPPORTED_KINDS:
        raise TensortuneError(
            f"unsupported target kind {kind!r}; tensortune has templates for: "
            + ", ".join(SUPPORTED_KINDS)
        )
    if kind == "llvm":
        if "mcpu" not in spec:
            spec["mcpu"] = host_cpu()
            missing = host_missing_features(spec["mcpu"])
            if missing and "mattr" not in spec:
                spec["mattr"] = missing
        spec.setdefault("num-cores", host_cores())
    if kind == "cuda" and "arch" not in spec:
        arch = host_gpu_arch()
        if arch is None:
            raise TensortuneError(
                "target cuda needs an arch (no GPU found here to read it from), e.g. "
                '\'{"kind": "cuda", "arch": "sm_90"}\''
            )
        spec["arch"] = arch
    make_target(spec)  # let TVM reject unknown attributes now, not in a worker
    if kind == "llvm":
        _check_llvm(spec)
    return spec


def _check_llvm(spec: dict[str, Any]) -> None:
    """Refuse what TVM accepts but LLVM would not honour: a CPU or triple LLVM does not know
    (TVM builds for a generic CPU, or fails in a worker) and a core count that is not a
    positive integer."""
    from tvm.target import Target, codegen

    cores = spec["num-cores"]
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise TensortuneError(f"num-cores must be a positive integer, got {cores!r}")
    triple = spec.get("mtriple")
    if triple is None:
        triple = str(codegen.llvm_get_system_triple())
    elif not isinstance(triple, str) or not _quietly(codegen.llvm_is_valid_cpu, "generic", triple):
        # (Asking for the CPU list of such a triple would crash TVM.)
        raise TensortuneError(f"unknown mtriple {triple!r}: LLVM has no target for it")
    mcpu = spec["mcpu"]
    if not isinstance(mcpu, str):
        raise TensortuneError(f"mcpu must be an LLVM CPU name, got {mcpu!r}")
    if codegen.llvm_is_valid_cpu(mcpu, triple):
        return
    known = [
        str(n) for n in codegen.llvm_get_cpu_archlist(Target({"kind": "llvm", "mtriple": triple}))
    ]
    close = difflib.get_close_matches(mcpu.strip().lower(), known, n=3, cutoff=0.5)
    if close:
        hint = f"did you mean {', '.join(close)}?"
    elif "mtriple" in spec:
        hint = "e.g. generic"
    else:
        hint = f"leave mcpu out to build for this machine's CPU ({host_cpu()})"
    raise TensortuneError(f"unknown mcpu {mcpu!r}: LLVM has no such CPU for {triple}; {hint}")


def _quietly(function: Any, *args: Any) -> Any:
    """`function(*args)` with file descriptor 2 muted: LLVM logs there, past Python's
    sys.stderr, when it is asked about a triple it does not know."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            return function(*args)
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def make_target(spec: dict[str, Any]) -> Target:
    """A `tvm.target.Target` from a spec dict; `TensortuneError` if TVM rejects it."""
    from tvm.target import Target

    try:
        return Target(spec)
    except Exception as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise TensortuneError(f"malformed target {json.dumps(spec)}: {first}") from None


def host_gpu_arch() -> str | None:
    """``sm_XY`` of this machine's first NVIDIA GPU, from ``nvidia-smi``; None without one."""
    import subprocess

    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    if done.returncode != 0 or not lines or "." not in lines[0]:
        return None
    return "sm_" + lines[0].replace(".", "")


def gpu_present() -> bool:
    """Whether TVM can run kernels on a local CUDA GPU (driver and device present)."""
    try:
        import tvm

        return bool(tvm.runtime.enabled("cuda") and tvm.cuda(0).exist)
    except Exception:  # no driver: TVM's CUDA runtime cannot load
        return False


def describe(spec: dict[str, Any]) -> str:
    """A short name for a target spec, e.g. ``llvm-znver4``."""
    parts = [str(spec["kind"])]
    for key in ("mcpu", "arch"):
        if key in spec:
            parts.append(str(spec[key]))
    return "-".join(parts)


def _parse_flags(text: str) -> dict[str, Any]:
    tokens = text.split()
    if not tokens:
        raise TensortuneError("malformed target '': empty")
    spec: dict[str, Any] = {"kind": tokens[0]}
    for token in tokens[1:]:
        key, sep, value = token.lstrip("-").partition("=")
        if not token.startswith("-") or not sep or not key:
            raise TensortuneError(f"malformed target {text!r}: expected -key=value, got {token!r}")
        spec[key] = int(value) if value.isdigit() else value
    return spec
