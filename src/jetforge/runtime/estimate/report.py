"""Render an :class:`~jetforge.runtime.estimate.result.Estimate`: terminal table, JSON, and a PNG plot."""

from pathlib import Path
from typing import Any, Dict, List

from jetforge.runtime.estimate.model import DLA, GPU
from jetforge.runtime.estimate.result import Estimate
from jetforge.table import format_table as text_table

DEFAULT_ROWS = 25


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _mb(value: float) -> str:
    return "%.2f" % (value / 1e6)


def format_table(est: Estimate, all_layers: bool = False) -> str:
    """Per-layer table of the first batch size, transitions, per-batch summary, memory, warnings."""
    first = est.batches[0]
    total = first.latency_s or 1.0
    rows: List[List[Any]] = []
    ranked = [k for k in first.kernels if k.kernel.category != "elided"]
    if not all_layers:
        ranked = sorted(ranked, key=lambda k: -k.time_s)[:DEFAULT_ROWS]
    for k in ranked:
        kernel = k.kernel
        rows.append([kernel.head.index, _short(kernel.name, 44), "+".join(kernel.ops)[:28], kernel.device,
                     kernel.category, "%.3f" % (kernel.flops / 1e9), _mb(k.bytes), k.bound, "%.1f" % (k.time_s * 1e6),
                     "%.1f" % (100.0 * k.time_s / total)])
    mode = est.rates.power_mode or "no power mode"
    head = ["estimate: %s on %s (%s), %s%s, %s fusion, efficiency set %r" % (
        Path(est.model).name, est.target, mode, est.precision.upper(),
        ", DLA core %d" % est.dla_core if est.dla_core is not None else ", GPU only", est.fusion, est.efficiency.name),
        "a roofline model, not a measurement; per layer at batch %d (%s)" % (
            first.batch, "all kernels" if all_layers else "the %d slowest kernels; --all-layers for every one"
            % min(DEFAULT_ROWS, len(ranked)))]
    headers = ["#", "layer", "ops", "device", "type", "GFLOP", "MB", "bound", "us", "%"]
    parts = ["\n".join(head), text_table(headers, rows)]
    if first.transitions:
        parts.append("GPU<->DLA transitions at batch %d (reformat + copy each):\n" % first.batch + text_table(
            ["tensor", "from", "to", "KB", "us"],
            [[_short(t.tensor, 50), t.source, t.dest, "%.1f" % (t.bytes / 1e3), "%.1f" % (t.time_s * 1e6)]
             for t in first.transitions]))
    batch_rows = [[b.batch, "%.3f" % (b.latency_s * 1e3), "%.1f" % b.throughput, "%.3f" % (b.device_s(GPU) * 1e3),
                   "%.3f" % ((b.device_s(DLA) + b.subgraph_s) * 1e3), "%.3f" % (b.transitions_s * 1e3),
                   b.dla_subgraphs, _mb(b.memory.weights), _mb(b.memory.activations_peak),
                   _mb(b.memory.workspace_lower_bound), _mb(b.memory.io_bindings)] for b in est.batches]
    parts.append(text_table(["batch", "latency ms", "throughput/s", "GPU ms", "DLA ms", "transitions ms",
                             "DLA loadables", "weights MB", "peak activations MB", "workspace >= MB", "I/O MB"],
                            batch_rows))
    parts.append("memory: weights at %s; peak activations from tensor liveness in topological order; workspace is a "
                 "computed lower bound (largest reformat buffer), TensorRT may use more" % est.precision.upper())
    if est.dla_fallback:
        parts.append("GPU fallback layers (dla-check): " + ", ".join(est.dla_fallback[:12]) +
                     (" ..." if len(est.dla_fallback) > 12 else ""))
    if est.validation:
        parts.append("validation that applies to this estimate (efficiency set %r):\n" % est.efficiency.name
                     + "\n".join("  " + v for v in est.validation))
    parts.append("\n".join("warning: " + w for w in est.warnings))
    if est.notes:
        parts.append("\n".join("note: " + n for n in est.notes))
    return "\n\n".join(p for p in parts if p)


def to_json(est: Estimate) -> Dict[str, Any]:
    return est.to_dict(layers=True)


def write_plot(est: Estimate, path: str) -> Path:
    """Per-layer time of the first batch (slowest 30 kernels, by device) and throughput/latency per batch."""
    from jetforge.fileio import write_png_atomic
    from jetforge.optional import require

    matplotlib = require("matplotlib", "the estimate plot (--plot)")
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    first = est.batches[0]
    kernels = sorted([k for k in first.kernels if k.kernel.category != "elided"], key=lambda k: -k.time_s)[:30]
    colors = {GPU: "#4c72b0", DLA: "#dd8452"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    try:
        labels = [_short(k.kernel.name, 36) for k in kernels][::-1]
        values = [k.time_s * 1e6 for k in kernels][::-1]
        ax1.barh(range(len(values)), values, color=[colors[k.kernel.device] for k in kernels][::-1])
        if first.transitions:
            ax1.barh([len(values)], [first.transitions_s * 1e6], color="#c44e52")
            labels.append("GPU<->DLA transitions (%d)" % len(first.transitions))
        ax1.set_yticks(range(len(labels)))
        ax1.set_yticklabels(labels, fontsize=6)
        ax1.set_xlabel("estimated time (us), batch %d; blue GPU, orange DLA" % first.batch)
        batches = [b.batch for b in est.batches]
        ax2.plot(batches, [b.throughput for b in est.batches], "o-", color="#4c72b0", label="throughput")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("batch")
        ax2.set_ylabel("inferences / s (estimated)")
        twin = ax2.twinx()
        twin.plot(batches, [b.latency_s * 1e3 for b in est.batches], "s--", color="#55a868", label="latency")
        twin.set_ylabel("latency ms (estimated)")
        ax2.set_xticks(batches)
        ax2.set_xticklabels([str(b) for b in batches])
        handles = ax2.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        ax2.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left")
        fig.suptitle("%s on %s (%s), %s%s - roofline estimate, efficiency set %r" % (
            Path(est.model).name, est.target, est.rates.power_mode or "-", est.precision.upper(),
            ", DLA core %d" % est.dla_core if est.dla_core is not None else "", est.efficiency.name), fontsize=9)
        return write_png_atomic(fig, path, dpi=100)
    finally:
        plt.close(fig)


__all__ = ["format_table", "to_json", "write_plot"]
