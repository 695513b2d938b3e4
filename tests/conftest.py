"""Shared fixtures: small, real studies on throwaway SQLite files."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
import pytest

from tensortune import MeasureSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: The CLI's default storage, had it been opened in the repository's root.
REPO_DB = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "tensortune.db"))


@pytest.fixture
def storage_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


@pytest.fixture(scope="module")
def source_url(tmp_path_factory) -> str:
    """A prior study, named "prior", of matmul 192x96x160 (no config of it is a config of
    matmul 128's space): 24 random configs, really measured."""
    import tensortune

    url = f"sqlite:///{tmp_path_factory.mktemp('sources') / 'prior.db'}"
    tensortune.tune(
        "matmul",
        shape=dict(M=192, N=96, K=160),
        n_trials=24,
        storage=url,
        study_name="prior",
        sampler="random",
        seed=0,
        settings=MeasureSettings(repeat=2, min_repeat_ms=2),
        show_progress=False,
    )
    return url


@pytest.fixture
def fast_settings() -> MeasureSettings:
    """Short timings: these tests check behaviour, not speed."""
    return MeasureSettings(repeat=2, min_repeat_ms=2, run_timeout=10.0, build_timeout=60.0)


@pytest.fixture
def retimed_medians() -> Callable[..., dict[str, float]]:
    """`held_out_medians`, for tests that judge proposals on a timing of their own."""
    return held_out_medians


def held_out_medians(
    template: Any, groups: dict[str, list[dict]], settings: MeasureSettings | None = None
) -> dict[str, float]:
    """Median GFLOP/s of each group of `template` configs, timed again in one process on the
    llvm target: the groups' configs interleaved, timed twice in opposite orders, the faster
    reading kept per config (0 for a failed one). A change of load during the timing then
    touches every group alike. `settings` default: 3 repeats of at least 5 ms."""
    from tensortune.measure import Measurer
    from tensortune.target import target_spec

    longest = max((len(configs) for configs in groups.values()), default=0)
    slots = [(name, i) for i in range(longest) for name in groups if i < len(groups[name])]
    configs = [groups[name][i] for name, i in slots]
    settings = settings or MeasureSettings(repeat=3, min_repeat_ms=5)
    with Measurer(template, target_spec("llvm"), settings) as measurer:
        first = measurer.measure(configs)
        second = measurer.measure(configs[::-1])[::-1]
    flops = template.workload.flop_count
    found: dict[str, list[float]] = {name: [] for name in groups}
    for (name, _), readings in zip(slots, zip(first, second, strict=True), strict=True):
        found[name].append(max(flops / r.cost / 1e9 if r.error is None else 0.0 for r in readings))
    return {name: float(np.median(values)) for name, values in found.items()}


def _file_state(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of `path`, or None where it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path, monkeypatch):
    # The CLI's default storage is a file in the working folder: keep it out of the repo. A user
    # may have made one there on purpose (the README's first command does), so the check is that
    # this test did not create, replace or write it, not that none exists.
    before = _file_state(REPO_DB)
    monkeypatch.chdir(tmp_path)
    yield
    assert _file_state(REPO_DB) == before, f"the test created or changed {REPO_DB}"
