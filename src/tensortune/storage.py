"""Optuna storage and studies: open a URL, create or resume a tuning study, read its best trial.

A study records what it tunes in its user attrs, so that a resumed or exported study rebuilds
exactly the same program: ``workload`` (key), ``workload_name``, ``shape``, ``target``,
``flop_count`` and, once measured, ``vendor_library`` / ``vendor_seconds`` / ``vendor_gflops``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import optuna

from tensortune.errors import TensortuneError
from tensortune.workloads import Workload, get_workload

#: Where studies go unless the user says otherwise: a SQLite file in the working directory.
DEFAULT_STORAGE = "sqlite:///tensortune.db"


def open_storage(url: str | None, must_exist: bool = False) -> optuna.storages.BaseStorage:
    """Open an Optuna storage URL (SQLite, PostgreSQL, MySQL, ...).

    Args:
        url: An SQLAlchemy URL. Default `DEFAULT_STORAGE`.
        must_exist: Refuse to create a SQLite file that is not there yet (for commands that
            only read). Default False.
    """
    url = url or DEFAULT_STORAGE
    if "://" not in url:
        raise TensortuneError(
            f"malformed storage URL {url!r}; expected e.g. sqlite:///tensortune.db or "
            "postgresql://user@host/db"
        )
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if must_exist and not os.path.isfile(path):
            raise TensortuneError(f"no storage at {url}: {path} does not exist")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise TensortuneError(f"cannot open storage {url}: folder {folder} does not exist")
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        reason = lines[0].strip() if lines else type(err).__name__
        raise TensortuneError(f"cannot open storage {url}: {reason}") from None


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return sorted(s.study_name for s in storage.get_all_studies())


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    """An existing tensortune study; `TensortuneError` if there is none of that name."""
    names = study_names(storage)
    if name not in names:
        known = ", ".join(names) if names else "none"
        raise TensortuneError(f"no study named {name!r} in this storage (studies there: {known})")
    study = optuna.load_study(study_name=name, storage=storage)
    if "workload" not in study.user_attrs:
        raise TensortuneError(f"study {name!r} was not made by tensortune")
    return study


def study_workload(study: optuna.Study) -> Workload:
    """The workload a tensortune study tunes (it must be registered in this process)."""
    attrs = study.user_attrs
    return get_workload(attrs["workload_name"], **attrs["shape"])


def study_target(study: optuna.Study) -> dict[str, Any]:
    return dict(json.loads(study.user_attrs["target"]))


def find_study(
    storage: optuna.storages.BaseStorage, name: str, workload: Workload, target: dict[str, Any]
) -> optuna.Study | None:
    """The study `name` if it exists and tunes `workload` on `target`; None if it does not exist."""
    if name not in study_names(storage):
        return None
    study = optuna.load_study(study_name=name, storage=storage)
    attrs = study.user_attrs
    if attrs.get("workload") != workload.key or attrs.get("target") != target_key(target):
        raise TensortuneError(
            f"study {name!r} tunes {attrs.get('workload', '(not tensortune)')} on "
            f"{attrs.get('target', '?')}, not {workload.key} on {target_key(target)}; "
            "choose another study name"
        )
    return study


def create_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    workload: Workload,
    target: dict[str, Any],
    vendor: tuple[str, float] | None,
    sampler: optuna.samplers.BaseSampler | None,
) -> optuna.Study:
    """A new study maximising GFLOP/s, its attrs recording the workload, target and baseline."""
    study = optuna.create_study(
        study_name=name, storage=storage, direction="maximize", sampler=sampler
    )
    attrs: dict[str, Any] = {
        "workload": workload.key,
        "workload_name": workload.name,
        "shape": dict(workload.shape),
        "target": target_key(target),
        "flop_count": workload.flop_count,
    }
    if vendor is not None:
        library, seconds = vendor
        attrs |= {
            "vendor_library": library,
            "vendor_seconds": seconds,
            "vendor_gflops": workload.flop_count / seconds / 1e9,
        }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def target_key(target: dict[str, Any]) -> str:
    return json.dumps(target, sort_keys=True)


def best_summary(study: optuna.Study) -> dict[str, Any]:
    """The best COMPLETE trial's number, GFLOP/s, ratio to vendor and config."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise TensortuneError(f"study {study.study_name!r} has no completed trial yet")
    best = max(complete, key=lambda t: t.value if t.value is not None else float("-inf"))
    attrs = study.user_attrs
    return {
        "study": study.study_name,
        "workload": attrs.get("workload"),
        "target": attrs.get("target"),
        "trial": best.number,
        "gflops": best.value,
        "seconds": best.user_attrs.get("cost_s"),
        "vendor_library": attrs.get("vendor_library"),
        "vendor_gflops": attrs.get("vendor_gflops"),
        "vendor_ratio": best.user_attrs.get("vendor_ratio"),
        "trials_complete": len(complete),
        "trials_total": len(study.get_trials(deepcopy=False)),
        "config": dict(best.params),
    }
