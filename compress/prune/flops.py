"""Counting MACs and parameters, before and after pruning.

Method (stated in every report): multiply-accumulates per sample of every
Conv{1,2,3}d, ConvTranspose{1,2,3}d and Linear call, counted with forward hooks on
the example input (a layer called several times is counted every time).
Conv: output elements x (in_channels / groups) x kernel volume; ConvTranspose: input
elements x (out_channels / groups) x kernel volume; Linear: output elements x
in_features.  FLOPs = 2 x MACs.  Normalisation, activations, pooling and elementwise ops
are not counted; they are small next to the convolutions in these networks and
TensorRT fuses most of them.  Parameters are counted exactly (numel of every parameter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

import torch
from torch import nn

from jetforge.compress.prune.graph import DependencyGraph
from jetforge.compress.prune.groups import kept_counts

METHOD = ("MACs per sample of Conv/ConvTranspose/Linear layers counted with forward hooks on the example input "
          "(FLOPs = 2 x MACs; norms, activations, pooling and elementwise ops not counted); parameters counted "
          "exactly")


@dataclass
class OpCount:
    macs: int
    params: int
    per_layer: Dict[str, int] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        return 2 * self.macs


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def count_ops(model: nn.Module, example_inputs: Any) -> OpCount:
    """MACs per sample (see the module docstring for the method) and parameters of ``model``."""
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    per_layer: Dict[str, int] = {}
    handles = []

    def hook_for(name: str):
        def hook(m: nn.Module, args: Tuple[Any, ...], out: Any) -> None:
            x = args[0]
            if isinstance(m, nn.Linear):
                batch = out.size(0) if out.dim() > 1 else 1
                macs = out.numel() // batch * m.in_features
            else:
                nd = len(m.kernel_size)
                batch = x.size(0) if x.dim() == nd + 2 else 1
                kernel = math.prod(m.kernel_size)
                if m.transposed:
                    macs = x.numel() // batch * (m.out_channels // m.groups) * kernel
                else:
                    macs = out.numel() // batch * (m.in_channels // m.groups) * kernel
            per_layer[name] = per_layer.get(name, 0) + int(macs)
        return hook

    for name, m in model.named_modules():
        if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)):
            handles.append(m.register_forward_hook(hook_for(name)))
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes.items():
            m.training = mode
    return OpCount(sum(per_layer.values()), count_params(model), per_layer)


def estimate(graph: DependencyGraph, model: nn.Module, before: OpCount, removed: torch.Tensor) -> OpCount:
    """MACs and parameters after removing ``removed``, without touching the model (used by the search).

    Each traced layer's counted MACs scale with its kept (out x in / groups) fraction;
    each parameter's numel with the kept fraction of each of its pruned axes.
    """
    kept = kept_counts(graph, removed)
    per_layer = dict(before.per_layer)
    for name, rec in graph.layers.items():
        if name not in per_layer:
            continue
        out_k = kept[rec.out_key] if rec.out_key else None
        in_k = kept[rec.in_key] if rec.in_key else None
        g = rec.groups
        if rec.kind == "convT":
            in_new = in_k if in_k is not None else rec.in_channels
            g_new = g * in_new // rec.in_channels if g > 1 else 1
            out_new = out_k if out_k is not None else rec.out_channels * g_new // g
            factor = (in_new / rec.in_channels) * ((out_new / g_new) / (rec.out_channels / g))
        else:
            out_new = out_k if out_k is not None else rec.out_channels
            g_new = g * out_new // rec.out_channels if g > 1 else 1
            in_new = in_k if in_k is not None else rec.in_channels * g_new // g
            factor = (out_new / rec.out_channels) * ((in_new / g_new) / (rec.in_channels / g))
        per_layer[name] = int(round(per_layer[name] * factor))
    sizes: Dict[Tuple[str, str], float] = {}
    for (module, tensor, dim), slot in graph.slots.items():
        sizes[(module, tensor)] = sizes.get((module, tensor), 1.0) * kept[(module, tensor, dim)] / slot.labels.numel()
    params = 0
    for name, p in model.named_parameters():
        module, _, tensor = name.rpartition(".")
        params += int(round(p.numel() * sizes.get((module, tensor), 1.0)))
    return OpCount(sum(per_layer.values()), params, per_layer)
