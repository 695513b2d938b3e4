"""Writing a study's result rows, shared by the scripts in this folder."""

from __future__ import annotations

import csv
import os


def write_csv(path: str, rows: list[dict]) -> None:
    """Write `rows` (dicts with the same keys) to `path`, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
