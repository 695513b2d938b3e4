"""Export a study's best kernel as a shared library plus its config, and load it back."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any

import numpy as np
import optuna

from tensortune import scratch
from tensortune.errors import TensortuneError
from tensortune.finalists import pick_study_finalist
from tensortune.measure.worker_tasks import mismatch
from tensortune.storage import best_summary, study_space, study_target, study_workload
from tensortune.templates import template_for
from tensortune.templates.compile import compile_config
from tensortune.templates.weight_packing import PackedWeight, pack_arguments
from tensortune.workloads import Workload, get_workload

LIBRARY = "kernel.so"
MANIFEST = "config.json"
FORMAT = 1


def export_best(study: optuna.Study, directory: str, finalists: int = 1) -> str:
    """Compile the best config of `study` into ``directory/kernel.so`` with ``config.json``.

    The folder appears whole or not at all: files are written to a temporary sibling that is
    renamed at the end. An existing non-empty `directory` is refused. Returns the folder's path.

    Args:
        study: A tensortune study with a completed trial.
        directory: The folder to create.
        finalists: Export the fastest of the study's best `finalists` configs, timed again side
            by side on this host (`tensortune.finalists.pick_study_finalist`); the manifest's
            ``finalists`` entry records the pick. Default 1: the study's best as tuning timed
            it. A study's best is the fastest of many timings, so partly luck; but on the 90
            studies of the transfer pairs at 128 trials the pick of 4, judged by another
            re-timing, ran 1.01x the study's best (95 % interval 0.99-1.03, a tie;
            ``studies/README.md``).
    """
    if finalists < 1:
        raise TensortuneError(f"finalists must be at least 1, got {finalists}")
    directory = scratch.check_new_folder(directory)
    summary = best_summary(study)
    workload = study_workload(study)
    target = study_target(study)
    template = template_for(workload, target, study_space(study))
    pick = pick_study_finalist(study, template, target, finalists) if finalists > 1 else None
    chosen = {key: summary[key] for key in ("config", "trial", "gflops", "vendor_ratio")}
    if pick is not None:
        trial = study.trials[pick.trial]
        chosen = {
            "config": pick.config,
            "trial": pick.trial,
            "gflops": trial.value,
            "vendor_ratio": trial.user_attrs.get("vendor_ratio"),
        }

    import tvm

    with scratch.staged_folder(directory) as staging:
        library = os.path.join(staging, LIBRARY)
        _, executable, packed = compile_config(template, chosen["config"], target)
        executable.export_library(library)
        manifest = {
            "format": FORMAT,
            "workload": workload.name,
            "shape": dict(workload.shape),
            "target": target,
            "space": study_space(study),
            "config": chosen["config"],
            "packed_weights": [dataclasses.asdict(w) for w in packed],
            "study": study.study_name,
            "trial": chosen["trial"],
            "gflops": chosen["gflops"],
            "vendor_ratio": chosen["vendor_ratio"],
            "tvm_version": tvm.__version__,
        }
        if pick is not None:
            manifest["finalists"] = {
                "count": finalists,
                "study_best_trial": summary["trial"],
                "retimed_gflops": workload.flop_count / pick.seconds / 1e9,
                # nan (failed now) is written as null: config.json stays strict JSON.
                "timed_again": [
                    {"trial": t, "seconds": None if math.isnan(s) else s} for t, s in pick.finalists
                ],
            }
        manifest["sha256"] = _digest(library, manifest)
        with open(os.path.join(staging, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=2)
    return directory


class Kernel:
    """A loaded exported kernel. Call it with the input arrays; it returns the output(s).

    Attributes:
        workload: The operator at the shape it was tuned for.
        config: The knob values it was built with.
        manifest: Everything ``config.json`` records.
    """

    def __init__(self, workload: Workload, manifest: dict[str, Any], module: Any) -> None:
        self.workload = workload
        self.manifest = manifest
        self.config = manifest["config"]
        self._module = module
        self._packed = [
            PackedWeight(int(w["index"]), tuple(w["shape"]))
            for w in manifest.get("packed_weights", [])
        ]

    def __call__(self, *inputs: np.ndarray) -> np.ndarray | list[np.ndarray]:
        import tvm

        specs = self.workload.argument_specs()
        wanted = [(s, d) for s, d, is_input in specs if is_input]
        if len(inputs) != len(wanted):
            raise TensortuneError(
                f"{self.workload.key} takes {len(wanted)} inputs, got {len(inputs)}"
            )
        for index, (array, (shape, dtype)) in enumerate(zip(inputs, wanted, strict=True)):
            if tuple(array.shape) != shape or str(array.dtype) != dtype:
                raise TensortuneError(
                    f"input {index} must be {dtype}{list(shape)}, "
                    f"got {array.dtype}{list(array.shape)}"
                )
        dev = tvm.cpu(0)
        outputs = [np.empty(s, dtype=d) for s, d, is_input in specs if not is_input]
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in [*inputs, *outputs]]
        # A kernel that reads weights packed packs them on each call here; a model's build
        # packs them once.
        args = pack_arguments(self._module, args, self._packed, dev)
        self._module["main"](*args)
        results = [a.numpy() for a in args[len(inputs) :]]
        return results[0] if len(results) == 1 else results

    def check(self, seed: int = 0, rtol: float = 1e-3) -> None:
        """Run on seeded random inputs and compare with the NumPy reference (default seed 0,
        rtol 1e-3); `TensortuneError` on a mismatch."""
        inputs = self.workload.random_inputs(seed)
        got = self(*inputs)
        outputs = got if isinstance(got, list) else [got]
        for index, (out, want) in enumerate(
            zip(outputs, self.workload.reference(inputs), strict=True)
        ):
            error = mismatch(out, want, rtol)
            if error:
                raise TensortuneError(f"exported kernel gives a wrong output {index}: {error}")


def load_kernel(directory: str) -> Kernel:
    """Load a folder written by `export_best`; refuses a corrupt or mismatched export."""
    manifest_path = os.path.join(directory, MANIFEST)
    library = os.path.join(directory, LIBRARY)
    if not os.path.isfile(manifest_path) or not os.path.isfile(library):
        raise TensortuneError(f"{directory} is not a tensortune export ({MANIFEST} and {LIBRARY})")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT}")
        digest = manifest.pop("sha256")
        if _digest(library, manifest) != digest:
            raise TensortuneError(
                f"corrupt export in {directory}: {LIBRARY} does not match {MANIFEST}"
            )
        workload = get_workload(manifest["workload"], **manifest["shape"])
    except TensortuneError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TensortuneError(f"corrupt export in {directory}: {MANIFEST}: {err}") from None
    import tvm

    try:
        module = tvm.runtime.load_module(library)
    except Exception as err:
        raise TensortuneError(
            f"cannot load {library}: {str(err).strip().splitlines()[-1]}"
        ) from None
    return Kernel(workload, manifest, module)


def _digest(library: str, manifest: dict[str, Any]) -> str:
    """SHA-256 over the library and the manifest, so that editing either one is detected."""
    digest = hashlib.sha256()
    with open(library, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(json.dumps(manifest, sort_keys=True).encode())
    return digest.hexdigest()
