"""Which prior studies a new study warm-starts from when told ``auto``: those of the same
target in a storage, nearest program first (`find_sources`, by `program_distance`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.trial import TrialState

from tensortune.errors import TensortuneError

if TYPE_CHECKING:
    from tensortune.workloads import Workload


#: What `source_studies` / ``--transfer-from`` take to find the sources by themselves.
AUTO = "auto"
#: Prior studies `find_sources` returns at most by default: a few close ones teach the model
#: the most, and each costs its rows' features once per new study.
AUTO_SOURCES = 4


def loop_extents(workload: Workload) -> tuple[list[int], list[int]]:
    """The extents of the spatial loops and of the reduction loops of the workload's main
    computation: the one with a reduction and the most iterations (the output's where none
    reduces), so that a fused bias or activation does not hide a dense layer's matmul."""
    try:
        tensors = workload.tensors()
    except TensortuneError:  # defined as a TIR function: read its blocks
        return _block_extents(workload)
    seen, stack, ops = set(), [tensors[-1].op], []
    while stack:
        op = stack.pop()
        if op.name in seen or not hasattr(op, "axis"):
            continue  # visited, or a placeholder
        seen.add(op.name)
        spatial = [int(axis.dom.extent) for axis in op.axis]
        reduction = [int(axis.dom.extent) for axis in op.reduce_axis]
        ops.append((bool(reduction), math.prod(spatial + reduction), spatial, reduction))
        stack.extend(t.op for t in op.input_tensors)
    _, _, spatial, reduction = max(ops, key=lambda o: o[:2])
    return spatial, reduction


def _block_extents(workload: Workload) -> tuple[list[int], list[int]]:
    """`loop_extents` of a workload's TIR blocks (for one defined as a ``PrimFunc``)."""
    from tvm import s_tir

    sch = s_tir.Schedule(workload.prim_func())
    blocks, ops = list(sch.get_child_blocks(sch.get_sblock("root"))), []
    while blocks:
        block = sch.get(blocks.pop())
        spatial = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 0]
        reduction = [int(iv.dom.extent) for iv in block.iter_vars if int(iv.iter_type) == 2]
        ops.append((bool(reduction), math.prod(spatial + reduction), spatial, reduction))
    _, _, spatial, reduction = max(ops, key=lambda o: o[:2])
    return spatial, reduction


def program_distance(a: Workload, b: Workload) -> float:
    """How unlike the programs of two workloads are: 0 for the same operator and loop nest.
    Another operator adds 1, each spatial or reduction loop one has and the other lacks adds
    1, and each of the two loop kinds adds the mean |log2| ratio of their extents, largest
    matched with largest."""
    distance = 0.0 if a.name == b.name else 1.0
    for mine, theirs in zip(loop_extents(a), loop_extents(b), strict=True):
        distance += abs(len(mine) - len(theirs))
        n = max(len(mine), len(theirs))
        if n:
            x = np.log2(sorted(mine, reverse=True) + [1] * (n - len(mine)))
            y = np.log2(sorted(theirs, reverse=True) + [1] * (n - len(theirs)))
            distance += float(np.abs(x - y).mean())
    return distance


def find_sources(
    storage: optuna.storages.BaseStorage,
    workload: Workload,
    target: str,
    limit: int = AUTO_SOURCES,
    exclude: str | None = None,
) -> list[tuple[optuna.Study, float]]:
    """The tensortune studies in `storage` measured on `target` (a JSON target key), nearest
    program first (`program_distance` to `workload`; more completed trials first among equals),
    with their distance: what ``--transfer-from auto`` warm-starts from.

    Studies of another target, not made by tensortune, of a workload not registered in this
    process, without a completed trial, or named `exclude` (the new study itself; default
    None) are passed over.

    Args:
        storage: Where to look.
        workload: The new study's workload.
        target: The new study's target key (`tensortune.storage.target_key`).
        limit: At most this many. Default `AUTO_SOURCES`.
        exclude: A study name to leave out. Default None.
    """
    from tensortune.storage import study_workload

    found = []
    for frozen in storage.get_all_studies():
        attrs = frozen.user_attrs
        if frozen.study_name == exclude or attrs.get("target") != target:
            continue
        if "workload" not in attrs:
            continue
        study = optuna.load_study(study_name=frozen.study_name, storage=storage)
        try:
            other = study_workload(study)
        except (KeyError, TensortuneError):
            continue
        n_complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        if n_complete:
            found.append((program_distance(workload, other), -n_complete, study.study_name, study))
    found.sort(key=lambda f: f[:3])
    return [(study, distance) for distance, _, _, study in found[:limit]]
