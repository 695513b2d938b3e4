"""Optuna storage and studies: open a URL, create or resume a tuning study, read its best trial.

A study records what it tunes in its user attrs, so that a resumed or exported study rebuilds
exactly the same program: ``workload`` (key), ``workload_name``, ``shape``, ``target``,
``flop_count``, ``workload_script`` for a workload given as TVMScript and, once measured,
``vendor_library`` / ``vendor_seconds`` / ``vendor_gflops``.

A storage opened for workers that run trials records their heartbeats
(`tensortune.heartbeats`), so that a killed worker's trials are failed as stale.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
import warnings
from typing import Any

import optuna

from tensortune.errors import TensortuneError
from tensortune.heartbeats import heartbeat_settings
from tensortune.trial_records import mark_stale
from tensortune.workloads import Workload, get_workload, workload_names
from tensortune.workloads._registry import import_module
from tensortune.workloads.script import register_script, script_of

#: Where studies go unless the user says otherwise: a SQLite file in the working directory.
DEFAULT_STORAGE = "sqlite:///tensortune.db"


def open_storage(
    url: str | None, must_exist: bool = False, heartbeat: bool = False
) -> optuna.storages.BaseStorage:
    """Open an Optuna storage URL (SQLite, PostgreSQL, MySQL, ...).

    Args:
        url: An SQLAlchemy URL. Default `DEFAULT_STORAGE`. A ``postgresql://`` URL that names
            no driver uses psycopg2 when it is installed (``pip install 'tensortune[postgres]'``).
        must_exist: Refuse to create a SQLite file that is not there yet (for commands that
            only read). Default False.
        heartbeat: Enable Optuna's heartbeat, for a storage that runs trials: every
            `heartbeat_settings()[0]` seconds a running trial records that its worker lives
            (`tensortune.heartbeats.TrialHeartbeats` in ask/tell loops; ``study.optimize`` by
            itself), and a trial silent for the grace period is failed by
            `tensortune.heartbeats.fail_stale_trials` and marked stale.
            Default False: readers need none, and Optuna warns at every ``study.ask`` outside
            ``study.optimize`` on such a storage.
    """
    url = url or DEFAULT_STORAGE
    if "://" not in url:
        raise TensortuneError(
            f"malformed storage URL {url!r}; expected e.g. sqlite:///tensortune.db or "
            "postgresql://user@host/db"
        )
    if _in_memory(url):
        raise TensortuneError(
            f"storage {_shown(url)} is in memory: every trial would be lost when the process "
            "ends; give a file, e.g. sqlite:///tensortune.db"
        )
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if must_exist and not os.path.isfile(path):
            raise TensortuneError(f"no storage at {_shown(url)}: {_shown(path)} does not exist")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise TensortuneError(
                f"cannot open storage {_shown(url)}: folder {_shown(folder)} does not exist"
            )
    shown, url = url, _with_postgres_driver(url)
    options: dict[str, Any] = {}
    if heartbeat:
        interval, grace = heartbeat_settings()
        options = {
            "heartbeat_interval": interval,
            "grace_period": grace,
            "heartbeat_stale_trial_callback": mark_stale,
        }
    try:
        with warnings.catch_warnings():
            # Optuna flags heartbeats as experimental; they are what lets workers die safely.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _rdb_storage(url, options)
    except Exception as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        reason = lines[0].strip() if lines else type(err).__name__
        if isinstance(err, ImportError) and shown.startswith(
            ("postgresql://", "postgresql+psycopg2")
        ):
            reason = f"{reason.rstrip('.')}; pip install 'tensortune[postgres]' installs psycopg2"
        raise TensortuneError(f"cannot open storage {_shown(shown)}: {reason}") from None


def _in_memory(url: str) -> bool:
    """Whether `url` is an in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``,
    ``...?mode=memory``), which each connection sees empty."""
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return False
    database = rest.removeprefix("/").partition("?")[0]
    return (
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or "mode=memory" in rest
    )


def _shown(text: str) -> str:
    """A URL or path for an error message: a password hidden, and quoted when it holds
    characters that are not printable (a newline would break the one-line message)."""
    text = re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", text)
    return text if text.isprintable() else repr(text)


def _with_postgres_driver(url: str) -> str:
    """`url`, a driverless ``postgresql://`` one naming psycopg2 when that is installed.

    SQLAlchemy 2.1 made psycopg 3 the default driver of ``postgresql://``, while
    ``tensortune[postgres]`` installs psycopg2 (every SQLAlchemy release supports it); a URL
    naming its driver, ``postgresql+psycopg://`` say, is kept as it is.
    """
    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


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
    if attrs["workload_name"] not in workload_names() and attrs.get("workload_script"):
        register_script(attrs["workload_name"], attrs["workload_script"])
    if attrs["workload_name"] not in workload_names() and attrs.get("workload_module"):
        import_module(attrs["workload_module"])  # it registers the workload
    return get_workload(attrs["workload_name"], **attrs["shape"])


def study_target(study: optuna.Study) -> dict[str, Any]:
    return dict(json.loads(study.user_attrs["target"]))


def study_space(study: optuna.Study) -> str:
    """The search space a tensortune study tunes in (`tensortune.templates.SPACES`); studies
    from before there was a choice tuned the hand-written template."""
    return str(study.user_attrs.get("space", "template"))


#: Seconds a worker waits for the attrs of a study that another worker has just created.
_ATTRS_WAIT = 30.0


def find_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    workload: Workload,
    target: dict[str, Any],
    sampler: optuna.samplers.BaseSampler | None = None,
    space: str = "template",
) -> optuna.Study | None:
    """The study `name` if it exists and tunes `workload` on `target` in `space`; None if it
    does not exist.

    A study that exists without its attrs and without trials is being created by another
    worker (`create_study` writes them just after): it is waited for, up to 30 s.

    Args:
        storage: The storage to look in.
        name: The study's name.
        workload: What the study must tune.
        target: Where it must tune it.
        sampler: The sampler the study is loaded with. Default None: Optuna's default.
        space: The search space it must tune in (`tensortune.templates.SPACES`). Default
            ``"template"``.
    """
    if name not in study_names(storage):
        return None
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    attrs = study.user_attrs
    deadline = time.monotonic() + _ATTRS_WAIT
    while "target" not in attrs and not study.get_trials(deepcopy=False):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
        attrs = study.user_attrs
    if attrs.get("workload") != workload.key or attrs.get("target") != target_key(target):
        raise TensortuneError(
            f"study {name!r} tunes {attrs.get('workload', '(not tensortune)')} on "
            f"{attrs.get('target', '?')}, not {workload.key} on {target_key(target)}; "
            "choose another study name"
        )
    if "target" in attrs and study_space(study) != space:
        raise TensortuneError(
            f"study {name!r} tunes in the {study_space(study)} space, not {space}; "
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
    space: str = "template",
) -> optuna.Study:
    """A new study maximising GFLOP/s, its attrs recording the workload, target, search space
    (default ``"template"``) and baseline.

    When another worker creates a study of that name first, that study is returned (checked
    and waited for as by `find_study`), so that workers started together join one study; its
    attrs are the other worker's.
    """
    try:
        study = optuna.create_study(
            study_name=name, storage=storage, direction="maximize", sampler=sampler
        )
    except optuna.exceptions.DuplicatedStudyError:
        found = find_study(storage, name, workload, target, sampler, space)
        assert found is not None  # studies are never deleted here
        return found
    attrs: dict[str, Any] = {
        "workload": workload.key,
        "workload_name": workload.name,
        "shape": dict(workload.shape),
        "flop_count": workload.flop_count,
        "space": space,
    }
    if workload.definition.module:
        attrs["workload_module"] = workload.definition.module
    script = script_of(workload.definition)
    if script is not None:  # another process registers it from this text
        attrs["workload_script"] = script
    if vendor is not None:
        library, seconds = vendor
        attrs |= {
            "vendor_library": library,
            "vendor_seconds": seconds,
            "vendor_gflops": workload.flop_count / seconds / 1e9,
        }
    # "target" last: a worker that finds the study waits for it (`find_study`), so it then
    # sees every attr.
    attrs["target"] = target_key(target)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def _rdb_storage(url: str, options: dict[str, Any]) -> optuna.storages.RDBStorage:
    """``RDBStorage(url, **options)``, tried again when another process was creating the same
    new database's tables at the same moment (the loser of that race sees a table or a schema
    version row that was not there when it looked); the last failure is raised."""
    import sqlalchemy.exc

    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, **options)
        except sqlalchemy.exc.DatabaseError as err:
            racing = isinstance(err, sqlalchemy.exc.IntegrityError) or "already exists" in str(err)
            if not racing or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


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
