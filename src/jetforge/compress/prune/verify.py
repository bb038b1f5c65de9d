"""Checking a pruned model before it is handed back: it must run, in eval mode and in train mode.

The channel analysis protects what it does not understand, but a tie it does not see (a width read in
Python code that fx never records, a branch neither trace reached) ends in a pruned model that fails in
some layer.  Before :func:`~jetforge.compress.prune.prune_model.prune` returns, the pruned model runs the
example input in eval mode and -- where train mode was analysed and ran before pruning -- in train mode
on a copy (so no BatchNorm statistic moves); a failure is refused in one line naming the innermost
module that failed, and ``prune()`` puts the caller's model back exactly as it was.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, List, Tuple

import torch
from torch import nn

from jetforge.compress.prune.tracing import double_batch
from jetforge.errors import CompressError


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def run_naming_failure(model: nn.Module, inputs: Tuple[Any, ...], mode: str) -> None:
    """Run ``model(*inputs)`` (no gradients); a failure becomes a CompressError naming the innermost module
    that was running (``<model>`` for the model's own forward)."""
    stack: List[Tuple[str, str]] = []
    handles = []

    def enter(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            stack.append((name, type(module).__name__))
        return hook

    def leave(module: nn.Module, args: Any, out: Any) -> None:
        stack.pop()

    for name, m in model.named_modules():
        if name:
            handles.append(m.register_forward_pre_hook(enter(name)))
            handles.append(m.register_forward_hook(leave))
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as err:
        where, kind = stack[-1] if stack else ("<model>", type(model).__name__)
        raise CompressError("the pruned %s fails in %s mode in %s (%s): %s; the model was left as it was"
                            % (type(model).__name__, mode, where, kind, _first_line(err)),
                            hint="the pruner missed a tie between channel counts there: protect %s or the layers "
                                 "feeding it (protect=[NAME], jetforge prune --protect NAME), and please report "
                                 "the architecture" % where) from err
    finally:
        for h in handles:
            h.remove()


def check_pruned(model: nn.Module, inputs: Tuple[Any, ...], train_checked: bool) -> None:
    """The pruned model runs ``inputs`` in eval mode, and (``train_checked``) a copy runs them in train mode."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        run_naming_failure(model, inputs, "eval")
    finally:
        for m, mode in modes.items():
            m.training = mode
    batch = double_batch(inputs)
    if train_checked and batch is not None:
        run_naming_failure(copy.deepcopy(model).train(), batch, "train")


__all__ = ["check_pruned", "run_naming_failure"]
