"""The GPU<->DLA transitions a placement implies: which tensors cross, how often, and how many bytes.

Every tensor produced on one side and read on the other crosses once per reading side: TensorRT inserts a
reformat (and, from 8.5, a cuDLA hand-off) at that edge.  The network's inputs and outputs live on the GPU side
(TensorRT's I/O bindings are GPU-visible linear memory), so a network that starts or ends on DLA pays a
transition there too.  Bytes are the tensor's elements at the build precision (FP16: 2, INT8: 1) at the shapes
the analysis was run with: the data each transition moves once in each direction of the reformat copy.
Layers folded at build time pass their input through (Identity, Dropout) or are constants (no transition).
Layers here are :class:`~.analyze.LayerResult` objects (``index``, ``kind``, ``device``).
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from jetforge.runtime.tensorrt.dla.graph import OnnxGraph, prod
from jetforge.runtime.tensorrt.dla.subgraphs import DLA, FOLDED, GPU_DEVICE

BYTES_PER_ELEMENT = {"fp16": 2, "int8": 1, "best": 1}


@dataclass(frozen=True)
class Transition:
    """One tensor crossing between the GPU and a DLA core."""

    tensor: str
    source: str                      # "GPU" or "DLA"
    dest: str
    shape: Optional[Tuple[int, ...]]
    bytes: Optional[int]             # None when the shape is not static

    def to_dict(self) -> Dict[str, Any]:
        return {"tensor": self.tensor, "from": self.source, "to": self.dest,
                "shape": list(self.shape) if self.shape is not None else None, "bytes": self.bytes}


def find_transitions(proto: Any, layers: Sequence[Any], g: OnnxGraph, precision: str) -> List[Transition]:
    """The crossings of ``layers``' placement over ``proto``'s graph, in graph order."""
    bpe = BYTES_PER_ELEMENT.get(precision, 2)
    by_index = {layer.index: layer for layer in layers}
    side: Dict[str, str] = {name: GPU_DEVICE for name in g.inputs}   # tensor -> side that holds it
    seen: Set[Tuple[str, str]] = set()
    out: List[Transition] = []

    def cross(tensor: str, dest: str) -> None:
        source = side.get(tensor)
        if source is None or source == dest or (tensor, dest) in seen:
            return
        seen.add((tensor, dest))
        shape = g.shape(tensor)
        static = shape is not None and all(isinstance(d, int) and d > 0 for d in shape)
        out.append(Transition(tensor, source, dest, tuple(shape) if static else None,
                              prod(shape) * bpe if static else None))

    for i, node in enumerate(proto.graph.node):
        layer = by_index[i]
        if layer.device == FOLDED:
            if layer.kind == "none":     # pass-through: the output sits where the input does
                src = next((side[t] for t in node.input if t in side), None)
                for o in node.output:
                    if src is not None and o:
                        side[o] = src
            continue
        for t in node.input:
            if t and t not in g.constant:
                cross(t, layer.device)
        for o in node.output:
            if o:
                side[o] = layer.device
    for name in g.outputs:
        cross(name, GPU_DEVICE)
    return out


def summarize(moves: Sequence[Transition]) -> Dict[str, Any]:
    """Count and bytes of the transitions, in each direction (unknown sizes counted apart)."""
    known = [m.bytes for m in moves if m.bytes is not None]
    return {"count": len(moves),
            "to_dla": sum(1 for m in moves if m.dest == DLA),
            "to_gpu": sum(1 for m in moves if m.dest == GPU_DEVICE),
            "bytes_total": sum(known), "bytes_max": max(known) if known else 0,
            "unknown_size": len(moves) - len(known)}
