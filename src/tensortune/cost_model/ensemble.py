"""The bootstrap ensemble both cost models are: members fit on resamples, a mean and a spread.

`BootstrapEnsemble.fit` checks and caps the training rows, derives every seed from the model's
``seed``, resamples the rows of each member within each group and has the subclass train that
member; `BootstrapEnsemble.predict` standardizes each member's scores (rank loss) and returns
the members' mean and standard deviation. A subclass only says how one member trains and
scores (`tensortune.cost_model.BootstrapXGBModel`, `tensortune.cost_model.treegru.TreeGRUModel`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import numpy as np

from tensortune.cost_model.training_rows import TrainingSet, grouped_rows, training_set


class BootstrapEnsemble:
    """Base of the bootstrap-ensemble cost models (see the module's docstring).

    A subclass stores ``loss``, ``n_models``, ``max_train`` and ``seed`` and defines
    `_start_fit` (checks, before the clock starts), `_fit_member` and `_member_scores`; it may
    override `_seed_entropy`, `_start_members`, `_member_workers` and `_end_fit`. Fitted
    attributes: ``members_``, ``scales_`` (offset and scale of each member's scores),
    ``constant_``, ``n_train_`` and ``fit_seconds_``.
    """

    loss: str
    n_models: int
    max_train: int
    seed: int
    #: Whether a `fit` goes on from the last fit's members (see `CostModel`). Default False.
    warm_start: bool = False

    members_: list[Any]
    scales_: list[tuple[float, float]]
    constant_: float
    n_train_: int
    fit_seconds_: float

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> Self:
        """Train the ensemble.

        With fewer than two rows, or when y is constant (for the rank loss: within every
        group), there is nothing to learn: no member is trained and `predict` returns a
        constant (0 for the rank loss, the weighted mean of y for the regression loss) with
        zero spread.

        Args:
            X: Feature rows, shape (n, d); NaN marks a missing feature.
            y: Targets, shape (n,), higher is better: normalized throughput in [0, 1], with
                0 for configs that failed.
            groups: Integer id per row, shape (n,), of the workload it was measured on.
                Default None: one workload. The rank loss only compares rows of one group, so
                throughputs of different workloads never need a common scale; each bootstrap
                resample draws within each group.
            sample_weight: Positive weight per row, shape (n,). Default None: all 1. With the
                rank loss a weight applies to a whole group, so it must be equal within one.

        Returns:
            The fitted model itself.

        Raises:
            ValueError: For bad parameters, mismatched shapes, a non-finite y, or bad groups or
                weights.
        """
        self._start_fit(X)
        start = time.perf_counter()
        seeds = np.random.SeedSequence(self._seed_entropy()).spawn(self.n_models + 1)
        rng = np.random.default_rng(seeds[0])
        data = training_set(X, y, groups, sample_weight, self.loss, self.max_train, rng)
        self.n_train_ = len(data.y)
        self._start_members(data)
        self.members_ = []
        self.scales_ = []
        self.constant_ = data.constant
        if data.learnable:
            # Each member's resample comes from its own generator, so drawing them all first
            # and training them in any order (or at once) gives the same members.
            jobs = []
            for index, member_seed in enumerate(seeds[1:]):
                member_rng = np.random.default_rng(member_seed)
                rows = grouped_rows(data.groups, resample=self.n_models > 1, rng=member_rng)
                jobs.append((index, rows, member_seed, member_rng))

            def fit_one(job: tuple[int, np.ndarray, Any, np.random.Generator]) -> Any:
                index, rows, member_seed, member_rng = job
                return self._fit_member(
                    index,
                    data.X[rows],
                    data.y[rows],
                    data.groups[rows],
                    data.weight[rows],
                    member_seed,
                    member_rng,
                )

            workers = min(self._member_workers(), len(jobs))
            if workers > 1:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    fitted = list(pool.map(fit_one, jobs))
            else:
                fitted = [fit_one(job) for job in jobs]
            for member, scale in fitted:
                self.members_.append(member)
                self.scales_.append(scale)
        self._end_fit()
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ensemble's mean and standard deviation (ddof=0) for each row, higher is better.

        For the rank loss each member's scores are first standardized by the mean and standard
        deviation of its scores on its own training rows, so members that learnt the same
        order on different offsets and scales average on one scale.

        Args:
            X: Feature rows, shape (n, d) with the d seen in `fit`.

        Returns:
            ``(mean, std)``, each of shape (n,).

        Raises:
            RuntimeError: If the model has not been fit.
            ValueError: If X is not 2-D or has a different number of features.
        """
        if not hasattr(self, "members_"):
            raise RuntimeError(f"{type(self).__name__}.predict called before fit")
        X = np.asarray(X, dtype=np.float32)
        self._check_rows(X)
        if not self.members_:
            return np.full(len(X), self.constant_), np.zeros(len(X))
        preds = np.empty((len(self.members_), len(X)))
        for i, (scores, (offset, scale)) in enumerate(
            zip(self._member_scores(X), self.scales_, strict=True)
        ):
            preds[i] = (scores - offset) / scale
        return preds.mean(axis=0), preds.std(axis=0)

    def output_scale(self, train_scores: Callable[[], np.ndarray]) -> tuple[float, float]:
        """Offset and scale that standardize a member's scores, from its `train_scores` on its
        own training rows (asked for only under the rank loss; identity for regression)."""
        if self.loss != "rank":
            return 0.0, 1.0
        train = train_scores()
        std = float(train.std())
        # A member that predicts a constant (all stumps) is left unscaled.
        return float(train.mean()), std if std > 0 else 1.0

    # -- what a subclass defines -----------------------------------------------------------
    def _start_fit(self, X: np.ndarray) -> None:
        """Check the parameters and `X` before training starts (and the clock with it)."""
        raise NotImplementedError

    def _seed_entropy(self) -> Any:
        """Entropy of the fit's `numpy.random.SeedSequence`. Default: ``seed``."""
        return self.seed

    def _start_members(self, data: TrainingSet) -> None:
        """Called once the rows are known, before the members are reset. Default: nothing."""

    def _member_workers(self) -> int:
        """Members trained at once, each in a thread of this process (`_fit_member` must then
        be thread-safe). Default 1: one after another."""
        return 1

    def _fit_member(
        self,
        index: int,
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray,
        weight: np.ndarray,
        seed: np.random.SeedSequence,
        rng: np.random.Generator,
    ) -> tuple[Any, tuple[float, float]]:
        """Train member `index` on its resampled rows; returns it and its `output_scale`.
        `rng` (from `seed`) drew the resample and may go on drawing."""
        raise NotImplementedError

    def _end_fit(self) -> None:
        """Called after the members are trained. Default: nothing."""

    def _check_rows(self, X: np.ndarray) -> None:
        """`ValueError` if `X` does not have the rows' shape seen in `fit`."""
        raise NotImplementedError

    def _member_scores(self, X: np.ndarray) -> Iterable[np.ndarray]:
        """Each member's raw scores of the rows `X`, in member order."""
        raise NotImplementedError
