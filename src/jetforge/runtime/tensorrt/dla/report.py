"""Render a :class:`~jetforge.runtime.tensorrt.dla.analyze.DlaAnalysis` as a terminal table or JSON."""

import json
from typing import Any, Dict, List

from jetforge.runtime.tensorrt.dla.analyze import FOLDED, DlaAnalysis
from jetforge.table import format_table as text_table


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(analysis: DlaAnalysis, all_layers: bool = False, width: int = 70) -> str:
    """Per-layer table (folded layers hidden unless ``all_layers``) followed by the summary."""
    rows = []
    for layer in analysis.layers:
        if layer.device == FOLDED and not all_layers:
            continue
        mark = "?" if layer.uncertain else ""
        rows.append([layer.index, _short(layer.name, 40), layer.onnx_op, layer.device + mark,
                     "" if layer.subgraph is None else layer.subgraph,
                     ",".join(layer.rule_ids), _short(layer.reason, width)])
    parts = [text_table(["#", "layer", "op", "device", "sub", "rule", "reason"], rows), "", format_summary(analysis)]
    return "\n".join(parts)


def format_summary(analysis: DlaAnalysis) -> str:
    d = analysis.to_dict()["summary"]
    lines = [
        "model %s on DLA %d.0, TensorRT %s, %s%s" % (analysis.model, analysis.dla_version, analysis.tensorrt_version,
                                                   analysis.precision,
                                                   " (target %s)" % analysis.target if analysis.target else ""),
        "layers: %d on DLA, %d GPU fallback, %d folded at build time"
        % (d["dla_layers"], d["gpu_layers"], d["folded"]),
        "DLA subgraphs: %d (limit %d loadables per core%s)"
        % (d["dla_subgraphs"], d["loadables_per_core"], ": EXCEEDED" if d["exceeds_loadables"] else ""),
        "FLOPs on DLA: %.1f%% of %.3f GFLOPs" % (100.0 * analysis.dla_flops_share, analysis.flops_total / 1e9),
    ]
    lines.extend(transition_lines(analysis))
    if analysis.gpu_layers:
        lines.append("GPU fallback: " + ", ".join("%s (%s)" % (l.name, l.onnx_op) for l in analysis.gpu_layers[:20])
                     + (" ..." if len(analysis.gpu_layers) > 20 else ""))
    if d["uncertain_layers"]:
        lines.append("? = the verdict rests on a rule the reference marks uncertain (%d layers); verify on a board "
                     "with config.can_run_on_DLA / the engine inspector" % d["uncertain_layers"])
    for text in analysis.patterns:
        lines.append("pattern: " + text)
    for name, finding in analysis.warnings[:10]:
        lines.append("warning: %s: %s (%s)" % (name, finding.message, finding.suggestion))
    for text in analysis.suggestions:
        lines.append("suggestion: " + text)
    for text in analysis.notes:
        lines.append("note: " + text)
    return "\n".join(lines)


def _size(n: float) -> str:
    return "%.2f MiB" % (n / 1048576.0) if n >= 1048576 else "%.1f KiB" % (n / 1024.0)


def transition_lines(analysis: DlaAnalysis, shown: int = 6) -> List[str]:
    """The GPU<->DLA transitions: count and bytes, then the largest ones (each a reformat + hand-off)."""
    t = analysis.to_dict()["summary"]["transitions"]
    if not t["count"]:
        return ["GPU<->DLA transitions: none"]
    lines = ["GPU<->DLA transitions: %d (%d to DLA, %d to GPU), %s moved per inference at these shapes, "
             "largest %s" % (t["count"], t["to_dla"], t["to_gpu"], _size(t["bytes_total"]), _size(t["bytes_max"]))]
    biggest = sorted(analysis.transitions, key=lambda m: -(m.bytes or 0))[:shown]
    for move in biggest:
        shape = "x".join(str(d) for d in move.shape) if move.shape else "?"
        lines.append("  transition %s -> %s: %s (%s, %s)" % (move.source, move.dest, _short(move.tensor, 48), shape,
                                                            _size(move.bytes) if move.bytes is not None else "?"))
    if len(analysis.transitions) > shown:
        lines.append("  ... %d more (--json lists every transition)" % (len(analysis.transitions) - shown))
    return lines


def to_json(analysis: DlaAnalysis) -> Dict[str, Any]:
    return analysis.to_dict()


def dumps(analysis: DlaAnalysis) -> str:
    return json.dumps(analysis.to_dict(), indent=2, default=str)
