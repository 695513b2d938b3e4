"""The paper's second cost model: a child-sum Tree-GRU over the loop tree, in PyTorch.

Each node of a program's loop tree (`tensortune.features.loop_tree`) is embedded bottom-up:
a node's state is a GRU update of the sum of its children's states by its own values, and a
linear head maps the program node's state to a score. All trees of a batch are run together,
one tree depth at a time, so a batch costs as many steps as its deepest tree, not as its
number of nodes. The model trains with the same rank or regression objective as
`BootstrapXGBModel`, as an ensemble of members on bootstrap resamples for a mean and a spread,
and each `fit` continues from the members of the last one instead of starting over.

Needs ``torch`` (``pip install 'tensortune[treegru]'``); runs on a CUDA GPU where there is one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tensortune.cost_model.cost_model import LOSSES
from tensortune.cost_model.ensemble import BootstrapEnsemble
from tensortune.cost_model.training_rows import TrainingSet
from tensortune.features.loop_tree import LENGTH, NODE_WIDTH, decode_trees
from tensortune.target import host_cores


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError(
            "the treegru cost model needs PyTorch: pip install 'tensortune[treegru]'"
        ) from None
    return torch


def _network(hidden: int) -> Any:
    """A fresh `TreeGRU` network (defined here so that torch is imported only when used)."""
    torch = _torch()
    nn = torch.nn

    class TreeGRU(nn.Module):  # type: ignore[name-defined]
        """Child-sum Tree-GRU: h = (1 - z) * s + z * tanh(W x + U (r * s)), s the children's
        summed states, z and r gates of x and s; the program node's h goes to a linear head."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(NODE_WIDTH, hidden)
            self.from_input = nn.Linear(hidden, 3 * hidden)
            self.gates = nn.Linear(hidden, 2 * hidden, bias=False)
            self.candidate = nn.Linear(hidden, hidden, bias=False)
            self.head = nn.Linear(hidden, 1)

        def forward(self, values: Any, levels: list[tuple[Any, Any]]) -> Any:
            x = self.from_input(torch.relu(self.embed(values)))
            # children[i]: the sum of node i's children's states, complete by i's turn.
            children = torch.zeros(len(values), hidden, dtype=values.dtype, device=values.device)
            h = children[:0]
            for nodes, parents in levels:  # deepest first; the last level is the program nodes
                s = children[nodes]
                xz, xr, xh = x[nodes].chunk(3, dim=1)
                hz, hr = self.gates(s).chunk(2, dim=1)
                z, r = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
                h = (1 - z) * s + z * torch.tanh(xh + self.candidate(r * s))
                if parents is not None:
                    children = children.index_add(0, parents, h)
            return self.head(h).squeeze(-1)

    return TreeGRU()


def tree_batch(rows: np.ndarray, device: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """Flatten a batch of loop-tree rows into node values and the nodes of each depth, deepest
    first, with their parents' positions; the last level is the program nodes in row order."""
    torch = _torch()
    values, parents, present = decode_trees(rows)
    b, m = parents.shape
    depth = np.zeros((b, m), dtype=np.int64)
    for j in range(1, m):  # parents come first, so their depth is known
        has = parents[:, j] >= 0
        depth[has, j] = depth[has, parents[has, j]] + 1
    flat = np.flatnonzero(present.reshape(-1))  # positions of real nodes in the b * m grid
    index = np.full(b * m, -1, dtype=np.int64)
    index[flat] = np.arange(len(flat))
    node_depth = depth.reshape(-1)[flat]
    parent_flat = parents.reshape(-1)[flat]
    parent_pos = np.where(parent_flat >= 0, index[(flat // m) * m + parent_flat], -1)
    levels = []
    for d in range(int(node_depth.max(initial=0)), -1, -1):
        nodes = np.flatnonzero(node_depth == d)
        up = torch.as_tensor(parent_pos[nodes], device=device) if d > 0 else None
        levels.append((torch.as_tensor(nodes, device=device), up))
    x = torch.as_tensor(values.reshape(-1, NODE_WIDTH)[flat], device=device)
    return x, levels


class TreeGRUModel(BootstrapEnsemble):
    """An ensemble of Tree-GRUs over loop-tree rows (feature set ``"loop-tree"``), a
    `BootstrapEnsemble` as `BootstrapXGBModel` is: ``fit(X, y, groups, sample_weight)`` and
    ``predict(X) -> (mean, std)``; each `fit` but the first goes on training the last one's
    members (``warm_start``). Fitted attributes: ``members_`` (the networks),
    ``optimizers_``, ``n_fits_`` and those of `BootstrapEnsemble`.

    Args:
        loss: ``"rank"`` (default): logistic loss over every ordered pair of configs of one
            workload within a minibatch, the paper's rank objective. ``"reg"``: squared error
            on the throughput.
        n_models: Ensemble members, each on its own bootstrap resample (default 3, the
            sampler's default for either model). With 1 there is no resampling and no spread.
        hidden: Width of the node states (default 32).
        epochs: Passes over the rows for a member's first fit (default 60).
        warm_epochs: Passes for a refit that continues from the last fit's members (default
            20): rounds add a batch of rows at a time, so little has changed.
        warm_start: Continue from the last fit's members (default True). False trains every fit
            from a fresh initialization.
        batch_size: Programs per minibatch (default 64).
        learning_rate: Adam's step size (default 3e-3).
        max_train: Training-set cap, as in `BootstrapXGBModel` (default 2048).
        seed: Seed of the row cap, the resamples, the initial weights and the minibatch order
            (default 0).
        device: Torch device (default None: ``"cuda"`` where PyTorch sees a GPU, else
            ``"cpu"``).
        n_threads: CPU threads for PyTorch (default None: every core this process may use).
    """

    def __init__(
        self,
        loss: str = "rank",
        n_models: int = 3,
        hidden: int = 32,
        epochs: int = 60,
        warm_epochs: int = 20,
        warm_start: bool = True,
        batch_size: int = 64,
        learning_rate: float = 3e-3,
        max_train: int = 2048,
        seed: int = 0,
        device: str | None = None,
        n_threads: int | None = None,
    ) -> None:
        self.loss = loss
        self.n_models = n_models
        self.hidden = hidden
        self.epochs = epochs
        self.warm_epochs = warm_epochs
        self.warm_start = warm_start
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_train = max_train
        self.seed = seed
        self.device = device
        self.n_threads = n_threads

    def _start_fit(self, X: np.ndarray) -> None:
        torch = _torch()
        self._check_params()
        if np.ndim(X) != 2 or np.shape(X)[1] != LENGTH:
            raise ValueError(f"X must hold loop-tree rows of {LENGTH} values, got {np.shape(X)}")
        torch.set_num_threads(self.n_threads or host_cores())

    def _seed_entropy(self) -> Any:
        # Each fit draws new resamples and minibatch orders: the fit's number joins the seed.
        return [self.seed, getattr(self, "n_fits_", 0)]

    def _start_members(self, data: TrainingSet) -> None:
        # The last fit's networks and optimizers, by member, for `_fit_member` to go on from.
        self._previous: list[tuple[Any, Any]] = (
            list(zip(self.members_, self.optimizers_, strict=True)) if self._warm() else []
        )
        self.optimizers_: list[Any] = []

    def _end_fit(self) -> None:
        self._previous = []  # the members went on in members_: hold no second reference
        self.n_fits_ = getattr(self, "n_fits_", 0) + 1

    def _check_rows(self, X: np.ndarray) -> None:
        if X.ndim != 2 or X.shape[1] != LENGTH:
            raise ValueError(f"X must have shape (n, {LENGTH}), got {X.shape}")

    def _member_scores(self, X: np.ndarray) -> Iterator[np.ndarray]:
        _torch().set_num_threads(self.n_threads or host_cores())
        for member in self.members_:
            yield self._scores(member, X)

    # -- training --------------------------------------------------------------------------
    def _check_params(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}: choose one of {sorted(LOSSES)}")
        for name in ("n_models", "hidden", "epochs", "warm_epochs", "batch_size", "max_train"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}")

    def _warm(self) -> bool:
        return self.warm_start and bool(getattr(self, "members_", None))

    def _device(self) -> Any:
        torch = _torch()
        return torch.device(self.device or ("cuda" if torch.cuda.is_available() else "cpu"))

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
        """Train one member on its bootstrap resample, going on from the last fit's network and
        its optimizer where there is one (a fresh Adam would take full-size first steps)."""
        torch = _torch()
        device = self._device()
        if index < len(self._previous):
            net, optimizer = self._previous[index]
            epochs = self.warm_epochs
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed.generate_state(1)[0]))
                net = _network(self.hidden).to(device)
            optimizer = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
            epochs = self.epochs
        net.train()
        for _ in range(epochs):
            order = rng.permutation(len(y))
            for at in range(0, len(y), self.batch_size):
                batch = order[at : at + self.batch_size]
                scores = net(*tree_batch(X[batch], device))
                loss = self._loss(scores, y[batch], groups[batch], weight[batch], device)
                if loss is None:
                    continue
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        net.eval()
        self.optimizers_.append(optimizer)
        return net, self.output_scale(lambda: self._scores(net, X))

    def _loss(
        self, scores: Any, y: np.ndarray, groups: np.ndarray, weight: np.ndarray, device: Any
    ) -> Any:
        torch = _torch()
        w = torch.as_tensor(weight, dtype=scores.dtype, device=device)
        target = torch.as_tensor(y, dtype=scores.dtype, device=device)
        if self.loss == "reg":
            return (w * (scores - target) ** 2).sum() / w.sum()
        g = torch.as_tensor(groups, device=device)
        # Every ordered pair of one workload: the better config should score higher.
        better = (target[:, None] > target[None, :]) & (g[:, None] == g[None, :])
        if not bool(better.any()):
            return None
        margin = scores[:, None] - scores[None, :]
        pair_weight = w[:, None].expand_as(margin)[better]
        return (pair_weight * torch.nn.functional.softplus(-margin[better])).sum() / (
            pair_weight.sum()
        )

    def _scores(self, net: Any, X: np.ndarray, chunk: int = 1024) -> np.ndarray:
        torch = _torch()
        out = np.empty(len(X))
        device = self._device()
        with torch.no_grad():
            for at in range(0, len(X), chunk):
                scores = net(*tree_batch(X[at : at + chunk], device))
                out[at : at + chunk] = scores.double().cpu().numpy()
        return out
