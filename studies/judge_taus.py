"""Judges' taus: how well a model trained on one source alone ranks a target's own configs, by
Kendall's tau (what the ``"evidence"`` weighting reads) and by a tau that weighs pairs near the
top more (`tensortune.cost_model.top_weighted_tau`), after 8, 16, 32 and 64 of the target's
configs.

A weighting that tells sources apart gives another shape of the same operator a high tau and an
unrelated operator a low one. This fits no study: it reads the target studies of one mode
(``--mode``, default ``warm``: the configs the weighting judged its sources on; ``cold``:
configs no source chose) that ``transfer.py`` left in ``--work`` and the source studies in
``--sources``, fits a one-member judge per source workload and seed (seeded as the sampler
seeds it, by the study's seed), and writes under ``--out``:

- ``judge_taus.csv``: a row per pair, seed, source and n: both taus and the weight the
  evidence's rule would give on each (the half-life's decay times ``clip(tau / FULL_TAU, 0,
  1)``);
- ``judge_taus.md``: per pair, source and n, the median over seeds of each, with every seed.

    python studies/judge_taus.py --pairs loo-c2 c12-to-c7 depthwise-to-matmul \\
        --cost-model treegru --work W/transfer.db --sources W/sources.db --out DIR
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import optuna
from common import SOURCE_SEEDS, SOURCE_TRIALS, TRANSFER_PAIRS, study_name, transfer_study_name
from results_io import write_csv

from tensortune.cost_model import COST_MODELS, LOSSES, make_cost_model, top_weighted_tau
from tensortune.errors import TensortuneError
from tensortune.sampler.settings import RoundSettings
from tensortune.sampler.source_weighting import fit_judges, judge_taus, source_weights
from tensortune.sampler.transfer import load_sources
from tensortune.storage import open_storage

#: The target's configs the judges rank. A cold study's first 8 are the points of the start-up
#: design that a warm study of the seed measures among its first 16 (every other trial): the
#: configs it has that no source chose.
CHECKPOINTS = (8, 16, 32, 64)


def stored(name: str, url: str) -> optuna.Study:
    """The study `name` at `url`.

    Raises:
        TensortuneError: If there is none (``transfer.py`` has not run it there).
    """
    try:
        return optuna.load_study(study_name=name, storage=url)
    except KeyError:
        raise TensortuneError(
            f"no study {name!r} in {url}: run transfer.py with the same pair, seeds, "
            "trials, mode and cost model first"
        ) from None


def pair_rows(
    pair: str, seeds: list[int], cost_model: str, work: str, sources: str, trials: int, mode: str
) -> list[dict]:
    """The CSV rows of one pair (see the module docstring)."""
    target, source_labels, _ = TRANSFER_PAIRS[pair]
    feature_set = COST_MODELS[cost_model]
    half_life = RoundSettings.source_half_life  # the default
    source_studies = [
        stored(study_name(label, "costmodel", s, SOURCE_TRIALS), sources)
        for label in source_labels
        for s in SOURCE_SEEDS
    ]
    prior = load_sources(source_studies, feature_set)
    rows = []
    for seed in seeds:
        name = transfer_study_name(pair, target, mode, seed, trials, cost_model)
        own = load_sources([stored(name, work)], feature_set)
        judges = fit_judges(prior, lambda: make_cost_model(cost_model, LOSSES[0], 1, seed))  # noqa: B023
        for n in CHECKPOINTS:
            X, y = own.features[:n], own.targets[:n]
            plain = judge_taus(judges, X, y)
            top = np.array([
                np.nan if judge is None else top_weighted_tau(judge.predict(X)[0], y)
                for judge in judges
            ])  # fmt: skip
            by_plain = source_weights(plain, n, half_life, "evidence")
            by_top = source_weights(top, n, half_life, "evidence")
            for i, workload in enumerate(prior.workloads):
                rows.append({
                    "pair": pair, "mode": mode, "cost_model": cost_model, "seed": seed,
                    "source": workload,
                    "n": n, "tau": round(float(plain[i]), 4), "top_tau": round(float(top[i]), 4),
                    "evidence_weight": round(float(by_plain[i]), 4),
                    "top_weight": round(float(by_top[i]), 4),
                })  # fmt: skip
            print(pair, seed, n, np.round(plain, 3), np.round(top, 3), flush=True)
    return rows


def summary(rows: list[dict]) -> str:
    """The markdown table of ``judge_taus.md``."""
    lines = [
        "Median over seeds (every seed in brackets) of each source judge's Kendall tau and",
        "top-weighted tau on the target's first n configs, and the weight each would give.",
        "",
        "| pair | source | n | tau | top tau | evidence weight | top weight |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["pair"], r["source"], r["n"]) for r in rows)
    for pair, source, n in keys:
        mine = [r for r in rows if (r["pair"], r["source"], r["n"]) == (pair, source, n)]
        cells = []
        for column in ("tau", "top_tau", "evidence_weight", "top_weight"):
            each = [r[column] for r in mine]
            seeds = ", ".join(f"{v:.2f}" for v in each)
            cells.append(f"{statistics.median(each):.2f} ({seeds})")
        lines.append(f"| {pair} | {source} | {n} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", nargs="+", required=True, choices=list(TRANSFER_PAIRS))
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="default 0 1 2 3 4"
    )
    parser.add_argument(
        "--trials", type=int, default=128, help="the target studies' length (default 128)"
    )
    parser.add_argument(
        "--cost-model",
        default="treegru",
        choices=list(COST_MODELS),
        help="the target studies' and the judges' cost model (default treegru)",
    )
    parser.add_argument(
        "--mode",
        default="warm",
        help="the transfer.py mode whose target studies' configs are ranked (default warm: "
        "the configs the weighting judged; cold: configs no source chose)",
    )
    parser.add_argument("--work", required=True, help="transfer.py's --work SQLite file")
    parser.add_argument("--sources", required=True, help="transfer.py's --sources SQLite file")
    parser.add_argument("--out", required=True, help="folder for judge_taus.csv and .md")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        urls = []
        for path in (args.work, args.sources):
            url = f"sqlite:///{path}"
            open_storage(url, must_exist=True)
            urls.append(url)
        rows = [
            row
            for pair in args.pairs
            for row in pair_rows(pair, args.seeds, args.cost_model, *urls, args.trials, args.mode)
        ]
    except TensortuneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_csv(f"{args.out}/judge_taus.csv", rows)
    with open(f"{args.out}/judge_taus.md", "w") as f:
        f.write(summary(rows))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
