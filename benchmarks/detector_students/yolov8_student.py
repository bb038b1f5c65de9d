"""The YOLOv8-layout person student (``recipes/distill_yolov8_person.yaml``) against the SSDLite port on the CPU.

For the port (exported here: ``export_detector``, 300x300, decoder ``ssd-tf``) and the student's ``student.onnx``
(decoder ``yolov8``):

1. **person AP** on the 94 held-out labelled frames (``src/jetforge/vision/data/people_boxes.json``) with the
   ``detection_ap`` metric's decoding (each model's registered decoder, score >= 0.01, 100 per frame, its own NMS
   threshold), AP@0.5 and AP@[.5:.95], and the paired bootstrap of student minus port (10000 resamples over frames,
   and over 10-frame blocks of one clip: the honest interval, neighbouring frames are correlated) -- the same
   numbers ``benchmarks/detector_students/detector_student.py`` gives the SSD students;
2. **latency**: ONNX Runtime, batch 1, 2 intra-op threads, the two models alternating run by run (median ms; the
   2-core machine is shared, so only the ratio means much);
3. the **ship rule** of the brief: the student is shown if its AP@0.5 is within 0.1 of the port's (point estimate),
   the block interval recorded beside it.

Writes ``results/<device>_<date>_yolov8-student.json`` (with the training run's ``result.json`` summary: steps,
seconds, settings) and prints the table.

    .venv/bin/python benchmarks/detector_students/yolov8_student.py --run runs/yolov8_person_student \
        --out benchmarks/detector_students/results/xeon-2core_2026-12-06_yolov8-student.json
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402

use_checkout()

HERE = Path(__file__).resolve().parent
WORK = HERE.parents[1] / "build" / "yolov8_student_bench"
SHIP_WITHIN = 0.1  # AP@0.5 points below the port at most, to be shown


def export_port(folder: Path) -> Path:
    from jetforge.assets import asset_path
    from jetforge.compress.models.ssdlite_export import export_detector
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    graph = load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    g = SSDGraph(graph)
    path = folder / "port.onnx"
    export_detector(load_from_graphdef(None, graph=graph), read_spec(g), read_preprocess(g), path)
    return path


def heldout():
    from jetforge.assets import asset_dir
    from jetforge.calibrate.detection_eval import BLOCK_FRAMES
    from jetforge.calibrate.metrics import DetectionTarget
    from jetforge.vision.person_labels import load_person_labels

    frames = load_person_labels("heldout", assets_root=asset_dir("opencv_samples").parent)
    groups = ["%s:%d" % (f.clip, f.index // BLOCK_FRAMES) for f in frames]
    targets = [DetectionTarget(f.boxes, f.difficult, f.image.shape[:2]) for f in frames]
    return frames, groups, targets


def detections(path: Path, frames, targets) -> Any:
    """(boxes, scores) per frame in frame pixels: the model run frame by frame, decoded by the AP metric."""
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.session import open_session
    from jetforge.runtime.sidecar import read_sidecar

    sidecar = read_sidecar(path)
    metric = DetectionAPMetric(sidecar=sidecar)
    contract = input_contract(sidecar, "image", purpose="detection AP")
    with open_session(path, threads=2) as s:
        name = s.inputs[0].name
        outs = [s.infer({name: contract.apply(f.image)[None]}) for f in frames]
    names = [o.name for o in sidecar.outputs]
    raw = [np.concatenate([o[n] for o in outs]) for n in names]
    boxes, scores, _ = metric.detections(raw, targets)
    return boxes, scores


def latency(paths: Dict[str, Path], rounds: int) -> Dict[str, Any]:
    from jetforge.runtime.session import open_session

    sessions = {n: open_session(p, threads=2) for n, p in paths.items()}
    feeds = {n: {s.inputs[0].name: np.zeros([1] + [int(d) for d in s.inputs[0].shape[1:]], np.float32)}
             for n, s in sessions.items()}
    samples: Dict[str, List[float]] = {n: [] for n in sessions}
    for n, s in sessions.items():
        for _ in range(5):
            s.infer(feeds[n])
    for _ in range(rounds):
        for n, s in sessions.items():
            start = time.perf_counter()
            s.infer(feeds[n])
            samples[n].append(1000.0 * (time.perf_counter() - start))
    for s in sessions.values():
        s.close()
    out = {n: {"median_ms": statistics.median(v), "runs": len(v)} for n, v in samples.items()}
    out["student"]["speedup_vs_port"] = out["port"]["median_ms"] / out["student"]["median_ms"]
    return out


def train_summary(run: Path) -> Dict[str, Any]:
    result = json.loads((run / "result.json").read_text())
    keep = ("name", "device", "frames", "layout", "teacher", "macs", "input_size", "seconds")
    out = {k: result.get(k) for k in keep}
    out["steps_done"] = result["train"]["steps_done"]
    out["last_log"] = result["train"]["history"][-1] if result["train"]["history"] else None
    out["config"] = {k: result["config"][k] for k in ("student", "views", "train", "cross_grid", "anchor_free",
                                                        "teacher")}
    return out


def main(argv: Any = None) -> int:
    from jetforge.vision.detection_metrics import paired_bootstrap

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="the recipe's out_dir (student.onnx, result.json)")
    p.add_argument("--out", type=Path, required=True, help="the result JSON")
    p.add_argument("--resamples", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=60)
    args = p.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    paths = {"port": export_port(WORK), "student": args.run / "student.onnx"}
    frames, groups, targets = heldout()
    dets = {n: detections(path, frames, targets) for n, path in paths.items()}
    gt, diff = [f.boxes for f in frames], [f.difficult for f in frames]
    by_frame = paired_bootstrap(gt, diff, dets["student"], dets["port"], n_resamples=args.resamples)
    by_block = paired_bootstrap(gt, diff, dets["student"], dets["port"], n_resamples=args.resamples, groups=groups)
    ap = {"port": {k: by_frame["b"][k] for k in ("ap50", "ap", "ap50_ci", "ap_ci")},
          "student": {k: by_frame["a"][k] for k in ("ap50", "ap", "ap50_ci", "ap_ci")},
          "student_minus_port": by_frame["difference"], "student_minus_port_blocks": by_block["difference"]}
    gap = ap["port"]["ap50"] - ap["student"]["ap50"]
    result = {"what": "YOLOv8-layout person student vs the SSDLite port: person AP on the held-out frames, CPU latency",
              "machine": {"cpu": platform.processor() or platform.machine(), "threads": 2,
                          "note": "a shared 2-core VM: latency ratios only"},
              "frames": len(frames), "blocks": len(set(groups)), "ap": ap,
              "latency_ms": latency(paths, args.rounds), "training": train_summary(args.run),
              "ship": {"rule": "student AP@0.5 >= port AP@0.5 - %.2f" % SHIP_WITHIN, "gap_ap50": gap,
                       "shipped": bool(gap <= SHIP_WITHIN)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    d, b = ap["student_minus_port"], ap["student_minus_port_blocks"]
    print("model     AP@0.5 [95%% CI]          AP@[.5:.95]   CPU ms\n"
          "port      %.3f [%.3f, %.3f]   %.3f         %.1f\n"
          "student   %.3f [%.3f, %.3f]   %.3f         %.1f\n"
          "student - port AP@0.5 %+.3f, frames [%+.3f, %+.3f], blocks [%+.3f, %+.3f]; shipped: %s" % (
              ap["port"]["ap50"], *ap["port"]["ap50_ci"], ap["port"]["ap"], result["latency_ms"]["port"]["median_ms"],
              ap["student"]["ap50"], *ap["student"]["ap50_ci"], ap["student"]["ap"],
              result["latency_ms"]["student"]["median_ms"], d["ap50"], *d["ap50_ci"], *b["ap50_ci"],
              result["ship"]["shipped"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
