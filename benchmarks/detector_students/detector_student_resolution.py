"""What the H200 batch-32 goal (student >= 1.8x the teacher, FP16) would take: the input-resolution lever, estimated.

The H200 measurement (``results/nvidia-h200_2026-12-01_timing-cuts.json``: CUDA graphs, FP16,
batch 32) gave the 240 M-MAC jetforge student 1.35x the teacher, and untrained channel cuts up to
3x fewer MACs at most 1.38x: at 300x300 this network is bound by its ~100 small kernels, not by
MACs.  A smaller input shrinks every kernel's work at once.  This script asks jetforge's roofline
estimator (``jetforge.runtime.estimate``, TensorRT fusion, FP16, the ``server-hopper-h200``
profile) what the students would give at 300/256/224/192 px, with the teacher at 300 px as the
baseline, and checks the estimator against the measurement at 300 px (same pair, same batch).

It is an **estimate** (not a measurement, and no student was trained at a lower resolution): the
estimator's held-out error elsewhere is in its own results (``benchmarks/estimator/results/``).
Weights do not enter a latency estimate, so the students are the recipe's jetforge prune at
``--macs-factor`` (default 2.5, the measured student's channel counts) and at 3.0, untrained.

    .venv/bin/python benchmarks/detector_students/detector_student_resolution.py      # ~3 min on the 2-core CPU (two prunes)

Writes ``benchmarks/detector_students/results/<device>_<date>_resolution-estimate.{json,txt,png}``.
"""

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import committed, result_path, use_checkout  # noqa: E402

use_checkout()

HERE = Path(__file__).resolve().parent
H200_TIMING = committed("detector_students", "nvidia-h200_2026-12-01_timing-cuts.json")
SIZES = (300, 256, 224, 192)
TARGET = "server-hopper-h200"


def export_body(model: Any, size: int, path: Path) -> None:
    """The convolutional body at ``size`` x ``size`` as ONNX (dynamic batch); no decode, no NMS."""
    import torch

    torch.onnx.export(model, torch.zeros(1, 3, size, size), str(path), input_names=["input"],
                      output_names=["box_encodings", "class_logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"input": {0: "n"}, "box_encodings": {0: "n"}, "class_logits": {0: "n"}})


def estimate_sizes(states: Dict[str, Any], folder: Path) -> Dict[str, Dict[str, Any]]:
    """``{model@size: {macs, ms at batch 1 and 32}}`` from the roofline estimate of each exported body."""
    from jetforge.compress.distill.detection_student import detector_from_state, model_macs
    from jetforge.runtime.estimate.result import estimate
    from jetforge.targets import get_target

    target = get_target(TARGET)
    rows: Dict[str, Dict[str, Any]] = {}
    for name, state in states.items():
        for size in (SIZES if name != "teacher" else (300,)):
            model = detector_from_state(state, size).eval()
            path = folder / ("%s_%d.onnx" % (name, size))
            export_body(model, size, path)
            est = estimate(str(path), target, "fp16", (1, 32))
            rows["%s@%d" % (name, size)] = {"model": name, "size": size, "macs": model_macs(model, size),
                                            "ms": {str(b.batch): 1e3 * b.latency_s for b in est.batches},
                                            "kernels": len(est.batches[-1].kernels)}
            print("%-14s %3d px %6.1f M MACs  b1 %.3f ms  b32 %.3f ms" % (
                name, size, rows["%s@%d" % (name, size)]["macs"] / 1e6, 1e3 * est.batches[0].latency_s,
                1e3 * est.batches[1].latency_s), flush=True)
    base = rows["teacher@300"]["ms"]
    for row in rows.values():
        row["speedup_vs_teacher300"] = {b: base[b] / ms for b, ms in row["ms"].items()}
    return rows


def students(macs_factors: List[float]) -> Dict[str, Any]:
    """The teacher's state and jetforge's untrained prunes of it (channel counts are all a latency needs)."""
    from jetforge.assets import asset_path
    from jetforge.compress.distill.detection_student import prune_detector
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef

    teacher = load_from_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    states = {"teacher": teacher.state_dict()}
    for factor in macs_factors:
        student = copy.deepcopy(teacher)
        prune_detector(student, flops_reduction=factor, latency_aware=False)
        states["jetforge_%.1fx" % factor] = student.state_dict()
    return states


def measured_check(rows: Dict[str, Dict[str, Any]], factor: float) -> Dict[str, Any]:
    """The estimator against the H200 measurement at 300 px, batch 32 (same prune, same pair)."""
    timing = json.loads(H200_TIMING.read_text())
    measured = timing["batch32"]["jetforge"]["speedup_vs_teacher"]
    estimated = rows["jetforge_%.1fx@300" % factor]["speedup_vs_teacher300"]["32"]
    return {"measured_b32_speedup": measured, "estimated_b32_speedup": estimated,
            "measured_method": timing["method"], "note": "measured: PyTorch CUDA graphs, FP16, on the H200; "
                                                        "estimated: TensorRT-fused roofline"}


def table(rows: Dict[str, Dict[str, Any]]) -> str:
    lines = ["| model | input | MACs | est. b32 ms | est. b32 speed-up vs teacher@300 | est. b1 speed-up |",
             "|---|---|---|---|---|---|"]
    for row in rows.values():
        lines.append("| %s | %d px | %.0f M | %.3f | %.2fx | %.2fx |" % (
            row["model"], row["size"], row["macs"] / 1e6, row["ms"]["32"], row["speedup_vs_teacher300"]["32"],
            row["speedup_vs_teacher300"]["1"]))
    return "\n".join(lines)


def plot(rows: Dict[str, Dict[str, Any]], check: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jetforge.fileio import write_png_atomic

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in sorted({r["model"] for r in rows.values()} - {"teacher"}):
        mine = sorted((r["size"], r["speedup_vs_teacher300"]["32"]) for r in rows.values() if r["model"] == name)
        ax.plot([s for s, _ in mine], [x for _, x in mine], "o-", label="%s student (estimate)" % name)
    ax.plot([300], [check["measured_b32_speedup"]], "k*", ms=12, label="measured on the H200 (CUDA graphs)")
    ax.axhline(1.8, ls="--", color="grey", label="goal 1.8x")
    ax.set_xlabel("student input size (px); teacher at 300 px")
    ax.set_ylabel("batch-32 FP16 speed-up vs the teacher")
    ax.set_title("SSDLite person students on the H200: the resolution lever (roofline estimate)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    write_png_atomic(fig, path, dpi=110)
    plt.close(fig)


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--macs-factors", type=float, nargs="+", default=[2.5, 3.0])
    p.add_argument("--out", default=str(result_path(__file__, "resolution-estimate", suffix="")),
                   help="results stem: .json, .txt, .png (default results/<device>_<date>_resolution-estimate)")
    args = p.parse_args(argv)
    from jetforge.fileio import write_json_atomic, write_text_atomic

    with tempfile.TemporaryDirectory() as tmp:
        rows = estimate_sizes(students(args.macs_factors), Path(tmp))
    check = measured_check(rows, args.macs_factors[0])
    result = {"target": TARGET, "precision": "fp16", "fusion": "tensorrt", "kind": "roofline estimate (not a "
              "measurement); students untrained (latency does not depend on weights); none trained at these sizes",
              "rows": rows, "check_at_300px": check}
    out = Path(args.out)
    write_json_atomic(out.with_suffix(".json"), result)
    text = table(rows) + "\nestimator vs H200 measurement at 300 px, batch 32: estimated %.2fx, measured %.2fx" % (
        check["estimated_b32_speedup"], check["measured_b32_speedup"])
    write_text_atomic(out.with_suffix(".txt"), text + "\n")
    plot(rows, check, out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
