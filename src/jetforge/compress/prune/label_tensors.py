"""Helpers over label tensors (a label tensor has the shape of a real tensor; its integers name the channel each
element belongs to) and over the nested values (tuples, lists, dicts of tensors) that flow through a traced graph."""

from __future__ import annotations

from typing import Any, Callable, List, Sequence

import torch


def varying_dims(labels: torch.Tensor) -> List[int]:
    """Dims along which ``labels`` is not constant (so channels are laid out along them)."""
    out = []
    for d in range(labels.dim()):
        if labels.size(d) > 1 and not bool((labels == labels.narrow(d, 0, 1)).all()):
            out.append(d)
    return out


def tree_tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tree_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tree_tensors(v)]
    return []


def tree_map(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[tree_map(fn, v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(tree_map(fn, v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, tree_map(fn, v)) for k, v in value.items())
    return value


def mutable_copy(value: Any) -> Any:
    """``value`` with every list and dict (fx's immutable ones included) copied into a plain, editable one."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[mutable_copy(v) for v in value])
    if isinstance(value, tuple):
        return tuple(mutable_copy(v) for v in value)
    if isinstance(value, list):
        return [mutable_copy(v) for v in value]
    if isinstance(value, dict):
        return {key: mutable_copy(v) for key, v in value.items()}
    return value


def frozen_like(value: Any) -> Any:
    return tree_map(lambda t: torch.zeros(t.shape, dtype=torch.long), value)


def expand_channel_vector(vec: torch.Tensor, shape: Sequence[int], dim: int = 1) -> torch.Tensor:
    view = [1] * len(shape)
    view[dim] = vec.numel()
    return vec.reshape(view).expand(*shape)
