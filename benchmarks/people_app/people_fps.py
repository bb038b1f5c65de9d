"""The people demo with the CNN detector against HOG: end-to-end FPS side by side, line counts against the hand
count over the whole of vtest.avi, and what running the detector on every other frame costs.

    .venv/bin/python benchmarks/people_app/people_fps.py                   # everything -> results/<device>_<date>_fps.json (+ .png)
    .venv/bin/python benchmarks/people_app/people_fps.py --rounds 1 --frames 20 --skip-counts --skip-ap   # a quick look

1. **FPS**: ``jetforge app people`` itself (decode, detector, tracker, line/zone, overlay, MP4 encode: what
   ``./dev demo`` does) on the first ``--frames`` frames of vtest.avi, per configuration: ``hog`` (``--detector
   hog``), ``ssd`` (the default: the SSDLite-MobileNetV2 CNN on every frame) and ``ssd-every2`` (``--detect-every
   2``: the tracker predicts on the frames in between).  The configurations alternate within each of ``--rounds``
   rounds (the order rotates every round), so a busy spell of the shared machine hits them alike; the ratio
   CNN/HOG is taken per round, and its median and range are reported.  Goal: CNN >= 2.5x HOG's FPS.
2. **Counts**: the app over all 795 frames of vtest.avi, headless, for ``ssd`` and ``ssd-every2``; its
   ``line_cross`` events are matched to the hand count (``datasets/people/vtest_line_crossings.json``: 27
   crossings, frame +-2) by direction and frame within ``--frame-tolerance`` (default 8: the hand count's +-2
   plus the frames a walker at 2-4 px per frame needs to get the 10 px margin past the line).
3. **Detect every other frame, AP cost**: on the held-out vtest segments (frames 125-204, 365-444, 605-684), the
   detector runs on every frame once; the tracker then runs over each segment with every detection, and with
   every other one (coasting in between); the boxes the app shows (confirmed tracks, with their last score)
   are scored on the labelled frames: person AP@0.5 and AP@[.5:.95] with the paired bootstrap of the difference
   (``jetforge.calibrate.detection_metrics``; frames and 10-frame blocks).
4. **Detector options**: the CNN detector alone with ONNX Runtime's workers spinning or not and the score
   threshold before NMS at the model's 1e-8 or the app's 0.2, one process per variant, alternating.

The machine is a shared 2-core CPU: absolute FPS depend on what else ran; only the side-by-side ratios mean
something, and ``load_average`` is recorded per run.
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

CONFIGS: Dict[str, List[str]] = {
    "hog": ["--detector", "hog"],
    "ssd": [],
    "ssd-every2": ["--detect-every", "2"],
    "ssd-tiles2": ["--detector-tiles", "2"],  # the frame and 2x2 tiles: 5 inferences a frame
}
DEFAULT_CONFIGS = ["hog", "ssd", "ssd-every2"]
HAND_COUNT = ROOT / "datasets" / "people" / "vtest_line_crossings.json"
GOAL_RATIO = 2.5


def run_app(extra: Sequence[str], frames: int, out: Path, video: bool = True) -> Dict[str, Any]:
    """``jetforge app people`` in this process; its metrics.json and events."""
    from jetforge.cli.main import main

    argv = ["app", "people", "-q", "--no-plots", "--out", str(out)] + list(extra)
    if frames:
        argv += ["--max-frames", str(frames)]
    if not video:
        argv.append("--no-video")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with contextlib.redirect_stdout(io.StringIO()):  # the app's summary table; this script prints its own
        code = main(argv)
    if code != 0:
        raise RuntimeError("jetforge %s exited %d" % (" ".join(argv), code))
    metrics = json.loads((out / "metrics.json").read_text())
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    return {"metrics": metrics, "events": events, "load_before": load}


def measure_fps(frames: int, rounds: int, work: Path, names: Sequence[str] = tuple(DEFAULT_CONFIGS)
                ) -> Dict[str, Any]:
    from tqdm import tqdm

    names = list(names)
    if names[0] != "hog":
        raise ValueError("the FPS configurations start with hog (the ratios' reference)")
    per_round: List[Dict[str, Any]] = []
    with tqdm(total=rounds * len(names), desc="fps runs") as bar:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            row: Dict[str, Any] = {"order": order}
            for name in order:
                got = run_app(CONFIGS[name], frames, work / ("fps_%s_%d" % (name, r)))
                m = got["metrics"]
                row[name] = {"fps": m["fps"], "frames": m["frames"], "load_average_before": got["load_before"],
                             "cpu_cores_busy": m["cpu"].get("load_cores"), "model": m["model"]["model"],
                             "backend": m["model"].get("backend"),
                             "infer_ms_p50": m["latency_ms"]["stages"]["infer"]["p50_ms"]}
                bar.update(1)
            per_round.append(row)
    summary: Dict[str, Any] = {}
    for name in names:
        fps = [row[name]["fps"] for row in per_round]
        summary[name] = {"fps_median": float(np.median(fps)), "fps_min": float(min(fps)), "fps_max": float(max(fps))}
    for name in names[1:]:
        ratios = [row[name]["fps"] / row["hog"]["fps"] for row in per_round]
        summary[name]["ratio_vs_hog_median"] = float(np.median(ratios))
        summary[name]["ratio_vs_hog_range"] = [float(min(ratios)), float(max(ratios))]
        summary[name]["goal_2_5x_met"] = bool(min(ratios) >= GOAL_RATIO)
    return {"frames_per_run": frames, "rounds": rounds, "per_round": per_round, "summary": summary,
            "what": "jetforge app people end to end with the MP4 sink (as ./dev demo), first %d frames of vtest.avi"
                    % frames}


def check_counts(names: Sequence[str], tolerance: int, work: Path) -> Dict[str, Any]:
    from jetforge.vision.counting import match_crossings

    hand = json.loads(HAND_COUNT.read_text())
    out: Dict[str, Any] = {"hand": hand["counts"], "frame_tolerance": tolerance, "runs": {}}
    for name in names:
        t0 = time.perf_counter()
        got = run_app(CONFIGS[name], 0, work / ("count_%s" % name), video=False)
        result = match_crossings(got["events"], hand["crossings"], tolerance)
        result.update({"frames": got["metrics"]["frames"], "fps": got["metrics"]["fps"],
                       "wall_s": round(time.perf_counter() - t0, 1),
                       "recall": result["matched"] / len(hand["crossings"]),
                       "precision": result["matched"] / max(1, result["app"]["total"])})
        out["runs"][name] = result
    return out


def track_boxes(detections: List[Tuple[np.ndarray, np.ndarray]], every: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """What the app shows per frame (confirmed tracks, their last score) with detection on every ``every``-th frame."""
    from jetforge.apps.tasks.people import PeopleTask

    task = PeopleTask(detector=_NoDetector(), detect_every=every)  # the app's tracker options
    tracker = task.trackers[0]
    out = []
    for i, (boxes, scores) in enumerate(detections):
        tracks = tracker.update(boxes, scores) if i % every == 0 else tracker.coast()
        out.append((np.array([t.box for t in tracks]).reshape(-1, 4), np.array([t.score for t in tracks])))
    return out


class _NoDetector:
    """Stands for the detector when only the task's tracker settings are wanted (detections come precomputed)."""

    label = "precomputed detections"

    def __call__(self, image: np.ndarray) -> Any:
        raise AssertionError("not called")


def skip_ap_cost(resamples: int, block: int) -> Dict[str, Any]:
    import cv2
    from tqdm import tqdm

    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.assets import asset_path
    from jetforge.vision.detection_metrics import paired_bootstrap
    from jetforge.vision.person_labels import load_person_labels, read_person_labels
    from jetforge.workflow.model_refs import ensure_person_detector

    clip = asset_path("opencv_samples", "vtest.avi")
    labels = read_person_labels()
    frames = [f for f in load_person_labels("heldout") if f.clip == "vtest"]
    segments = [s for s in labels.segments if s.clip == "vtest" and s.split == "heldout"]
    detector = SsdPeopleDetector(ensure_person_detector()[0])
    by_every: Dict[int, Dict[int, Tuple[np.ndarray, np.ndarray]]] = {1: {}, 2: {}}
    cap = cv2.VideoCapture(str(clip))
    try:
        for seg in tqdm(segments, desc="held-out segments"):
            cap.set(cv2.CAP_PROP_POS_FRAMES, seg.start)
            dets = []
            for _ in range(seg.start, seg.stop):
                ok, image = cap.read()
                if not ok:
                    raise RuntimeError("vtest.avi ended inside segment %s" % (seg,))
                d = detector(image)
                dets.append((d.boxes, d.scores))
            for every in by_every:
                for k, shown in enumerate(track_boxes(dets, every)):
                    by_every[every][seg.start + k] = shown
    finally:
        cap.release()
        detector.close()
    gt = [f.boxes for f in frames]
    diff = [f.difficult for f in frames]
    runs = {e: ([by_every[e][f.index][0] for f in frames], [by_every[e][f.index][1] for f in frames])
            for e in by_every}
    groups = ["%d" % (i // block) for i in range(len(frames))]
    by_frame = paired_bootstrap(gt, diff, runs[2], runs[1], n_resamples=resamples, seed=0)
    by_block = paired_bootstrap(gt, diff, runs[2], runs[1], n_resamples=resamples, seed=0, groups=groups)
    ref = paired_bootstrap(gt, diff, runs[1], None, n_resamples=resamples, seed=0)
    return {"frames": len(frames), "segments": [[s.start, s.stop] for s in segments],
            "what": "AP of the app's confirmed track boxes (scores: each track's last detection score)",
            "every1": {k: ref["a"][k] for k in ("ap50", "ap", "ap50_ci", "ap_ci")},
            "every2": {k: by_frame["a"][k] for k in ("ap50", "ap", "ap50_ci", "ap_ci")},
            "difference_every2_minus_every1": {"frames": by_frame["difference"], "blocks": by_block["difference"]},
            "bootstrap": {"resamples": resamples, "seed": 0, "block": block}}


def time_detector(spinning: bool, threshold: float, frames: int) -> List[float]:
    """ms per frame of the CNN detector alone on the first ``frames`` frames of vtest.avi (after one warm-up)."""
    import cv2

    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.assets import asset_path
    from jetforge.workflow.model_refs import ensure_person_detector

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    images = [cap.read()[1] for _ in range(frames)]
    cap.release()
    out = []
    with SsdPeopleDetector(ensure_person_detector()[0], spinning=spinning, score_threshold=threshold) as det:
        det(images[0])
        for image in images:
            t0 = time.perf_counter()
            det(image)
            out.append(1000 * (time.perf_counter() - t0))
    return out


def detector_options(frames: int, rounds: int) -> Dict[str, Any]:
    """The speed options of the CNN detector alone (no pipeline): ONNX Runtime's idle workers spinning or not, and
    the score threshold below which candidates skip NMS (the model's own 1e-8 vs the app's 0.2).  Each variant runs
    in its own process (a spinning session in the same process would slow the next variant down), the variants
    alternate, the order rotating every round; median ms per frame over all rounds."""
    import subprocess

    variants = {"spinning on, threshold 1e-8": (True, 1e-8), "spinning on, threshold 0.2": (True, 0.2),
                "spinning off, threshold 1e-8": (False, 1e-8), "spinning off, threshold 0.2 (app)": (False, 0.2)}
    names = list(variants)
    ms: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            spin, thr = variants[name]
            proc = subprocess.run([sys.executable, __file__, "--time-detector", "%d,%r,%d" % (spin, thr, frames)],
                                  check=True, capture_output=True, text=True)
            ms[name] += json.loads(proc.stdout.strip().splitlines()[-1])
    return {"frames": frames, "rounds": rounds, "ms_median": {k: float(np.median(v)) for k, v in ms.items()},
            "what": "SsdPeopleDetector alone (preprocess + ONNX Runtime + decode + NMS), jetforge's default threads, "
                    "one process per variant and round"}


def print_tables(result: Dict[str, Any]) -> None:
    fps = result.get("fps")
    if fps:
        print("end-to-end FPS, %s; %d alternating rounds (shared 2-core CPU)" % (fps["what"], fps["rounds"]))
        print("%-12s %9s %17s %14s %s" % ("detector", "FPS (med)", "FPS range", "x HOG (med)", "x HOG range"))
        for name, s in fps["summary"].items():
            ratio = "%.2f" % s["ratio_vs_hog_median"] if "ratio_vs_hog_median" in s else "1"
            rng = "%.2f-%.2f" % tuple(s["ratio_vs_hog_range"]) if "ratio_vs_hog_range" in s else ""
            print("%-12s %9.2f %8.2f-%-8.2f %14s %s" % (name, s["fps_median"], s["fps_min"], s["fps_max"], ratio, rng))
    counts = result.get("counts")
    if counts:
        h = counts["hand"]
        print("\nline crossings over all of vtest.avi vs the hand count (%d: %d forward, %d backward), frame +-%d"
              % (h["total"], h["forward"], h["backward"], counts["frame_tolerance"]))
        print("%-12s %8s %9s %8s %8s %8s" % ("detector", "forward", "backward", "matched", "missed", "extra"))
        for name, r in counts["runs"].items():
            print("%-12s %8d %9d %8d %8d %8d" % (name, r["app"]["forward"], r["app"]["backward"], r["matched"],
                                                 len(r["missed"]), len(r["unmatched_app_crossings"])))
    opts = result.get("detector_options")
    if opts:
        print("\nCNN detector alone, ms per frame (median, %d frames x %d rounds, alternating)" % (opts["frames"],
                                                                                            opts["rounds"]))
        for name, v in opts["ms_median"].items():
            print("  %-36s %7.1f" % (name, v))
    ap = result.get("detect_every_ap")
    if ap:
        d = ap["difference_every2_minus_every1"]
        print("\ndetect every other frame, AP of the shown tracks on %d held-out vtest frames" % ap["frames"])
        for key in ("every1", "every2"):
            print("  %-7s AP@0.5 %.3f [%.3f, %.3f]  AP@[.5:.95] %.3f" % (key, ap[key]["ap50"], ap[key]["ap50_ci"][0],
                                                                      ap[key]["ap50_ci"][1], ap[key]["ap"]))
        print("  every2 - every1: AP@0.5 %+.3f, 95%% CI frames [%.3f, %.3f], blocks [%.3f, %.3f]" % (
            d["frames"]["ap50"], d["frames"]["ap50_ci"][0], d["frames"]["ap50_ci"][1], d["blocks"]["ap50_ci"][0],
            d["blocks"]["ap50_ci"][1]))


def plot(result: Dict[str, Any], path: Path) -> None:
    """End-to-end FPS per detector (median, min-max over the rounds) with the ratio to HOG written on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["fps"]["summary"]
    names = list(summary)
    med = [summary[n]["fps_median"] for n in names]
    err = [[m - summary[n]["fps_min"] for n, m in zip(names, med)], [summary[n]["fps_max"] - m
                                                                    for n, m in zip(names, med)]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(names, med, yerr=err, capsize=6, color=["#999999", "#1f77b4", "#6baed6", "#9467bd"][:len(names)])
    for i, n in enumerate(names):
        text = "%.2f FPS" % med[i] + ("\n%.1fx HOG" % summary[n]["ratio_vs_hog_median"]
                                      if "ratio_vs_hog_median" in summary[n] else "")
        ax.text(i, med[i] + err[1][i], text, ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("end-to-end FPS (median of %d rounds)" % result["fps"]["rounds"])
    ax.set_title("jetforge app people on vtest.avi, shared 2-core CPU", fontsize=10)
    ax.set_ylim(0, max(m + e for m, e in zip(med, err[1])) * 1.3)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=60, help="frames per FPS run (default 60)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the FPS runs (default 3)")
    parser.add_argument("--frame-tolerance", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS),
                        help="FPS configurations, hog first (default: %s)" % " ".join(DEFAULT_CONFIGS))
    parser.add_argument("--count-configs", nargs="+", default=["ssd", "ssd-every2"], choices=list(CONFIGS),
                        help="configurations whose line counts over the whole clip are checked")
    parser.add_argument("--skip-fps", action="store_true")
    parser.add_argument("--skip-counts", action="store_true")
    parser.add_argument("--skip-ap", action="store_true")
    parser.add_argument("--skip-options", action="store_true")
    parser.add_argument("--time-detector", metavar="SPIN,THRESHOLD,FRAMES", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="fps", help="the variant part of the default result name (e.g. fps-tiles)")
    parser.add_argument("--out", default=None, help="result JSON (+ .png beside it; default "
                                                    "results/<device>_<date>_<variant>.json)")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot and tables of an existing --out")
    args = parser.parse_args(argv)
    args.out = args.out or str(result_path(__file__, args.variant))
    if args.time_detector:  # one variant of detector_options, in its own process
        spin, thr, n = args.time_detector.split(",")
        print(json.dumps(time_detector(bool(int(spin)), float(thr), int(n))))
        return 0
    if args.plot_only:
        result = json.loads(Path(args.out).read_text())
        plot(result, Path(args.out).with_suffix(".png"))
        print_tables(result)
        return 0
    from jetforge.apps.pipeline import machine_info
    from jetforge.workflow.model_refs import ensure_person_detector
    from jetforge.fileio import write_json_atomic

    ensure_person_detector()  # export once before anything is timed
    result: Dict[str, Any] = {"machine": machine_info(),
                              "note": "shared 2-core CPU (other engineers' jobs ran): only side-by-side ratios "
                                      "mean something; load averages are recorded per run"}
    with tempfile.TemporaryDirectory(prefix="people_fps_") as tmp:
        work = Path(tmp)
        if not args.skip_fps:
            result["fps"] = measure_fps(args.frames, args.rounds, work, args.configs)
        if not args.skip_counts:
            result["counts"] = check_counts(args.count_configs, args.frame_tolerance, work)
    if not args.skip_ap:
        result["detect_every_ap"] = skip_ap_cost(args.resamples, 10)
    if not args.skip_options:
        result["detector_options"] = detector_options(20, 3)
    result["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    write_json_atomic(args.out, result)
    if "fps" in result:
        plot(result, Path(args.out).with_suffix(".png"))
    print_tables(result)
    print("-> %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
