"""The benchmark scripts in studies/ run end to end in their --quick mode."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

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


def test_template_ceiling_quick(tmp_path):
    rows = run_quick("template_ceiling.py", tmp_path)
    assert [r["workload"] for r in rows] == ["matmul-64", "conv2d-small"]
    assert all(float(r["best_gflops"]) > 0 for r in rows)
    assert rows[0]["vendor_library"].startswith("numpy")
    with open(tmp_path / "template_ceiling_curves.csv") as f:
        curves = list(csv.DictReader(f))
    curve = [r for r in curves if r["workload"] == "matmul-64"]
    assert len(curves) == 16 and len(curve) == 8
    bests = [float(r["best_gflops"]) for r in curve]
    assert bests == sorted(bests) and round(bests[-1], 1) == float(rows[0]["best_gflops"])


def test_hand_configs_quick(tmp_path):
    (row,) = run_quick("hand_configs.py", tmp_path)
    assert row["workload"] == "matmul-64" and float(row["gflops"]) > 0
    assert float(row["ratio_to_vendor"]) > 0


def test_sampler_comparison_quick(tmp_path):
    rows = run_quick("sampler_comparison.py", tmp_path)
    assert [r["sampler"] for r in rows] == ["costmodel", "tpe", "random"]
    assert all(float(r["best@32"]) > 0 for r in rows)
    # Someone reached 90 % of the best found, at the latest on the last trial.
    assert any(r["trials_to_90%"] not in ("", None) for r in rows)
    assert (tmp_path / "sampler_comparison_curves.csv").exists()


def test_sampler_overhead_quick(tmp_path):
    (row,) = run_quick("sampler_overhead.py", tmp_path)
    assert int(row["history_trials"]) == 100 and int(row["batch"]) == 16
    assert float(row["measure_s"]) > 0 and float(row["propose_warm_s"]) > 0
    assert float(row["warm_fit_s"]) > 0


def test_features_quick(tmp_path):
    rows = run_quick("features.py", tmp_path)
    assert {r["features"] for r in rows} == {"curve", "itervar", "per-store"}
    within = [r for r in rows if r["task"].startswith("within")]
    assert len(within) == 9 and all(float(r["configs_per_s"]) > 0 for r in within)


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
