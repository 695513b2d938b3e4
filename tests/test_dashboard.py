"""optuna-dashboard on a real study: `tensortune dashboard` serves it, its API carries the note,
the progress plot and the trials' attrs, and headless Chromium renders them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import optuna
import pytest

from tensortune.cli import main
from tensortune.dashboard import KERNEL_CODE, KERNEL_TIR, PROGRESS_PLOT_ID

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "studies"))
try:
    # The study that takes studies/results/dashboard_screenshot.png; the test takes its own.
    import dashboard_screenshot as shots
finally:
    sys.path.pop(0)

#: Trials of each of the two runs (created, then resumed) of the served study.
TRIALS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A finished study of two runs of `TRIALS`, served by `tensortune dashboard` on a free
    port."""
    storage_url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'studies.db'}"
    shots.tune_small_study(storage_url, TRIALS)
    with shots.serve(storage_url) as (base, port):
        yield base, storage_url, port


@pytest.mark.slow
def test_api_has_note_plot_and_trial_attrs(served):
    base, storage_url, _ = served
    with urllib.request.urlopen(f"{base}/api/studies/1", timeout=10) as response:
        study = json.load(response)
    note = study["note"]["body"]
    (summary,) = optuna.get_all_study_summaries(storage_url)
    library = summary.user_attrs["vendor_library"]  # e.g. numpy-2.4.6/scipy-openblas
    assert library.split("-")[0] in ("numpy", "torch"), library
    for words in ("matmul(M=32,N=32,K=32)", library, "CostModelSampler", "seed=0"):
        assert words in note, note
    (plot,) = [g for g in study["plotly_graph_objects"] if g["id"] == PROGRESS_PLOT_ID]
    figure = json.loads(plot["graph_object"])
    trial_trace, best_trace = figure["data"][:2]
    n_complete = sum(t["state"] == "Complete" for t in study["trials"])
    # Updated after the resumed run too: it has more points than the first run had trials.
    assert len(best_trace["y"]) == n_complete > TRIALS
    assert best_trace["y"] == sorted(best_trace["y"])
    assert max(best_trace["y"]) == pytest.approx(max(trial_trace["y"]))
    complete = [t for t in study["trials"] if t["state"] == "Complete"]
    keys = {a["key"] for a in complete[0]["user_attrs"]}
    assert {"gflops", "vendor_ratio", "compile_s"} <= keys


@pytest.mark.slow
def test_best_kernel_code_is_an_artifact_of_the_best_trial(served):
    base, _, _ = served
    with urllib.request.urlopen(f"{base}/api/studies/1", timeout=10) as response:
        study = json.load(response)
    complete = [t for t in study["trials"] if t["state"] == "Complete"]
    best = max(complete, key=lambda t: t["values"][0])
    names = {a["filename"]: a for a in best["artifacts"]}
    assert set(names) == {KERNEL_TIR, KERNEL_CODE}, names
    url = f"{base}/artifacts/1/{best['trial_id']}/{names[KERNEL_TIR]['artifact_id']}"
    with urllib.request.urlopen(url, timeout=10) as response:
        tir = response.read().decode()
    assert "T.prim_func" in tir and "for " in tir, tir[:500]
    url = f"{base}/artifacts/1/{best['trial_id']}/{names[KERNEL_CODE]['artifact_id']}"
    with urllib.request.urlopen(url, timeout=10) as response:
        code = response.read().decode()
    assert "__tvm_ffi_main:" in code and "\tret" in code, code[:500]  # assembly of the kernel


@pytest.mark.slow
def test_chromium_renders_trials_attrs_and_plot(served, tmp_path):
    chromium = shots.find_chromium()
    assert chromium, "headless Chromium is missing: run `bash tests/system_deps.sh`"
    base, _, _ = served

    def dom(path: str) -> str:
        done = subprocess.run(
            [chromium, *shots.CHROMIUM_FLAGS, "--dump-dom", f"{base}{path}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    page = dom("/dashboard/studies/1")
    assert "mm" in page and PROGRESS_PLOT_ID in page and "best so far" in page
    assert "main-svg" in page  # plotly drew its figures
    assert "CostModelSampler" in dom("/dashboard/studies/1/note")
    trials = dom("/dashboard/studies/1/trials")
    for key in ("gflops", "vendor_ratio", "compile_s"):
        assert key in trials
    # A fresh picture in a folder of this test's own: nothing committed can stand in for it.
    path = tmp_path / "shot.png"
    shots.screenshot(chromium, f"{base}/dashboard/studies/1", str(path))
    assert shots.png_size(str(path)) == shots.WINDOW and path.stat().st_size > 10_000


def test_screenshot_check_refuses_a_missing_or_stale_picture(tmp_path):
    """The check fails when Chromium writes nothing, and refuses a picture already there."""
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")  # exits fine, draws nothing
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="wrote no screenshot"):
        shots.screenshot(str(fake), "http://127.0.0.1:1/", str(tmp_path / "none.png"))
    stale = tmp_path / "stale.png"
    stale.write_bytes(b"")
    with pytest.raises(RuntimeError, match="exists already"):
        shots.screenshot(str(fake), "http://127.0.0.1:1/", str(stale))
    with pytest.raises(ValueError, match="not a PNG"):
        shots.png_size(str(stale))


@pytest.mark.slow
def test_dashboard_refuses_a_taken_port_and_a_missing_storage(served, tmp_path, capsys):
    _, storage_url, port = served
    assert main(["dashboard", "--storage", storage_url, "--port", str(port)]) == 2
    assert "cannot serve on 127.0.0.1" in capsys.readouterr().err
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["dashboard", "--storage", missing, "--port", str(shots.free_port())]) == 2
    assert "does not exist" in capsys.readouterr().err
