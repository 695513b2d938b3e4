"""Where the depthwise studies of the transfer runs looked: the share of their trials whose
innermost x tile is 14 or 28 (the whole 28-wide row, or half), and each kind's best of either.

Run as ``python inner_tile_probe.py sqlite:///<work>/transfer.db`` (the work file of
``studies/transfer.py``); prints one line per mode, over seeds 0-9 of the 128-trial studies.
"""

import sys

import numpy as np
import optuna

MODES = (
    "mobilenet-dw/cold",
    "conv2d-to-depthwise/warm",
    "conv2d-to-depthwise/warm-validated",
    "conv2d-to-depthwise/warm-design",
)
SPANS = ((0, 16), (16, 64), (64, 128))


def main(url: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for mode in MODES:
        shares: list[list[float]] = [[] for _ in SPANS]
        wide_best, narrow_best = [], []
        for seed in range(10):
            study = optuna.load_study(study_name=f"{mode}/s{seed}/n128", storage=url)
            trials = sorted(study.trials, key=lambda t: t.number)
            inner = np.array([int(t.params["tile_x"].split("x")[-1]) for t in trials])
            values = np.array([t.value or 0.0 for t in trials])
            for i, (a, b) in enumerate(SPANS):
                shares[i].append(float(np.mean(inner[a:b] >= 14)))
            wide = inner >= 14
            wide_best.append(values[wide].max() if wide.any() else 0.0)
            narrow_best.append(values[~wide].max())
        spans = " ".join(
            f"{a}-{b} {np.mean(s):.2f}" for (a, b), s in zip(SPANS, shares, strict=True)
        )
        print(
            f"{mode:36s} inner x >= 14: {spans}; best, as tuned: wide "
            f"{np.median(wide_best):.0f}, narrow {np.median(narrow_best):.0f}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
