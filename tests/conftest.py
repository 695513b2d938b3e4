"""Shared fixtures: small, real studies on throwaway SQLite files."""

from __future__ import annotations

import os

import optuna
import pytest

from tensortune import MeasureSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: The CLI's default storage, had it been opened in the repository's root.
REPO_DB = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "tensortune.db"))


@pytest.fixture
def storage_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


@pytest.fixture
def fast_settings() -> MeasureSettings:
    """Short timings: these tests check behaviour, not speed."""
    return MeasureSettings(repeat=2, min_repeat_ms=2, run_timeout=10.0, build_timeout=60.0)


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
