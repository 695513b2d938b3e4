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

import time
from typing import Any

import numpy as np

from tensortune.cost_model.training_rows import grouped_rows, training_set
from tensortune.features.loop_tree import LENGTH, NODE_WIDTH, decode_trees
from tensortune.target import host_cores

LOSSES = ("rank", "reg")


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


class TreeGRUModel:
    """An ensemble of Tree-GRUs over loop-tree rows (feature set ``"loop-tree"``), with
    `BootstrapXGBModel`'s interface: ``fit(X, y, groups, sample_weight)`` and
    ``predict(X) -> (mean, std)``.

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

    def fit(
        self,
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> TreeGRUModel:
        """Train (or, with ``warm_start``, go on training) the ensemble; the arguments, and what
        happens with nothing to learn, are as in `BootstrapXGBModel.fit`. X holds loop-tree
        rows."""
        torch = _torch()
        self._check_params()
        if np.ndim(X) != 2 or np.shape(X)[1] != LENGTH:
            raise ValueError(f"X must hold loop-tree rows of {LENGTH} values, got {np.shape(X)}")
        torch.set_num_threads(self.n_threads or host_cores())
        start = time.perf_counter()
        calls = getattr(self, "n_fits_", 0)
        seeds = np.random.SeedSequence([self.seed, calls]).spawn(self.n_models + 1)
        rng = np.random.default_rng(seeds[0])
        data = training_set(X, y, groups, sample_weight, self.loss, self.max_train, rng)
        X, y, groups, weight = data.X, data.y, data.groups, data.weight
        self.n_train_ = len(y)
        self.constant_ = data.constant
        previous = list(zip(self.members_, self.optimizers_, strict=True)) if self._warm() else []
        self.members_: list[Any] = []
        self.optimizers_: list[Any] = []
        self.scales_: list[tuple[float, float]] = []
        if data.learnable:
            for i, member_seed in enumerate(seeds[1:]):
                start_from = previous[i] if i < len(previous) else None
                self._fit_member(X, y, groups, weight, member_seed, start_from)
        self.n_fits_ = calls + 1
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ensemble's mean and standard deviation per row (rank members standardized on
        their training rows first, as in `BootstrapXGBModel.predict`)."""
        if not hasattr(self, "members_"):
            raise RuntimeError("TreeGRUModel.predict called before fit")
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != LENGTH:
            raise ValueError(f"X must have shape (n, {LENGTH}), got {X.shape}")
        if not self.members_:
            return np.full(len(X), self.constant_), np.zeros(len(X))
        _torch().set_num_threads(self.n_threads or host_cores())
        preds = np.stack(
            [
                (self._scores(member, X) - offset) / scale
                for member, (offset, scale) in zip(self.members_, self.scales_, strict=True)
            ]
        )
        return preds.mean(axis=0), preds.std(axis=0)

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
        X: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray,
        weight: np.ndarray,
        seed: np.random.SeedSequence,
        start_from: tuple[Any, Any] | None,
    ) -> None:
        """Train one member on a bootstrap resample; `start_from` is the last fit's network
        and its optimizer, which go on (a fresh Adam would take full-size first steps)."""
        torch = _torch()
        rng = np.random.default_rng(seed)
        rows = grouped_rows(groups, resample=self.n_models > 1, rng=rng)
        X, y, groups, weight = X[rows], y[rows], groups[rows], weight[rows]
        device = self._device()
        if start_from is not None:
            net, optimizer = start_from
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
        self.members_.append(net)
        self.optimizers_.append(optimizer)
        self.scales_.append(self._output_scale(net, X))

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

    def _output_scale(self, net: Any, X: np.ndarray) -> tuple[float, float]:
        if self.loss != "rank":
            return 0.0, 1.0
        train = self._scores(net, X)
        std = float(train.std())
        return float(train.mean()), std if std > 0 else 1.0
