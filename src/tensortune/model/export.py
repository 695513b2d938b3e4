"""Export a tuned model: its database, the model built with it and checked, as one folder; and
load it back to run.

The folder holds ``model.so`` (the Relax VM executable, ``export_library``), ``model.json``
(inputs, target, the check and the latencies measured at export) and MetaSchedule's JSON
database of the tasks' best kernels. It appears whole or not at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from tensortune import scratch
from tensortune.errors import TensortuneError
from tensortune.model.build import build, check_outputs, run, time_model
from tensortune.model.database import write_database
from tensortune.model.finalists import Pick, pick_finalists
from tensortune.model.frontend import InputSpec
from tensortune.model.tuning import ModelTuning

LIBRARY = "model.so"
MANIFEST = "model.json"
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ModelReport:
    """What `export_model` measured.

    Attributes:
        folder: The export.
        tuned_kernels: Tasks that got a kernel from the database.
        max_error: Largest difference from the framework's outputs (None: no framework).
        tuned_s / untuned_s: Median seconds of one run, tuned and TVM's own build.
        picks: Per task, the kernel its finalists' re-timing chose
            (`tensortune.model.finalists.Pick`), None where the study's best was built.
    """

    folder: str
    tuned_kernels: int
    max_error: float | None
    tuned_s: float
    untuned_s: float
    picks: tuple[Pick | None, ...] = ()


def export_model(
    tuning: ModelTuning,
    directory: str,
    seed: int = 0,
    finalists: int = 1,
    progress: Any = None,
) -> ModelReport:
    """Write the database of `tuning`'s best kernels, build the model with it, check its
    outputs on seeded random inputs against the framework's (and TVM's untuned build), time
    both builds, and export it to `directory` (which must not exist, or be empty).

    Args:
        tuning: From `tensortune.model.tune_model`.
        directory: The folder to create.
        seed: Seed of the check's inputs. Default 0.
        finalists: Each task's kernel is the fastest of its study's best `finalists` configs,
            timed again side by side (`tensortune.model.finalists.pick_finalists`; 4 is
            typical); 1 builds each study's best as tuning timed it. Default 1: on ResNet-18
            finalists measured a tie (1.01x, 95 % interval 0.98-1.04, two seeds).
        progress: Called with a line per task re-timed. Default None: printed to stderr.

    Raises:
        TensortuneError: A non-empty `directory`, a build TVM refuses, or outputs that differ
            from the framework's; nothing is left behind.
    """
    if finalists < 1:
        raise TensortuneError(f"finalists must be at least 1, got {finalists}")
    directory = scratch.check_new_folder(directory)
    program = tuning.program
    with scratch.staged_folder(directory) as staging:
        picks = pick_finalists(tuning, count=finalists, progress=progress)
        count = write_database(tuning.tasks, tuning.studies, tuning.target, staging, picks)
        tuned = build(program, tuning.target, staging, tuning.rewrites)
        untuned = build(program, tuning.target, None)
        rng = np.random.default_rng(seed)
        inputs = [spec.random(rng) for spec in program.inputs]
        outputs = run(tuned, inputs)
        check_outputs(outputs, run(untuned, inputs))
        error = check_outputs(outputs, program.reference(inputs)) if program.reference else None
        report = ModelReport(
            directory, count, error, time_model(tuned, inputs).median_s,
            time_model(untuned, inputs).median_s, tuple(picks),
        )  # fmt: skip
        tuned.export_library(os.path.join(staging, LIBRARY))
        manifest = {
            "format": FORMAT,
            "model": program.name,
            "inputs": [dataclasses.asdict(spec) for spec in program.inputs],
            "target": tuning.target,
            "tasks": len(tuning.tasks),
            "tuned_kernels": count,
            "prepack_weights": tuning.rewrites.prepack_weights,
            "winograd": tuning.rewrites.winograd,
            "channels_last": tuning.rewrites.channels_last,
            "finalists": finalists,
            "kernels": _kernels(tuning, picks),
            "checked_against": program.reference_name or "TVM's untuned build",
            "max_error": error,
            "tuned_ms": report.tuned_s * 1e3,
            "untuned_ms": report.untuned_s * 1e3,
        }
        with open(os.path.join(staging, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=2)
    return report


def _kernels(tuning: ModelTuning, picks: list[Pick | None]) -> list[dict[str, Any]]:
    """Per tuned task, the study and trial its kernel came from, and its seconds: re-timed
    (a finalist; with its study's best trial) or as tuning timed it."""
    from tensortune.storage import best_summary

    kernels = []
    for task, study, pick in zip(tuning.tasks, tuning.studies, picks, strict=True):
        if study is None:
            continue
        entry: dict[str, Any] = {"task": task.name, "study": study.study_name}
        if pick is not None:
            entry.update(
                trial=pick.trial, retimed_s=pick.seconds, study_best_trial=pick.finalists[0][0]
            )
        else:
            try:
                summary = best_summary(study)
            except TensortuneError:  # no completed trial: the build keeps TVM's schedule
                continue
            entry.update(trial=summary["trial"], tuning_s=summary["seconds"])
        kernels.append(entry)
    return kernels


class LoadedModel:
    """An exported model. Call it with one array per input (in ``inputs`` order); it returns
    the list of outputs.

    Attributes:
        inputs: The model's inputs.
        manifest: Everything ``model.json`` records.
    """

    def __init__(self, manifest: dict[str, Any], executable: Any) -> None:
        self.manifest = manifest
        self.inputs = [
            InputSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in manifest["inputs"]
        ]
        self._executable = executable

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        if len(arrays) != len(self.inputs):
            raise TensortuneError(f"the model takes {len(self.inputs)} inputs, got {len(arrays)}")
        for spec, array in zip(self.inputs, arrays, strict=True):
            if tuple(array.shape) != spec.shape or str(array.dtype) != spec.dtype:
                raise TensortuneError(
                    f"input {spec.name} must be {spec.dtype}{list(spec.shape)}, "
                    f"got {array.dtype}{list(array.shape)}"
                )
        return run(self._executable, [np.ascontiguousarray(a) for a in arrays])


def load_model(directory: str) -> LoadedModel:
    """The model `export_model` wrote to `directory`; `TensortuneError` if it holds none."""
    import tvm

    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        raise TensortuneError(f"{directory} holds no exported model ({MANIFEST})") from None
    if manifest.get("format") != FORMAT:
        raise TensortuneError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT}")
    executable = tvm.runtime.load_module(os.path.join(directory, LIBRARY))
    return LoadedModel(manifest, executable)
