"""The loop program as a tree (the TreeGRU's input), flattened into a fixed-length row.

Node 0 is the program. Every loop is a child of the loop around it (or of the program), every
buffer store a child of its innermost loop, and every buffer the store touches a child of the
store, in program order. Each node carries only what the program says about it, with no
engineered relations across the tree: a loop its kind and extent and how the addresses of the
stores below move with it, a store its arithmetic, an access its buffer, scope and strides.

A row holds `MAX_NODES` slots of ``1 + NODE_WIDTH`` values, parents first: the slot's parent
index (-1 for the root and for empty slots) and the node's values. Fixed-length rows let the
tree go wherever feature rows go (caches, NaN rows for unschedulable configs, transfer across
operators); `decode_trees` turns a batch of rows back into nodes and parents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tensortune.features.encodings import log_scale
from tensortune.features.loops import Loop, LoopProgram, Store

NODE_TYPES = ("program", "loop", "store", "access")
#: Loop kinds with GPU launch dimensions told apart.
TREE_LOOP_KINDS = (
    "serial",
    "parallel",
    "vectorized",
    "unrolled",
    "blockIdx",
    "vthread",
    "threadIdx",
)
ARITH = ("add", "mul", "div", "minmax", "other")
SCOPES = ("global", "shared", "local")
#: Meaning of each value of a node, in order.
NODE_VALUES = (
    *(f"type_{t}" for t in NODE_TYPES),
    *(f"loop_{k}" for k in TREE_LOOP_KINDS),
    "loop_extent",
    "loop_auto_unroll",
    "loop_reuse_share",  # accesses below whose address this loop does not move
    "loop_contiguous_share",  # ... moves by one element per step
    "loop_max_stride",
    "loop_trips",  # iterations of this loop and the loops inside it, on its longest path
    *(f"store_{a}" for a in ARITH),
    "store_executions",
    "access_write",
    *(f"access_{s}" for s in SCOPES),
    "access_bytes",
    "access_inner_stride",
    "access_thread_stride",
)
NODE_WIDTH = len(NODE_VALUES)
#: Node slots per row: programs of the built-in templates have 16 to 40 nodes.
MAX_NODES = 64
LENGTH = MAX_NODES * (1 + NODE_WIDTH)
_AT = {name: i for i, name in enumerate(NODE_VALUES)}


def _loop_kind(loop: Loop) -> str:
    for prefix in ("blockIdx", "vthread", "threadIdx"):
        if loop.thread.startswith(prefix):
            return prefix
    return loop.kind if loop.kind in TREE_LOOP_KINDS else "serial"


def _node(kind: str) -> np.ndarray:
    values = np.zeros(NODE_WIDTH, dtype=np.float32)
    values[_AT[f"type_{kind}"]] = 1.0
    return values


def _loop_values(loop: Loop, strides: Sequence[int], trips: int) -> np.ndarray:
    values = _node("loop")
    values[_AT["loop_trips"]] = log_scale(trips)
    values[_AT[f"loop_{_loop_kind(loop)}"]] = 1.0
    values[_AT["loop_extent"]] = log_scale(loop.extent)
    values[_AT["loop_auto_unroll"]] = log_scale(loop.auto_unroll)
    if strides:
        values[_AT["loop_reuse_share"]] = sum(s == 0 for s in strides) / len(strides)
        values[_AT["loop_contiguous_share"]] = sum(s == 1 for s in strides) / len(strides)
        values[_AT["loop_max_stride"]] = log_scale(max(strides))
    return values


def _store_values(store: Store) -> np.ndarray:
    values = _node("store")
    for name in ARITH:
        values[_AT[f"store_{name}"]] = log_scale(store.arith.get(name, 0))
    values[_AT["store_executions"]] = log_scale(store.executions)
    return values


def _access_values(store: Store, index: int) -> np.ndarray:
    access = store.accesses[index]
    values = _node("access")
    values[_AT["access_write"]] = float(access.write)
    values[_AT[f"access_{access.scope if access.scope in SCOPES else 'global'}"]] = 1.0
    values[_AT["access_bytes"]] = log_scale(math.prod(access.shape) * access.itemsize)
    if store.loops:
        values[_AT["access_inner_stride"]] = log_scale(access.stride(len(store.loops) - 1))
    values[_AT["access_thread_stride"]] = log_scale(access.thread_stride + 1)
    return values


def tree_nodes(program: LoopProgram) -> tuple[np.ndarray, np.ndarray]:
    """``(values, parents)``: the tree's nodes in pre-order, shape ``(n, NODE_WIDTH)``, and each
    node's parent index (-1 for the program node)."""
    # Strides of every access below each loop, by the loop's uid.
    strides: dict[int, list[int]] = {}
    trips: dict[int, int] = {}
    for store in program.stores:
        inside = 1
        for level in reversed(range(len(store.loops))):
            loop = store.loops[level]
            inside *= loop.extent
            trips[loop.uid] = max(trips.get(loop.uid, 1), inside)
            strides.setdefault(loop.uid, []).extend(a.stride(level) for a in store.accesses)
    # Children in program order: a loop is first seen with the first store inside it.
    children: dict[int, list[tuple[str, object]]] = {0: []}
    loops: dict[int, Loop] = {}
    for store in program.stores:
        parent = 0
        for loop in store.loops:
            if loop.uid not in loops:
                loops[loop.uid] = loop
                children[loop.uid] = []
                children[parent].append(("loop", loop.uid))
            parent = loop.uid
        children[parent].append(("store", store))
    values: list[np.ndarray] = []
    parents: list[int] = []

    def add(row: np.ndarray, parent: int) -> int:
        values.append(row)
        parents.append(parent)
        return len(values) - 1

    def visit(uid: int, at: int) -> None:
        for kind, item in children[uid]:
            if kind == "loop":
                assert isinstance(item, int)
                visit(item, add(_loop_values(loops[item], strides[item], trips[item]), at))
            else:
                assert isinstance(item, Store)
                store_at = add(_store_values(item), at)
                for i in range(len(item.accesses)):
                    add(_access_values(item, i), store_at)

    visit(0, add(_node("program"), -1))
    return np.asarray(values, dtype=np.float32), np.asarray(parents, dtype=np.int64)


def loop_tree_features(program: LoopProgram) -> np.ndarray:
    """The flattened tree, `LENGTH` values. A program of more than `MAX_NODES` nodes keeps its
    first `MAX_NODES` in pre-order (none of the built-in templates comes near)."""
    values, parents = tree_nodes(program)
    n = min(len(parents), MAX_NODES)
    out = np.zeros((MAX_NODES, 1 + NODE_WIDTH), dtype=np.float32)
    out[:, 0] = -1.0
    out[:n, 0] = parents[:n]
    out[:n, 1:] = values[:n]
    return out.reshape(-1)


def decode_trees(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of rows back into ``(values, parents, present)``: node values
    ``(b, MAX_NODES, NODE_WIDTH)``, parent slots ``(b, MAX_NODES)`` and which slots hold a node."""
    nodes = np.asarray(rows, dtype=np.float32).reshape(len(rows), MAX_NODES, 1 + NODE_WIDTH)
    parents = nodes[:, :, 0].astype(np.int64)
    present = np.asarray(nodes[:, :, 1:].any(axis=2))  # every node has its type set
    return nodes[:, :, 1:], parents, present
