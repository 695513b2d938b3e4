"""Shared fixtures: small, real studies on throwaway SQLite files."""

from __future__ import annotations

import os

import optuna
import pytest

from tensortune import MeasureSettings

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def storage_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'studies.db'}"


@pytest.fixture
def fast_settings() -> MeasureSettings:
    """Short timings: these tests check behaviour, not speed."""
    return MeasureSettings(repeat=2, min_repeat_ms=2, run_timeout=10.0, build_timeout=60.0)


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path, monkeypatch):
    # The CLI's default storage is a file in the working folder: keep it out of the repo.
    monkeypatch.chdir(tmp_path)
    yield
    assert not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "tensortune.db"))
