"""Where the latency-aware search gets its latencies: the estimator on the board, a measurement, or the CPU.

``--latency-source``:

* ``estimate`` (the default when ``--target`` names a board): each candidate is timed by ``jetforge estimate``'s
  own functions (:func:`jetforge.runtime.estimate.model.place` and ``time_placed``) on that board, at its
  precision, with the shipped ``tensorrt`` set -- the cuts are ranked by what they save *on the board*.  The
  model is exported to ONNX once; a candidate is that graph with its convolution / GEMM / BatchNorm weights
  resized to the pruned module's (:func:`resized_graph`: the estimate reads shapes, never values), so a candidate
  costs a shape inference, not a second export.  A graph it cannot resize (a channel-sized constant outside
  those layers) is exported again, the slow path, and counted.
* ``measured``: a latency table measured elsewhere (``--latency-table``: the ``latency_table`` of a
  ``prune_report.json`` written by a run with ``measured`` on the board or GPU), or, with a local CUDA GPU,
  jetforge's ``TorchSession`` with its CUDA graph (FP16, channels-last), median of bursts.
* ``cpu``: ONNX Runtime on this machine's CPU (:func:`~jetforge.compress.prune.report.ort_latency`).
"""

import copy
import io
import logging
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from jetforge.errors import ConfigError

log = logging.getLogger(__name__)

SOURCES = ("estimate", "measured", "cpu")


def default_source(target: Optional[str]) -> str:
    """``estimate`` when ``target`` names a Jetson board profile, else ``cpu`` (today's behaviour)."""
    if not target:
        return "cpu"
    from jetforge.targets import get_target

    return "estimate" if get_target(target).kind == "jetson" else "cpu"


def _module_path(node_name: str) -> str:
    """The qualified module name of an exported node (``/layer1/layer1.0/conv1/Conv`` -> ``layer1.0.conv1``)."""
    segs: List[str] = []
    for part in [p for p in node_name.split("/")[:-1] if p]:
        if segs and part.startswith(segs[-1] + "."):
            segs[-1] = part
        else:
            segs.append(part)
    return ".".join(segs)


def _export(model: nn.Module, shape: Sequence[int]) -> Any:
    import warnings

    import onnx

    buf = io.BytesIO()
    was = model.training
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.zeros(tuple(shape)),), buf, input_names=["input"], opset_version=17,
                          do_constant_folding=True, dynamo=False)
    model.train(was)
    return onnx.load_from_string(buf.getvalue())


def _dims(node: Any, slot: int, module: nn.Module) -> Optional[List[int]]:
    """The dims input ``slot`` of ``node`` has for the (pruned) ``module``, or None if the rule does not know."""
    if node.op_type in ("Conv", "ConvTranspose") and isinstance(module, nn.modules.conv._ConvNd):
        return list(module.weight.shape) if slot == 1 else [int(module.weight.shape[0] if node.op_type == "Conv"
                                                                 else module.weight.shape[1] * module.groups)]
    if node.op_type == "BatchNormalization" and isinstance(module, nn.modules.batchnorm._BatchNorm):
        return [int(module.num_features)]
    if node.op_type == "Gemm" and isinstance(module, nn.Linear):
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        w = list(module.weight.shape)
        return (w if trans_b else w[::-1]) if slot == 1 else [w[0]]
    return None


def resized_graph(base: Any, model: nn.Module) -> Optional[Any]:
    """``base`` (the unpruned export) with every weight resized to ``model``'s modules; None where a float
    initializer with a channel axis is not covered by the rules (the caller exports again)."""
    from onnx import helper, numpy_helper

    import numpy as np

    modules = dict(model.named_modules())
    proto = copy.deepcopy(base)
    inits = {i.name: i for i in proto.graph.initializer}
    for node in proto.graph.node:
        module = modules.get(_module_path(node.name))
        for slot, name in enumerate(node.input):
            init = inits.get(name)
            if init is None or slot == 0 or len(init.dims) == 0 or int(np.prod(init.dims)) <= 1:
                continue
            dims = _dims(node, slot, module) if module is not None else None
            if dims is None:
                return None
            if list(init.dims) != dims:
                init.CopyFrom(numpy_helper.from_array(np.zeros(dims, dtype=np.float32), name))
        if node.op_type == "Conv" and module is not None and isinstance(module, nn.Conv2d):
            for attr in node.attribute:
                if attr.name == "group":
                    attr.CopyFrom(helper.make_attribute("group", int(module.groups)))
    del proto.graph.value_info[:]
    return proto


class EstimateLatency:
    """``latency_fn`` for the search: ms the estimator gives ``model`` on ``target`` at ``precision``."""

    def __init__(self, model: nn.Module, shape: Sequence[int], target: str, precision: Optional[str]) -> None:
        from jetforge.runtime.estimate.efficiency import efficiency_set
        from jetforge.runtime.estimate.rates import target_rates
        from jetforge.targets import get_target

        self.target = get_target(target)
        self.precision = precision if precision not in (None, "best") else ("int8" if self.target.supports_precision("int8", "gpu") else "fp16")
        self.rates = target_rates(self.target, self.precision)
        self.eff = efficiency_set("tensorrt")
        self.shape = [int(d) for d in shape]
        self.base = _export(model, self.shape)
        self.exports = 0
        self.calls = 0

    def __call__(self, model: nn.Module) -> float:
        from jetforge.runtime.estimate.model import place, time_placed

        self.calls += 1
        proto = resized_graph(self.base, model)
        if proto is None:
            self.exports += 1
            proto = _export(model, self.shape)
        placed = place(proto, self.shape[0], self.precision, target=self.target, fusion=self.eff.fusion)
        return time_placed(placed, self.rates, self.eff).latency_s * 1e3

    def describe(self) -> str:
        return "jetforge estimate on %s, %s, efficiency set tensorrt (a roofline estimate, not a measurement)" % (
            self.target.name, self.precision.upper())


def cuda_graph_latency(shape: Sequence[int], reps: int = 5, target_ms: float = 20.0) -> Callable[[nn.Module], float]:
    """``latency_fn`` on this machine's CUDA GPU: jetforge's TorchSession (FP16, channels-last, CUDA graph)."""
    from jetforge.runtime.session.torch_backend import TorchSession

    def fn(model: nn.Module) -> float:
        m = copy.deepcopy(model).eval()
        session = TorchSession.from_module(m, input_shapes={"input": [int(d) for d in shape]}, device="cuda",
                                           dtype="fp16", channels_last=len(shape) == 4, cuda_graph=True, warmup=3,
                                           max_graphs=1)
        x = torch.randn(tuple(shape), device="cuda", dtype=torch.float16)
        if len(shape) == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        session.infer_tensors({"input": x})
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        session.infer_tensors({"input": x})
        torch.cuda.synchronize()
        n = max(3, min(200, int(target_ms / max(1e-3, (time.perf_counter() - t0) * 1e3))))
        runs = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                session.infer_tensors({"input": x})
            end.record()
            end.synchronize()
            runs.append(start.elapsed_time(end) / n)
        session.close()
        return statistics.median(runs)
    return fn


def read_table(path: str) -> Any:
    """A :class:`~jetforge.compress.prune.latency.LatencyTable` from a JSON file: a ``prune_report.json`` (its
    ``latency_table``) or the table itself."""
    import json

    from jetforge.compress.prune.latency import LatencyTable
    from jetforge.fileio import require_file

    file = require_file(path, "latency table", hint="the prune_report.json of a jetforge prune --latency-aware "
                                                    "--latency-source measured run on the board or GPU")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ConfigError("%s is not JSON: %s" % (path, err), hint="pass prune_report.json as written") from None
    table = (data.get("extra") or {}).get("latency_table") or data.get("latency_table") or data
    return LatencyTable.from_dict(table, where=path)


def latency_backend(source: str, model: nn.Module, shape: Sequence[int], target: Optional[str],
                    precision: Optional[str]) -> Dict[str, Any]:
    """``{"fn": latency_fn or None, "backend": description}`` for ``source`` (see the module docstring)."""
    if source == "estimate":
        if not target:
            raise ConfigError("--latency-source estimate needs --target (the board to estimate on)",
                              hint="e.g. --target orin-nx-16gb, or --latency-source cpu")
        fn = EstimateLatency(model, shape, target, precision)
        return {"fn": fn, "backend": fn.describe()}
    if source == "measured":
        if not torch.cuda.is_available():
            raise ConfigError("--latency-source measured needs a local CUDA GPU or --latency-table FILE.json",
                              hint="run the prune on the board (or a GPU machine) with --latency-source measured, "
                                   "then pass its prune_report.json here with --latency-table")
        return {"fn": cuda_graph_latency(shape), "backend": "CUDA GPU %s, TorchSession FP16 channels-last CUDA graph, "
                                                            "median of 5 bursts" % torch.cuda.get_device_name(0)}
    return {"fn": None, "backend": "onnxruntime CPU, 1 thread, median of 20"}


def resolve(o: Any, model: nn.Module, shape: Sequence[int], table: Any, backend: str) -> Any:
    """(latency_fn or None for the CPU default, latency table or None, backend description) for options ``o``."""
    source = o.latency_source or default_source(o.target)
    if o.latency_table_file:
        if source != "measured":
            raise ConfigError("--latency-table goes with --latency-source measured, not %s" % source,
                              hint="add --latency-source measured")
        table = read_table(o.latency_table_file)
        source = "estimate" if o.target else "cpu"       # the report's before/after numbers, here
        log.info("latency table read from %s (%d groups)", o.latency_table_file, len(table.costs))
    if source == "cpu":
        return None, table, backend
    chosen = latency_backend(source, model, shape, o.target, o.latency_precision)
    log.info("latency-aware cuts ranked by: %s", chosen["backend"])
    return chosen["fn"], table, chosen["backend"]


__all__ = ["EstimateLatency", "SOURCES", "cuda_graph_latency", "default_source", "latency_backend", "read_table",
           "resized_graph", "resolve"]
