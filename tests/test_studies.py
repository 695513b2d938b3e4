"""The benchmark scripts in studies/ run end to end in their --quick mode (slow: each tunes or
trains for real), and their reports read back what they wrote."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

STUDIES = os.path.join(os.path.dirname(__file__), "..", "studies")


def run_quick(script: str, out) -> list[dict]:
    """Run ``studies/<script> --quick`` writing into `out`; the rows of its main CSV."""
    done = subprocess.run(
        [sys.executable, os.path.join(STUDIES, script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out / script.replace(".py", ".csv")) as f:
        return list(csv.DictReader(f))


def first_to(curve: list[dict], level: float) -> str:
    """The first trial (as the CSV writes it) whose best so far reaches `level`, or ''."""
    return next((c["trial"] for c in curve if float(c["best_gflops"]) >= level), "")


@pytest.mark.slow
def test_template_ceiling_quick(tmp_path):
    rows = run_quick("template_ceiling.py", tmp_path)
    assert [r["workload"] for r in rows] == ["matmul-64", "conv2d-small"]
    assert all(float(r["best_gflops"]) > 0 for r in rows)
    assert rows[0]["vendor_library"].startswith(("torch-", "numpy-"))
    with open(tmp_path / "template_ceiling_curves.csv") as f:
        curves = list(csv.DictReader(f))
    curve = [r for r in curves if r["workload"] == "matmul-64"]
    assert len(curves) == 16 and len(curve) == 8
    bests = [float(r["best_gflops"]) for r in curve]
    assert bests == sorted(bests) and round(bests[-1], 1) == float(rows[0]["best_gflops"])


@pytest.mark.slow
def test_hand_configs_quick(tmp_path):
    (row,) = run_quick("hand_configs.py", tmp_path)
    assert row["workload"] == "matmul-64" and float(row["gflops"]) > 0
    assert float(row["ratio_to_vendor"]) > 0


@pytest.mark.slow
def test_sample_efficiency_quick(tmp_path):
    work = tmp_path / "work"
    command = [sys.executable, os.path.join(STUDIES, "sample_efficiency.py"), "--quick"]
    command += ["--out", str(tmp_path), "--work", str(work)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(tmp_path / "sample_efficiency.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["tuner"] for r in rows] == ["costmodel", "tpe", "metaschedule"]
    for row in rows:
        # MetaSchedule's winner, too, was re-timed and checked against NumPy by our measurer.
        assert float(row["best@32"]) > 0 and float(row["remeasured"]) > 0, row
        assert float(row["vendor_gflops"]) > 0 and float(row["wall_s"]) > 0
    with open(tmp_path / "sample_efficiency_curves.csv") as f:
        curves = list(csv.DictReader(f))
    assert len(curves) == 3 * 32
    # Trials to 90 % of the best any tuner found, recomputed from each tuner's curve.
    by_tuner = {r["tuner"]: [c for c in curves if c["tuner"] == r["tuner"]] for r in rows}
    top = max(float(curve[-1]["best_gflops"]) for curve in by_tuner.values())
    for row in rows:
        assert row["trials_to_90%"] == first_to(by_tuner[row["tuner"]], 0.9 * top), row
    for name in ("summary.md", "trials.png", "seconds.png"):
        assert (tmp_path / f"sample_efficiency_{name}").stat().st_size > 0
    table = (tmp_path / "sample_efficiency_summary.md").read_text()
    assert table.count("| matmul-128 |") == 3
    # A second run finds every study finished in --work and measures nothing.
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "GFLOP/s," not in again.stdout
    with open(tmp_path / "sample_efficiency.csv") as f:
        assert list(csv.DictReader(f)) == rows


def test_efficiency_summary_table():
    sys.path.insert(0, STUDIES)
    try:
        import efficiency_report
    finally:
        sys.path.remove(STUDIES)

    def row(tuner, seed, best64, best128, reached, vendor=100.0):
        return {
            "workload": "w", "tuner": tuner, "seed": seed, "trials": 128,
            "vendor_library": "blas", "vendor_gflops": vendor, "best@64": best64,
            "best@128": best128, "trials_to_90%": reached, "remeasured": best128 * 0.9,
            "wall_s": 10.0 * (seed + 1),
        }  # fmt: skip

    rows = [row("tpe", s, 50.0 + 10 * s, 80.0, 40 + s) for s in range(3)]
    rows += [row("costmodel", 0, 120.0, 150.0, 9), row("costmodel", 1, 90.0, 90.0, "")]
    rows += [row("costmodel", 2, 60.0, 60.0, "", vendor=50.0)]
    rows[4]["remeasured"] = ""  # not re-timed (an interrupted run): left out of the median
    lines = efficiency_report.summary_table(rows).splitlines()
    assert lines[0].split(" | ")[3:6] == ["seeds", "×vendor @64", "×vendor @128"]
    # The learned sampler comes first; medians over seeds against the median vendor (100).
    costmodel = ["costmodel", "3", "0.90", "0.90", ">128 (9/>128/>128)", "0.94", "20 |"]
    assert lines[2].split(" | ")[2:] == costmodel
    tpe = ["tpe", "3", "0.60", "0.80", "41 (40/41/42)", "0.72", "20 |"]
    assert lines[3].split(" | ")[2:] == tpe


@pytest.mark.slow
def test_sampler_overhead_quick(tmp_path):
    (row,) = run_quick("sampler_overhead.py", tmp_path)
    assert int(row["history_trials"]) == 100 and int(row["batch"]) == 16
    assert float(row["measure_s"]) > 0 and float(row["propose_warm_s"]) > 0
    assert float(row["warm_fit_s"]) > 0


@pytest.mark.slow
def test_features_quick(tmp_path):
    rows = run_quick("features.py", tmp_path)
    assert {r["features"] for r in rows} == {"curve", "itervar", "per-store", "knob"}
    within = [r for r in rows if r["task"].startswith("within")]
    assert len(within) == 9 and all(float(r["configs_per_s"]) > 0 for r in within)


@pytest.mark.slow
def test_cost_models_quick(tmp_path):
    rows = run_quick("cost_models.py", tmp_path)
    assert {r["model"] for r in rows} == {"xgb-curve", "xgb-itervar", "xgb-per-store", "treegru"}
    assert len(rows) == 4 * 7  # three datasets within, four transfers, per model
    for row in rows:
        assert -1 <= float(row["tau"]) <= 1 and float(row["train_ms_per_1000"]) > 0


@pytest.mark.slow
def test_record_configs_writes_measured_configs(tmp_path):
    out = tmp_path / "tiny.json"
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(STUDIES, "record_configs.py"),
            "matmul",
            "16,16,16",
            "-n",
            "6",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["key"] == "matmul(M=16,N=16,K=16)" and len(data["records"]) == 6
    assert all(r["gflops"] is None or r["gflops"] > 0 for r in data["records"])


@pytest.mark.slow
def test_transfer_quick(tmp_path):
    rows = run_quick("transfer.py", tmp_path)
    assert [r["mode"] for r in rows] == ["cold", "warm", "warm-model", "enqueue"]
    assert rows[3]["enqueued"] == "8"  # 8 source configs were moved into the space
    for row in rows:
        assert float(row["best@16"]) > 0 and float(row["wall_s"]) > 0
    with open(tmp_path / "transfer_curves.csv") as f:
        curves = list(csv.DictReader(f))
    assert len(curves) == 4 * 16
    # Each mode's trials to 90 % of the cold study's best, recomputed from its curve.
    by_mode = {r["mode"]: [c for c in curves if c["mode"] == r["mode"]] for r in rows}
    cold_best = float(by_mode["cold"][-1]["best_gflops"])
    for row in rows:
        assert row["trials_to_90pct_cold"] == first_to(by_mode[row["mode"]], 0.9 * cold_best)
    table = (tmp_path / "transfer_summary.md").read_text()
    assert table.count("| matmul-shape |") == 4
    assert (tmp_path / "transfer.png").stat().st_size > 0


def test_transfer_summary_per_cost_model(tmp_path):
    """With several cost models each mode is compared with its own model's cold study."""
    sys.path.insert(0, STUDIES)
    try:
        import transfer
        from results_io import write_csv
    finally:
        sys.path.remove(STUDIES)

    rows, curves = [], []
    reached = {("xgb", "cold"): 40, ("xgb", "warm"): 10, ("treegru", "cold"): 20}
    reached[("treegru", "warm")] = ""  # never reached: counts as 65
    for (model, mode), trials in reached.items():
        for seed in (0, 1):
            rows.append({
                "pair": "p", "target": "t", "mode": mode, "seed": seed, "best@16": 1.0,
                "best@32": 2.0, "best@64": 3.0 + seed, "trials_to_90pct_cold": trials,
                "enqueued": "", "vendor_gflops": "", "wall_s": 1.0, "cost_model": model,
            })  # fmt: skip
            curves += [
                {"pair": "p", "mode": mode, "seed": seed, "trial": i, "best_gflops": i,
                 "cost_model": model}
                for i in range(1, 65)
            ]  # fmt: skip
    write_csv(str(tmp_path / "transfer.csv"), rows)
    write_csv(str(tmp_path / "transfer_curves.csv"), curves)
    transfer.report(str(tmp_path))
    lines = (tmp_path / "transfer_summary.md").read_text().splitlines()
    assert lines[0].startswith("| pair | cost model | mode |")
    cells = [line.split(" | ")[1:] for line in lines[2:6]]
    assert cells[0] == ["xgb", "cold", "1", "2", "4", "40", "1.00 |"]
    assert cells[1] == ["xgb", "warm", "1", "2", "4", "10", "4.00 |"]
    assert cells[2] == ["treegru", "cold", "1", "2", "4", "20", "1.00 |"]
    assert cells[3] == ["treegru", "warm", "1", "2", "4", ">64", "0.31 |"]


def test_gpu_study_stops_at_once_without_a_gpu(tmp_path):
    """The one-command GPU study refuses a GPU-less machine before tuning or writing."""
    storage = f"sqlite:///{tmp_path / 'gpu.db'}"
    args = ["--arch", "sm_90", "--trials", "2", "--storage", storage, "--out", str(tmp_path / "o")]
    done = subprocess.run(
        [sys.executable, os.path.join(STUDIES, "gpu_study.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("gpu_study: no CUDA GPU")
    assert not (tmp_path / "gpu.db").exists() and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_common_retime_and_first_trial():
    """The studies' one re-timing (real builds, round-robin) and their one trials-to-a-level."""
    sys.path.insert(0, STUDIES)
    try:
        import common
    finally:
        sys.path.remove(STUDIES)
    import tensortune
    from tensortune.target import target_spec

    template = tensortune.CpuTemplate(common.workload_of("matmul-64"))
    first = {knob.name: knob.choices[0] for knob in template.knobs}
    bad = {**first, "unroll": 7}  # outside the space: never runs, so left out
    kernels = {"a": (template, first), "b": (template, bad)}
    settings = tensortune.MeasureSettings(repeat=2, min_repeat_ms=1)
    seconds = common.retime(kernels, target_spec("llvm"), settings, rounds=2)
    assert set(seconds) == {"a"} and seconds["a"] > 0
    assert common.first_trial([None, 1.0, 3.0, 2.0], 3.0) == 3
    assert common.first_trial([None, 1.0, 3.0, 4.0], 3.0, above=True) == 4
    assert common.first_trial([1.0, None], 5.0) == ""
    assert common.case("resnet18-c7") == ("conv2d-c7", *common.WORKLOADS["resnet18-c7"])
