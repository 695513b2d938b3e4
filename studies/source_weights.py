"""Source weights: how much each warm study's sources weighed, round by round, and when the
study stopped listening to them.

A warm-started `tensortune.CostModelSampler` records, in every trial's ``tensortune:proposal``
attr, the weight of each source workload's rows next to a row of the study's own (1 = a
source row counts as much as a local one, 0 = the source is dropped) in the model round that
proposed the trial. This reads those records from every study of ``--storage`` that has them
(a ``transfer.py --work`` file, say), groups the studies by name without their seed (``loo-c2
/warm/s3/n128`` → ``loo-c2/warm/n128``) and writes under ``--out``:

- ``source_weights.csv``: a row per study, model round and source: the round's first trial
  and the source's weight in it;
- ``source_weights.md``: per group, the largest source weight in effect when trial 16, 32, 64
  and 128 was proposed (median over seeds, with every seed; "·" for a seed without that
  trial) and the trial from which every source weighed 0 in each seed ("-" for a seed that
  never dropped them all).

    python studies/source_weights.py --storage sqlite:///studies/work/transfer.db \\
        --out studies/results/transfer-weights
"""

from __future__ import annotations

import argparse
import os
import re
import statistics

import optuna
from results_io import write_csv
from transfer_report import CHECKPOINTS

from tensortune.errors import TensortuneError
from tensortune.storage import open_storage
from tensortune.trial_records import PROPOSAL_ATTR

#: A study name's seed part, as `transfer.py` and `sample_efficiency.py` name their studies.
SEED = re.compile(r"/s(\d+)(?=/|$)")


def seed_of(name: str) -> int:
    """The seed in study name `name` (-1 for a name without one)."""
    found = SEED.search(name)
    return int(found.group(1)) if found else -1


def trial_weights(study: optuna.Study) -> list[dict[str, float] | None]:
    """Per trial number (from 0), the source weights of the round that proposed it; None for
    a trial proposed without them (another sampler, or a trial of no record)."""
    trials = study.get_trials(deepcopy=False)
    found: list[dict[str, float] | None] = [None] * len(trials)
    for trial in trials:
        weights = (trial.system_attrs.get(PROPOSAL_ATTR) or {}).get("source_weights")
        if weights:
            found[trial.number] = {key: float(w) for key, w in weights.items()}
    return found


def round_rows(study: optuna.Study) -> list[dict]:
    """The CSV rows of one study: per model round (in trial order) and source, the round's
    first trial and the source's weight; empty for a study without source weights."""
    name = study.study_name
    rows, seen = [], set()
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        proposal = trial.system_attrs.get(PROPOSAL_ATTR) or {}
        weights, number = proposal.get("source_weights"), proposal.get("round")
        if not weights or number in seen:
            continue
        seen.add(number)
        for source, weight in weights.items():
            rows.append({
                "study": name,
                "group": SEED.sub("", name),
                "seed": seed_of(name),
                "round": number,
                "first_trial": trial.number,
                "source": source,
                "weight": round(float(weight), 4),
            })  # fmt: skip
    return rows


def largest_at(weights: list[dict[str, float] | None], n: int) -> float | None:
    """The largest source weight of the round that proposed trial `n` (1-based, as the
    checkpoints count), or None when the study has no such trial or no record of it."""
    found = weights[n - 1] if n <= len(weights) else None
    return max(found.values()) if found is not None else None


def dropped_from(weights: list[dict[str, float] | None]) -> int | None:
    """The first trial (1-based) from which every recorded round gave every source weight 0,
    or None if the last recorded round still weighed one."""
    first = None
    for number, found in enumerate(weights, 1):
        if found is None:
            continue
        if max(found.values()) > 0:
            first = None
        elif first is None:
            first = number
    return first


def summary(studies: list[optuna.Study]) -> str:
    """The markdown table of `source_weights.md` for `studies` (those with source weights)."""
    groups: dict[str, list[optuna.Study]] = {}
    for study in studies:
        groups.setdefault(SEED.sub("", study.study_name), []).append(study)
    head = " | ".join(f"@{n}" for n in CHECKPOINTS)
    lines = [
        "Largest source weight in the round that proposed trial n (a source row's weight next",
        "to a row of the study's own): median over seeds, then each seed in seed order. Last",
        "column: per seed, the trial from which every source weighed 0 ('-': never).",
        "",
        f"| studies | seeds | {head} | all sources at 0 from trial |",
        "|---|---|" + "---|" * len(CHECKPOINTS) + "---|",
    ]
    for group, members in sorted(groups.items()):
        members.sort(key=lambda s: seed_of(s.study_name))
        weights = [trial_weights(s) for s in members]
        cells = []
        for n in CHECKPOINTS:
            found_at = [largest_at(found, n) for found in weights]
            values = [w for w in found_at if w is not None]
            if not values:
                cells.append("")
                continue
            # A seed without trial n keeps its place, so that each figure stays by its seed.
            each = ", ".join("·" if w is None else f"{w:.2f}" for w in found_at)
            cells.append(f"{statistics.median(values):.2f} ({each})")
        drops = ", ".join(str(dropped_from(found) or "-") for found in weights)
        lines.append(f"| {group} | {len(members)} | {' | '.join(cells)} | {drops} |")
    return "\n".join(lines) + "\n"


def load_warm_studies(url: str) -> list[optuna.Study]:
    """The studies at storage `url` (which must exist) named with a seed part (``/s<N>``, as
    the benchmarks name theirs) whose trials record source weights, by name."""
    storage = open_storage(url, must_exist=True)
    found = []
    for summary_ in sorted(optuna.get_all_study_summaries(storage), key=lambda s: s.study_name):
        if not SEED.search(summary_.study_name):
            continue
        study = optuna.load_study(study_name=summary_.study_name, storage=storage)
        if any(w is not None for w in trial_weights(study)):
            found.append(study)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--storage", required=True, help="Optuna storage URL of the studies")
    parser.add_argument("--out", required=True, help="folder for the CSV and the summary")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        studies = load_warm_studies(args.storage)
    except TensortuneError as err:  # a storage that is not there: one line, nothing written
        parser.error(str(err))
    if not studies:
        parser.error(f"no study in {args.storage} records source weights")
    write_csv(
        os.path.join(args.out, "source_weights.csv"), [r for s in studies for r in round_rows(s)]
    )
    text = summary(studies)
    with open(os.path.join(args.out, "source_weights.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
