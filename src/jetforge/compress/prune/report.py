"""The pruning report: per-layer channels, parameters and MACs before/after, measured latency; table, JSON, plot."""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from jetforge.fileio import PathLike, write_json_atomic, write_png_atomic, write_text_atomic
from jetforge.compress.prune.flops import METHOD, OpCount, layer_macs_outside

log = logging.getLogger(__name__)


def layer_snapshot(model: nn.Module, names: Sequence[str]) -> Dict[str, Dict[str, int]]:
    """Channels and own parameters of the named layers (taken before and after pruning)."""
    out = {}
    for name in names:
        m = model.get_submodule(name)
        if isinstance(m, nn.Linear):
            cin, cout = m.in_features, m.out_features
        else:
            cin, cout = int(getattr(m, "in_channels", 0)), int(getattr(m, "out_channels", 0))
        out[name] = {"type": type(m).__name__, "in": cin, "out": cout,
                     "params": sum(p.numel() for p in m.parameters(recurse=False))}
    return out


@dataclass
class PruneReport:
    """Everything a user needs to judge a pruning: what changed per layer, in total, and how fast it runs."""

    architecture: str
    settings: Dict[str, Any]
    before: OpCount
    after: OpCount
    layers_before: Dict[str, Dict[str, int]]
    layers_after: Dict[str, Dict[str, int]]
    protected: List[Dict[str, str]]
    latency_ms_before: Optional[float] = None
    latency_ms_after: Optional[float] = None
    latency_backend: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    def rows(self) -> List[Dict[str, Any]]:
        rows = []
        for name, b in self.layers_before.items():
            a = self.layers_after.get(name, b)
            rows.append({"layer": name, "type": b["type"], "in_before": b["in"], "in_after": a["in"],
                         "out_before": b["out"], "out_after": a["out"], "params_before": b["params"],
                         "params_after": a["params"], "macs_before": self.before.per_layer.get(name, 0),
                         "macs_after": self.after.per_layer.get(name, 0)})
        return rows

    def outside_rows(self) -> List[Dict[str, Any]]:
        """Counted MACs of modules that are not pruned layers (attention, functional ops), before and after."""
        before = layer_macs_outside(self.before, list(self.layers_before))
        after = layer_macs_outside(self.after, list(self.layers_before))
        return [{"module": name or "<model>", "macs_before": before.get(name, 0), "macs_after": after.get(name, 0)}
                for name in sorted(set(before) | set(after))]

    def to_dict(self) -> Dict[str, Any]:
        speedup = (self.latency_ms_before / self.latency_ms_after
                   if self.latency_ms_before and self.latency_ms_after else None)
        outside = self.outside_rows()
        return {
            "architecture": self.architecture, "settings": self.settings,
            "counting_method": METHOD,
            "totals": {"params_before": self.before.params, "params_after": self.after.params,
                       "macs_before": self.before.macs, "macs_after": self.after.macs,
                       "flops_before": self.before.flops, "flops_after": self.after.flops,
                       "flops_reduction": self.before.macs / max(1, self.after.macs),
                       "params_reduction": self.before.params / max(1, self.after.params),
                       "macs_outside_layers_before": sum(r["macs_before"] for r in outside),
                       "macs_outside_layers_after": sum(r["macs_after"] for r in outside)},
            "macs_by_op": {"before": dict(self.before.per_op), "after": dict(self.after.per_op)},
            "macs_outside_layers": outside,
            "latency": {"backend": self.latency_backend, "ms_before": self.latency_ms_before,
                        "ms_after": self.latency_ms_after, "speedup": speedup},
            "protected": self.protected, "layers": self.rows(), **self.extra,
        }

    def to_table(self) -> str:
        headers = ["layer", "type", "in", "out", "params", "MMACs"]
        body = []
        for r in self.rows():
            body.append([r["layer"], r["type"], _arrow(r["in_before"], r["in_after"]),
                         _arrow(r["out_before"], r["out_after"]), _arrow(r["params_before"], r["params_after"]),
                         _arrow(round(r["macs_before"] / 1e6, 2), round(r["macs_after"] / 1e6, 2))])
        d = self.to_dict()["totals"]
        lines = [_format_table(headers, body), "",
                 "parameters %d -> %d (%.2fx fewer)" % (self.before.params, self.after.params, d["params_reduction"]),
                 "MACs       %d -> %d (%.2fx fewer; FLOPs = 2 x MACs)" % (self.before.macs, self.after.macs,
                                                                        d["flops_reduction"]),
                 "counted:   " + METHOD]
        if d["macs_outside_layers_before"]:
            lines.insert(-1, "           of which %d -> %d outside the pruned layers (attention, functional ops, "
                             "untraced layers: %d modules)" % (d["macs_outside_layers_before"],
                                                               d["macs_outside_layers_after"],
                                                               len(self.outside_rows())))
        if self.latency_ms_before and self.latency_ms_after:
            lines.append("latency    %.2f ms -> %.2f ms (%.2fx faster, %s)" % (
                self.latency_ms_before, self.latency_ms_after, self.latency_ms_before / self.latency_ms_after,
                self.latency_backend))
        lines.extend(self._checks())
        for p in self.protected:
            lines.append("protected  %s (%s): %s" % (p["where"], p["op"], p["reason"]))
        return "\n".join(lines)

    def _checks(self) -> List[str]:
        """The goal reached, the modes analysed and the agreement with the original, as table lines."""
        lines = []
        goal = self.extra.get("goal")
        if goal and "within_tolerance" in goal:
            lines.append("goal       %s %.2fx: %.2fx achieved (%s)" % (
                goal["name"], goal["value"], goal["achieved"],
                "within %d%%" % round(100 * goal["tolerance"]) if goal["within_tolerance"] else
                "OVERSHOT by more than %d%%: channels go in whole groups here" % round(100 * goal["tolerance"])))
        modes = self.extra.get("traced_modes")
        if modes:
            lines.append("analysed   eval mode: %s; train mode: %s" % (modes.get("eval"), modes.get("train")))
        agreement = self.extra.get("agreement")
        if agreement and agreement.get("measured"):
            lines.append("agreement  top-1 %.2f with the original on %d real images (%s); most common answer %r "
                         "on %.0f%%%s" % (agreement["top1_agreement"], agreement["samples"], agreement["source"],
                                          agreement["most_common"], 100 * agreement["most_common_share"],
                                          "; WARNING: fine-tune before deploying" if agreement["warning"] else ""))
        elif agreement:
            lines.append("agreement  %s" % agreement.get("reason", "not measured"))
        return lines

    def save(self, directory: PathLike, stem: str = "prune_report", plot: bool = True) -> Dict[str, Path]:
        d = Path(directory)
        out = {"json": write_json_atomic(d / (stem + ".json"), self.to_dict()),
               "table": write_text_atomic(d / (stem + ".txt"), self.to_table() + "\n")}
        if plot:
            path = self.plot(d / (stem + ".png"))
            if path is not None:
                out["plot"] = path
        return out

    def plot(self, path: PathLike) -> Optional[Path]:
        """Output channels per layer before/after as a bar chart (PNG); None if matplotlib is missing."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            log.warning("matplotlib is not installed; no plot written (pip install matplotlib)")
            return None
        rows = self.rows()
        x = np.arange(len(rows))
        fig, ax = plt.subplots(figsize=(max(6.0, 0.12 * len(rows) + 2), 4.0))
        ax.bar(x, [r["out_before"] for r in rows], color="#bbbbbb", label="before")
        ax.bar(x, [r["out_after"] for r in rows], color="#2a7ab9", label="after")
        ax.set_xlabel("layer (execution order)")
        ax.set_ylabel("output channels")
        t = self.to_dict()["totals"]
        ax.set_title("%s: %.2fx fewer MACs, %.2fx fewer parameters" % (self.architecture, t["flops_reduction"],
                                                                      t["params_reduction"]))
        ax.legend()
        try:
            return write_png_atomic(fig, path, dpi=100)
        finally:
            plt.close(fig)


def _arrow(a: Any, b: Any) -> str:
    return str(a) if a == b else "%s -> %s" % (a, b)


def _format_table(headers: List[str], rows: List[List[Any]]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ort_latency(model: nn.Module, input_shape: Sequence[int], *, threads: int = 1, runs: int = 20,
                warmup: int = 3) -> float:
    """Median latency in milliseconds of ``model`` exported to ONNX and run in CPU ONNX Runtime.

    The measurement is of the exported graph, as it will be deployed, not of eager PyTorch.
    """
    from jetforge.compress.export import export_onnx
    from jetforge.runtime.session import open_session

    with tempfile.TemporaryDirectory(prefix="jetforge-prune-") as tmp:
        path = Path(tmp) / "model.onnx"
        was_training = model.training
        with torch.no_grad():
            out = model.eval()(torch.zeros(tuple(input_shape)))
        model.train(was_training)
        n_out = 1 if isinstance(out, torch.Tensor) else len(out)
        names = "output" if n_out == 1 else tuple("output%d" % i for i in range(n_out))  # detectors: several
        export_onnx(model, path, input_shape, task="other", dynamic_batch=False, output_name=names)
        x = np.random.default_rng(0).standard_normal(tuple(input_shape)).astype(np.float32)
        with open_session(path, threads=threads) as s:
            name = s.inputs[0].name
            for _ in range(warmup):
                s.infer({name: x})
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                s.infer({name: x})
                times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)
