"""Acquisition functions: turn a cost model's mean and spread into one score per config.

Everything here is higher-is-better, like the model's outputs, and works elementwise on NumPy
arrays, so a batch of thousands of candidates is scored in one call.
"""

from __future__ import annotations

import math

import numpy as np

#: Names accepted by `acquire`; the first is the default (the paper found that uncertainty did
#: not help its search).
ACQUISITIONS = ("mean", "ei", "ucb")


def mean_score(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The model's mean, ignoring its spread: AutoTVM's pure exploitation.

    Args:
        mean: Predicted mean per config.
        std: Predicted standard deviation per config (unused; kept so every acquisition has
            the same leading arguments).

    Returns:
        ``mean`` as a float array.
    """
    return np.asarray(mean, dtype=np.float64)


def expected_improvement(
    mean: np.ndarray, std: np.ndarray, best: float, xi: float = 0.0
) -> np.ndarray:
    """Expected improvement over ``best`` for maximization, under a normal predictive law.

    ``EI = (mean - best - xi) * Phi(z) + std * phi(z)`` with ``z = (mean - best - xi) / std``;
    where ``std`` is 0 the law is a point mass and ``EI = max(mean - best - xi, 0)``.

    Args:
        mean: Predicted mean per config.
        std: Predicted standard deviation per config (non-negative).
        best: The incumbent, in the model's output scale (for the rank loss, e.g. the best
            predicted mean among the measured configs, since the outputs are not throughputs).
        xi: Margin an improvement must exceed (default 0.0, the textbook EI); raise it to
            favour exploration.

    Returns:
        Non-negative expected improvement per config.
    """
    from scipy.special import ndtr

    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    gain = mean - best - xi
    positive = std > 0
    # Dividing only where std > 0 keeps the std == 0 entries free of inf/NaN warnings.
    z = np.divide(gain, std, out=np.zeros_like(gain), where=positive)
    density = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    ei = gain * ndtr(z) + std * density
    return np.where(positive, np.maximum(ei, 0.0), np.maximum(gain, 0.0))


def upper_confidence_bound(mean: np.ndarray, std: np.ndarray, kappa: float = 1.0) -> np.ndarray:
    """Optimistic score ``mean + kappa * std``.

    Args:
        mean: Predicted mean per config.
        std: Predicted standard deviation per config.
        kappa: Weight of the spread (default 1.0: one standard deviation of optimism, a common
            middle ground between exploiting the mean and chasing uncertainty).

    Returns:
        The bound per config.
    """
    return np.asarray(mean, dtype=np.float64) + kappa * np.asarray(std, dtype=np.float64)


def acquire(
    name: str,
    mean: np.ndarray,
    std: np.ndarray,
    best: float,
    *,
    xi: float = 0.0,
    kappa: float = 1.0,
) -> np.ndarray:
    """Score configs with the acquisition function called ``name``.

    Args:
        name: One of `ACQUISITIONS`: ``"mean"``, ``"ei"`` or ``"ucb"``.
        mean: Predicted mean per config.
        std: Predicted standard deviation per config.
        best: The incumbent in the model's output scale (used by ``"ei"`` only).
        xi: EI's improvement margin (default 0.0, see `expected_improvement`).
        kappa: UCB's spread weight (default 1.0, see `upper_confidence_bound`).

    Returns:
        One score per config, higher is better.

    Raises:
        ValueError: For an unknown name.
    """
    if name == "mean":
        return mean_score(mean, std)
    if name == "ei":
        return expected_improvement(mean, std, best, xi=xi)
    if name == "ucb":
        return upper_confidence_bound(mean, std, kappa=kappa)
    raise ValueError(f"unknown acquisition {name!r}: choose one of {', '.join(ACQUISITIONS)}")
