"""Configs that a model's tasks of one design space share.

Two tasks whose design spaces have the same knobs, in names and choices, can run each other's
configs as they are: ResNet-18's 3x3 convolutions with and without the shortcut add differ only
in what follows the convolution, and the scheduler may give one of each pair half the trials of
the other (``studies/README.md``). Before a task's batch, the best config of each such twin that
the task has not tried is handed to it as a trial of that batch: one trial a batch at most per
twin, and none once the task has run the twin's best. Plain functions; `tensortune.model.tuning`
enqueues what they pick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from tensortune.model.database import best_config
from tensortune.trial_records import trial_config


def same_space_twins(spaces: Sequence[Sequence[Any]]) -> list[list[int]]:
    """Per task, the indices of the other tasks whose knobs equal its own (each task's knobs in
    `spaces`, compared in order: names and choices); none for a task without knobs."""
    twins: list[list[int]] = []
    for i, knobs in enumerate(spaces):
        same = [j for j, other in enumerate(spaces) if j != i and knobs and other == knobs]
        twins.append(same)
    return twins


def untried_bests(study: optuna.Study, twins: Sequence[optuna.Study]) -> list[tuple[str, dict]]:
    """``(twin study name, params)`` of the best completed config of each of `twins` (the one
    its kernel would be built with, `tensortune.model.database.best_config`) that no trial of
    `study` holds (finished, running or waiting), in the order of `twins`; a twin with no
    completed trial gives none."""
    # A waiting or running trial holds its config as the one it was handed (`trial_config`).
    tried = [dict(trial_config(t)) for t in study.get_trials(deepcopy=False)]
    picked: list[tuple[str, dict]] = []
    for twin in twins:
        found = best_config(twin)
        if found is not None and found[0] not in tried:
            picked.append((twin.study_name, found[0]))
            tried.append(found[0])
    return picked
