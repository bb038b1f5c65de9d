"""The comparisons of ``jetforge board-check``: engine outputs against jetforge's references, TensorRT's layer
placement against dla-check's prediction, measured latency against the estimate.

Acceptance thresholds (a check "passes" when every one holds; the numbers are reported either way):

* outputs: the signal-to-quantisation-noise ratio of the engine's outputs against the reference,
  ``10 log10(sum ref^2 / sum (out - ref)^2)``; FP16 engines against FP32 need >= :data:`FP16_MIN_SQNR_DB`
  (FP16 rounding alone gives ~60 dB; 40 dB leaves room for kernel differences); INT8 engines against
  jetforge's *simulated* INT8 need >= :data:`INT8_MIN_SQNR_DB` (same scales, same rounding rules: the
  simulation and TensorRT differ only in accumulation order and fused epilogues), and for a
  classifier top-1 agreement with the simulated INT8 of at least :data:`INT8_MIN_TOP1` (a
  sample whose top two classes are within rounding of each other may flip);
* placement: every layer dla-check predicted for the DLA that TensorRT put on the GPU (or the reverse)
  is listed; the check fails when they disagree, since the prediction is then wrong for this board;
* latency: measured / estimated is reported; it is information for the estimator, not a pass/fail.
"""

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

FP16_MIN_SQNR_DB = 40.0
INT8_MIN_SQNR_DB = 25.0
INT8_MIN_TOP1 = 0.9


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    ref = np.asarray(reference, np.float64)
    noise = float(np.sum((np.asarray(value, np.float64) - ref) ** 2))
    signal = float(np.sum(ref ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare_outputs(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                    task: str) -> Dict[str, Any]:
    """Per-output max |diff|, SQNR, and (classifier) top-1 agreement of ``outputs`` with ``reference``."""
    per_output: Dict[str, Any] = {}
    for name, ref in reference.items():
        if name not in outputs:
            per_output[name] = {"missing": True}
            continue
        got = np.asarray(outputs[name], np.float64).reshape(np.shape(ref))
        per_output[name] = {"max_abs_diff": float(np.max(np.abs(got - ref))),
                            "reference_scale": float(np.max(np.abs(ref))), "sqnr_db": sqnr_db(ref, got)}
    result: Dict[str, Any] = {"outputs": per_output,
                              "sqnr_db": min((o.get("sqnr_db", -math.inf) for o in per_output.values()),
                                             default=-math.inf)}
    if task == "classify" and reference:
        first = next(iter(reference))
        if first in outputs:
            ref = np.asarray(reference[first]).reshape(len(reference[first]), -1)
            got = np.asarray(outputs[first]).reshape(len(ref), -1)
            result["top1_agreement"] = float(np.mean(np.argmax(ref, 1) == np.argmax(got, 1)))
    return result


def output_verdict(precision: str, vs_fp32: Dict[str, Any], vs_int8: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Pass/fail of one engine's outputs with the thresholds of the module docstring."""
    reasons: List[str] = []
    if precision == "int8" and vs_int8 is not None:
        if vs_int8["sqnr_db"] < INT8_MIN_SQNR_DB:
            reasons.append("SQNR against simulated INT8 %.1f dB < %.0f dB" % (vs_int8["sqnr_db"], INT8_MIN_SQNR_DB))
        if vs_int8.get("top1_agreement", 1.0) < INT8_MIN_TOP1:
            reasons.append("top-1 agreement with simulated INT8 %.3f < %.2f" % (vs_int8["top1_agreement"], INT8_MIN_TOP1))
    elif precision == "int8":
        reasons.append("no simulated INT8 reference in the bundle: INT8 not checked (bundle create --samples with "
                       "--calib or --qdq)")
    else:
        if vs_fp32["sqnr_db"] < FP16_MIN_SQNR_DB:
            reasons.append("SQNR against FP32 %.1f dB < %.0f dB" % (vs_fp32["sqnr_db"], FP16_MIN_SQNR_DB))
        if vs_fp32.get("top1_agreement", 1.0) < 1.0:
            reasons.append("top-1 differs from FP32 on %.0f%% of samples" % (100 * (1 - vs_fp32["top1_agreement"])))
    return {"ok": not reasons, "reasons": reasons}


def _placed_devices(inspector: Mapping[str, Any]) -> Dict[str, str]:
    """ONNX node name -> device, from the inspector's layers (a fused layer is named 'a + b + c')."""
    devices: Dict[str, str] = {}
    for layer in inspector.get("layers", []):
        for part in str(layer.get("name", "")).split(" + "):
            part = part.strip()
            if part:
                devices.setdefault(part, str(layer.get("device", "GPU")))
    return devices


def compare_placement(predicted: Sequence[Any], inspector: Mapping[str, Any]) -> Dict[str, Any]:
    """dla-check's per-node prediction (``LayerResult``) against the device TensorRT reports for each node."""
    if not inspector.get("available", False):
        return {"available": False, "reason": inspector.get("reason", "the build report has no inspector output")}
    placed = _placed_devices(inspector)
    agree, disagree, unmatched = 0, [], []
    for layer in predicted:
        if layer.device not in ("DLA", "GPU"):
            continue  # folded at build time: TensorRT has no layer for it
        got = placed.get(layer.name)
        if got is None:
            unmatched.append(layer.name)
        elif got == layer.device:
            agree += 1
        else:
            disagree.append({"layer": layer.name, "op": layer.onnx_op, "predicted": layer.device, "tensorrt": got,
                             "rule": ",".join(layer.rule_ids), "reason": layer.reason})
    return {"available": True, "agree": agree, "disagree": disagree, "unmatched": unmatched,
            "ok": not disagree, "tensorrt_summary": inspector.get("summary")}


def latency_comparison(measured_ms: Optional[float], estimated_ms: Optional[float]) -> Dict[str, Any]:
    if measured_ms is None or estimated_ms is None or estimated_ms <= 0:
        return {"measured_ms": measured_ms, "estimated_ms": estimated_ms, "ratio": None}
    return {"measured_ms": measured_ms, "estimated_ms": estimated_ms, "ratio": measured_ms / estimated_ms}


def render_text(report: Mapping[str, Any]) -> str:
    """The readable half of the report (the JSON holds everything)."""
    board = report["board"]
    lines = ["jetforge board-check: bundle %s (%s) on %s (%s), TensorRT %s, JetPack %s, power mode %s" % (
        report["bundle"]["name"], report["bundle"]["hash"][:12], board.get("target"), board.get("device_name"),
        board.get("tensorrt_installed") or "not installed", board.get("jetpack") or "?", report.get("power_mode") or "?"),
        "status: %s%s" % (report["status"], " (%s)" % report["message"] if report.get("message") else "")]
    for note in report.get("notes", []):
        lines.append("note: %s" % note)
    header = "%-12s %-6s %9s %9s %8s %9s %9s %7s %s" % ("engine", "prec", "SQNRfp32", "SQNRint8", "top1", "meas ms",
                                                       "est ms", "ratio", "placement / verdict")
    if report.get("engines"):
        lines += ["", header, "-" * len(header)]
    for e in report.get("engines", []):
        fp32 = e.get("vs_fp32") or {}
        int8 = e.get("vs_int8_simulated") or {}
        lat = e.get("latency") or {}
        placement = e.get("placement") or {}
        place = ("%d agree, %d differ" % (placement["agree"], len(placement["disagree"]))
                 if placement.get("available") else "n/a")
        top1 = int8.get("top1_agreement", fp32.get("top1_agreement"))
        lines.append("%-12s %-6s %9s %9s %8s %9s %9s %7s %s; %s" % (
            e["name"], e["precision"], _db(fp32.get("sqnr_db")), _db(int8.get("sqnr_db")),
            "-" if top1 is None else "%.3f" % top1, _ms(lat.get("measured_ms")), _ms(lat.get("estimated_ms")),
            "-" if lat.get("ratio") is None else "%.2f" % lat["ratio"], place,
            _verdict(e)))
        for d in placement.get("disagree", [])[:10]:
            lines.append("    %s (%s): dla-check said %s, TensorRT put it on %s" % (d["layer"], d["op"], d["predicted"],
                                                                                    d["tensorrt"]))
        power = (e.get("tegrastats") or {}).get("total_power_mw")
        if power:
            lines.append("    power %.0f mW mean, %.0f mW peak (tegrastats)" % (power["mean"], power["max"]))
    return "\n".join(lines) + "\n"


def _verdict(engine: Mapping[str, Any]) -> str:
    if not engine.get("built") and not engine.get("reasons"):
        return "not built (no TensorRT here)"
    return "PASS" if engine.get("ok") else "FAIL: " + "; ".join(engine.get("reasons", []))


def _db(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) and value > 0 else "%.1f" % value


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else "%.3f" % value


__all__ = ["FP16_MIN_SQNR_DB", "INT8_MIN_SQNR_DB", "INT8_MIN_TOP1", "compare_outputs", "compare_placement",
           "latency_comparison", "output_verdict", "render_text", "sqnr_db"]
