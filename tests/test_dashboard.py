"""optuna-dashboard on a real study: `tensortune dashboard` serves it, its API carries the note,
the progress plot and the trials' attrs, and headless Chromium renders them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import tensortune
from tensortune.cli import main
from tensortune.dashboard import KERNEL_CODE, KERNEL_TIR, PROGRESS_PLOT_ID

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--virtual-time-budget=15000",
]
SCREENSHOT = os.path.join(
    os.path.dirname(__file__), "..", "studies", "results", "dashboard_screenshot.png"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A finished 16-trial study, served by `tensortune dashboard` on a free port."""
    storage_url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'studies.db'}"
    fast_settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=2)
    for _ in range(2):  # created, then resumed: the plot must follow
        tensortune.tune(
            "matmul",
            shape=dict(M=32, N=32, K=32),
            n_trials=8,
            storage=storage_url,
            study_name="mm",
            seed=0,
            settings=fast_settings,
            show_progress=False,
        )
    port = _free_port()
    command = [sys.executable, "-m", "tensortune.cli", "dashboard", "--storage", storage_url]
    server = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/api/studies", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        yield base, storage_url, port
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_api_has_note_plot_and_trial_attrs(served):
    base, _, _ = served
    with urllib.request.urlopen(f"{base}/api/studies/1", timeout=10) as response:
        study = json.load(response)
    note = study["note"]["body"]
    for words in ("matmul(M=32,N=32,K=32)", "numpy/", "CostModelSampler", "seed=0"):
        assert words in note, note
    (plot,) = [g for g in study["plotly_graph_objects"] if g["id"] == PROGRESS_PLOT_ID]
    figure = json.loads(plot["graph_object"])
    trial_trace, best_trace = figure["data"][:2]
    n_complete = sum(t["state"] == "Complete" for t in study["trials"])
    assert len(best_trace["y"]) == n_complete >= 8  # updated after the resumed batches too
    assert best_trace["y"] == sorted(best_trace["y"])
    assert max(best_trace["y"]) == pytest.approx(max(trial_trace["y"]))
    complete = [t for t in study["trials"] if t["state"] == "Complete"]
    keys = {a["key"] for a in complete[0]["user_attrs"]}
    assert {"gflops", "vendor_ratio", "compile_s"} <= keys


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


def test_chromium_renders_trials_attrs_and_plot(served):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is missing: run `bash tests/system_deps.sh`"
    base, _, _ = served

    def dom(path: str) -> str:
        done = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, "--dump-dom", f"{base}{path}"],
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
    shot = ["--window-size=1400,2400", f"--screenshot={SCREENSHOT}"]
    subprocess.run(
        [chromium, *CHROMIUM_FLAGS, *shot, f"{base}/dashboard/studies/1"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert os.path.getsize(SCREENSHOT) > 10_000


def test_dashboard_refuses_a_taken_port_and_a_missing_storage(served, tmp_path, capsys):
    _, storage_url, port = served
    assert main(["dashboard", "--storage", storage_url, "--port", str(port)]) == 2
    assert "cannot serve on 127.0.0.1" in capsys.readouterr().err
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["dashboard", "--storage", missing, "--port", str(_free_port())]) == 2
    assert "does not exist" in capsys.readouterr().err
