"""Targets: what the user types (``llvm``, a JSON object, ``llvm -mcpu=...``) → a TVM target.

The host's core count and LLVM CPU name are detected, never assumed.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from tensortune.errors import TensortuneError

if TYPE_CHECKING:
    from tvm.target import Target

#: Target kinds that have a schedule template.
SUPPORTED_KINDS = ("llvm",)


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


def target_spec(text: str | dict[str, Any] | None = "llvm") -> dict[str, Any]:
    """Parse a target description into a TVM target dict, filling in host details for llvm.

    Accepts ``"llvm"`` (this machine: its CPU and core count), a dict or JSON object such as
    ``{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 8}``, or the pre-0.27 flag form
    ``"llvm -mcpu=znver4 -num-cores=2"``. Raises `TensortuneError` for anything else.
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
        spec.setdefault("mcpu", host_cpu())
        spec.setdefault("num-cores", host_cores())
    make_target(spec)  # let TVM reject unknown attributes now, not in a worker
    return spec


def make_target(spec: dict[str, Any]) -> Target:
    """A `tvm.target.Target` from a spec dict; `TensortuneError` if TVM rejects it."""
    from tvm.target import Target

    try:
        return Target(spec)
    except Exception as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise TensortuneError(f"malformed target {json.dumps(spec)}: {first}") from None


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
