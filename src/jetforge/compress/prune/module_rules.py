"""The label rules of the modules the pruner knows: convolutions (grouped, depthwise, transposed), Linear, the
normalisation layers (BatchNorm, InstanceNorm, GroupNorm, LayerNorm), PReLU, activations, pooling, flatten.

Each rule records the module's channel slots and compute layer in the graph builder and returns the label tensor
of the module's output.  :class:`ModuleRules` is a part of
:class:`~jetforge.compress.prune.interpreter.LabelInterpreter`, which provides ``b`` (the builder), ``uf``, ``qual``,
``unsupported`` and ``_per_channel``.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.fx as fx
from torch import nn

from jetforge.compress.prune.label_tensors import expand_channel_vector, varying_dims
from jetforge.compress.prune.records import LayerRecord


class ModuleRules:
    """The module half of the label interpreter (see the module docstring)."""

    def _channel_vector(self, node: fx.Node, name: str, src: torch.Tensor, dim: int) -> Optional[torch.Tensor]:
        """Labels of axis ``dim`` if every other axis carries the same labels, else None (frozen, reported)."""
        dim = dim % src.dim()
        if any(d != dim for d in varying_dims(src)):
            self.unsupported(node, name, "input channels are mixed with another axis", [src], {}, src)
            return None
        index = [0] * src.dim()
        index[dim] = slice(None)
        return src[tuple(index)].clone()

    def _module_labels(self, node: fx.Node, m: nn.Module, a: Any, la: Any, out: Any) -> Any:
        qual = self.qual(str(node.target))
        tname = type(m).__name__
        src = la[0] if la else None
        x = a[0] if a else None
        if isinstance(m, nn.modules.conv._ConvNd) and isinstance(x, torch.Tensor):
            return self._conv(node, qual, m, x, src, out)
        if isinstance(m, nn.Linear):
            in_vec = self._channel_vector(node, qual, src, -1)
            out_vec = self.uf.new(m.out_features)
            if in_vec is not None:
                self.b.add_slot(qual, "weight", 1, in_vec, tname, "weight")
            self.b.add_slot(qual, "weight", 0, out_vec, tname, "weight")
            if m.bias is not None:
                self.b.add_slot(qual, "bias", 0, out_vec, tname, "bias")
            positions = out.numel() // max(1, out.size(0) if out.dim() > 1 else 1) // m.out_features
            self.b.add_layer(LayerRecord(qual, "linear", 1, m.in_features, m.out_features, 1, positions,
                                         (qual, "weight", 1) if in_vec is not None else None, (qual, "weight", 0)))
            return expand_channel_vector(out_vec, out.shape, -1 % out.dim())
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.GroupNorm,
                          nn.PReLU)):
            if isinstance(m, nn.PReLU) and m.num_parameters == 1:
                return src
            vec = self._channel_vector(node, qual, src, 1)
            if vec is None:
                return src
            if isinstance(m, nn.GroupNorm):
                per = m.num_channels // m.num_groups
                for g in range(m.num_groups):
                    chunk = vec[g * per:(g + 1) * per]
                    self.uf.union_tensors(chunk[:1], chunk)  # a GroupNorm group is kept or removed whole
            for pname in ("weight", "bias"):
                if getattr(m, pname, None) is not None and isinstance(getattr(m, pname), torch.Tensor):
                    self.b.add_slot(qual, pname, 0, vec, tname, "weight" if pname == "weight" else "bias")
            for bname in ("running_mean", "running_var"):
                if getattr(m, bname, None) is not None:
                    self.b.add_slot(qual, bname, 0, vec, tname, "buffer")
            return src
        if isinstance(m, nn.LayerNorm):
            n = len(m.normalized_shape)
            lead = src.dim() - n
            sub = src[(0,) * lead]
            if any(d < lead for d in varying_dims(src)):
                return self.unsupported(node, tname, "LayerNorm input varies across its leading axes", la, {}, out)
            if m.elementwise_affine:
                for pname in ("weight", "bias"):
                    if getattr(m, pname, None) is not None:
                        self.b.add_element_slot(qual, pname, sub.clone(), tname,
                                                "weight" if pname == "weight" else "bias")
            self.b.layernorms.add(qual)
            return src
        if isinstance(m, (nn.Identity,)) or type(m).__module__ in ("torch.nn.modules.activation",
                                                                      "torch.nn.modules.dropout"):
            if isinstance(m, nn.MultiheadAttention):
                return self.unsupported(node, tname, "attention heads are not pruned", la, {}, out)
            if isinstance(m, (nn.Softmax, nn.LogSoftmax, nn.Softmin)) and isinstance(src, torch.Tensor):
                return src
            if isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and out.shape == src.shape:
                return src
            return self.unsupported(node, tname, "activation that changes the shape", la, {}, out)
        if type(m).__module__ == "torch.nn.modules.pooling" or isinstance(m, nn.Upsample):
            return self._per_channel(node, tname, src, out)
        if isinstance(m, (nn.Flatten, nn.Unflatten)) and isinstance(src, torch.Tensor):
            if isinstance(m, nn.Unflatten) and m.dim % src.dim() in varying_dims(src):
                return self.unsupported(node, tname, "unflatten of the channel axis", la, {}, out)
            return m(src)
        return self.unsupported(node, tname, "module type unknown to the pruner", la, {}, out)

    def _conv(self, node: fx.Node, qual: str, m: nn.Module, x: torch.Tensor, src: Any, out: Any) -> Any:
        tname = type(m).__name__
        transposed = bool(m.transposed)
        in_vec = self._channel_vector(node, qual, src, 1)
        out_vec = self.uf.new(m.out_channels)
        g = m.groups
        if in_vec is not None and g > 1:
            gi, go = m.in_channels // g, m.out_channels // g
            for j in range(g):
                block = torch.cat([in_vec[j * gi:(j + 1) * gi], out_vec[j * go:(j + 1) * go]])
                self.uf.union_tensors(block[:1], block)  # a group is kept or removed whole
        elif in_vec is None and g > 1:
            self.uf.freeze(out_vec)
        if transposed:  # weight [in, out / groups, *k]
            if in_vec is not None:
                self.b.add_slot(qual, "weight", 0, in_vec, tname, "weight")
            if g == 1:
                self.b.add_slot(qual, "weight", 1, out_vec, tname, "weight")
        else:  # weight [out, in / groups, *k]; a grouped conv keeps in / groups, it loses whole groups
            self.b.add_slot(qual, "weight", 0, out_vec, tname, "weight")
            if g == 1 and in_vec is not None:
                self.b.add_slot(qual, "weight", 1, in_vec, tname, "weight")
        if m.bias is not None:
            self.b.add_slot(qual, "bias", 0, out_vec, tname, "bias")
        kernel = int(math.prod(m.kernel_size))
        batch = x.size(0) if x.dim() == len(m.kernel_size) + 2 else 1
        ref = x if transposed else out
        positions = ref.numel() // batch // ref.size(-len(m.kernel_size) - 1)
        if transposed:
            in_key = (qual, "weight", 0) if in_vec is not None else None
            out_key = (qual, "weight", 1) if g == 1 else None  # grouped: out follows the kept input groups
        else:
            in_key = (qual, "weight", 1) if (g == 1 and in_vec is not None) else None
            out_key = (qual, "weight", 0)
        self.b.add_layer(LayerRecord(qual, "convT" if transposed else "conv", g, m.in_channels, m.out_channels,
                                     kernel, positions, in_key, out_key))
        self.b.convs[qual] = (m.in_channels, m.out_channels, g, transposed)
        return expand_channel_vector(out_vec, out.shape)
