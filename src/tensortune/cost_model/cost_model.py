"""The cost-model interface: what the sampler asks of a model.

A cost model learns from measured configs' feature rows which configs run fastest. The sampler
(`tensortune.sampler.proposals`) only fits it, asks it for a mean and a spread per row, and reads
how long fitting took; a new model needs nothing else (`BootstrapEnsemble` gives the fit and
predict of a bootstrap ensemble, so a new one usually only trains a member).
"""

from __future__ import annotations

from typing import Protocol, Self

import numpy as np

#: Losses every cost model trains with; the first is the default. ``"rank"``: only the order of
#: the configs of one workload is learnt (the paper's choice); ``"reg"``: the throughput itself.
LOSSES = ("rank", "reg")


class CostModel(Protocol):
    """A cost model: ``fit`` on feature rows and targets, ``predict`` a mean and a spread.

    Attributes:
        warm_start: Whether a `fit` goes on from the last fit's state (the sampler then keeps
            the model across rounds) instead of starting over (it makes a new one each round).
        fit_seconds_: Seconds the last `fit` spent training, set by `fit`.
    """

    warm_start: bool
    fit_seconds_: float

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> Self:
        """Train on rows `X` (n, d) with targets `y` (n,), higher is better, optionally grouped
        by workload (`groups`, integer per row; default None: one workload) and weighted
        (`sample_weight`, positive per row; default None: all 1). Returns the model itself."""
        ...

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, std)`` of the predicted score per row of `X`, each of shape (n,)."""
        ...
