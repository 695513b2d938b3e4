"""The benchmark scripts in studies/ run end to end in their --quick mode."""

from __future__ import annotations

import csv
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
