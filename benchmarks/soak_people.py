"""Soak benchmark: the people app (detector + tracking + MP4 and events sinks) over >= 20 000 frames of a looped clip.

Two runs of the real CLI in a subprocess, as a user or a service manager runs it:

1. **long run**: ``jetforge app people --source vtest.avi --loop --max-frames N`` (OpenCV's vtest.avi,
   795 frames, played again and again).  The process's RSS (psutil) is sampled every
   ``--sample-every`` frames, read from the events it has written so far.  A straight line is fitted
   to RSS after ``--warmup`` frames; its slope extrapolated over 20 000 frames must be below 1 % of
   the RSS at the end of the warm-up (goal), and the outputs must agree: per-frame records in
   events.jsonl == metrics.json frames == frames asked == frames OpenCV decodes from annotated.mp4,
   status "finished", no ``.part`` files left.
2. **SIGTERM run**: the same command, stopped with SIGTERM after a random number of frames (seeded):
   exit 130, status "interrupted", events == metrics frames == video frames (all decodable), no
   ``.part`` files.

The detector is chosen with ``--detector`` (``hog``: OpenCV's HOG people detector, the people app's
default; a CNN detector gets its own entry in DETECTORS when the app has one).  HOG runs at 5-13
frames/s on a 2-core machine, so 20 000 frames take 30-60 minutes: run it at low priority,

    nice -n 15 .venv/bin/python benchmarks/soak_people.py --frames 20000 --shared

and ``--frames 600 --warmup 200 --sample-every 50`` for a quick check of the script itself.
Writes benchmarks/results/soak_people.json and soak_people_rss.png.
"""

import argparse
import glob
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]

# detector name -> (app, extra CLI arguments); the app must write per-frame records of type == app name
DETECTORS: Dict[str, Tuple[str, List[str]]] = {
    "hog": ("people", []),
}
EXIT_INTERRUPTED = 130
GOAL_PERCENT_PER_20K = 1.0


def clip_path() -> Path:
    from jetforge.assets import asset_path

    return asset_path("opencv_samples", "vtest.avi")


def command(detector: str, out: Path, frames: int) -> List[str]:
    app, extra = DETECTORS[detector]
    return ([sys.executable, "-m", "jetforge.cli.main", "app", app, "--source", str(clip_path()), "--loop",
             "--max-frames", str(frames), "--out", str(out), "--no-plots", "-q"] + extra)


class EventsTail:
    """The newest frame number written so far, read incrementally from the events file being written."""

    def __init__(self, out: Path, task: str) -> None:
        self.out, self.task = out, task
        self.path: Optional[str] = None
        self.offset = 0
        self.rest = b""
        self.frame = -1

    def poll(self) -> int:
        if self.path is None:
            found = glob.glob(str(self.out / ".events.jsonl*.part*"))
            if not found:
                return self.frame
            self.path = found[0]
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:  # renamed into place at the end of the run
            return self.frame
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            record = json.loads(line)
            if record.get("type") == self.task:
                self.frame = max(self.frame, int(record["frame"]))
        return self.frame


def rss_bytes(proc: Any) -> int:
    return int(proc.memory_info().rss)


def video_frames(path: Path) -> int:
    """Frames OpenCV decodes from ``path`` (every one is read, not the header's count)."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        return -1
    count = 0
    while True:
        ok, _ = cap.read()
        if not ok:
            break
        count += 1
    cap.release()
    return count


def check_outputs(out: Path, task: str) -> Dict[str, Any]:
    """What the run left: per-frame records, metrics frames and status, decodable video frames, leftovers."""
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    records = 0
    frames_seen = set()
    if (out / "events.jsonl").exists():
        with open(out / "events.jsonl", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("type") == task:
                    records += 1
                    frames_seen.add(record["frame"])
    return {"status": metrics.get("status"), "metrics_frames": metrics.get("frames"), "event_records": records,
            "distinct_event_frames": len(frames_seen),
            "video_frames_decoded": video_frames(out / "annotated.mp4") if (out / "annotated.mp4").exists() else 0,
            "part_files": sorted(os.path.basename(p) for p in glob.glob(str(out / ".*part*"))),
            "fps": metrics.get("fps"), "memory": metrics.get("memory")}


def fit(samples: List[Dict[str, Any]], warmup: int) -> Dict[str, Any]:
    import numpy as np

    after = [s for s in samples if s["frame"] >= warmup]
    if len(after) < 3:
        return {"samples_after_warmup": len(after), "growth_percent_per_20k": None}
    x = np.array([s["frame"] for s in after], dtype=np.float64)
    y = np.array([s["rss_bytes"] for s in after], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    base = float(intercept + slope * warmup)
    growth = float(slope * 20000.0 / base * 100.0)
    return {"samples_after_warmup": len(after), "slope_bytes_per_frame": float(slope),
            "rss_at_warmup_mib": base / 2 ** 20, "rss_min_mib": float(y.min()) / 2 ** 20,
            "rss_max_mib": float(y.max()) / 2 ** 20, "growth_mib_per_20k": float(slope * 20000.0) / 2 ** 20,
            "growth_percent_per_20k": growth, "goal_percent_per_20k": GOAL_PERCENT_PER_20K,
            "meets_goal": abs(growth) < GOAL_PERCENT_PER_20K, "intercept_bytes": float(intercept)}


def long_run(args: argparse.Namespace, out: Path, on_samples: Any = None) -> Dict[str, Any]:
    import psutil
    from tqdm import tqdm

    app = DETECTORS[args.detector][0]
    argv = command(args.detector, out, args.frames)
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    ps = psutil.Process(proc.pid)
    tail = EventsTail(out, app)
    samples: List[Dict[str, Any]] = []
    next_sample = 0
    stopped_for_time = False
    last_save = time.time()
    with tqdm(total=args.frames, desc="soak %s" % args.detector, unit="frame", mininterval=10.0) as bar:
        while proc.poll() is None:
            if args.max_minutes and not stopped_for_time and time.time() - started > args.max_minutes * 60.0:
                # SIGTERM, not SIGINT: a background shell starts its jobs with SIGINT ignored, and the app inherits
                # that; jetforge handles SIGTERM as Ctrl-C (outputs closed, status "interrupted", exit 130)
                proc.send_signal(signal.SIGTERM)
                stopped_for_time = True
            if on_samples is not None and time.time() - last_save > 60.0:
                on_samples(samples)  # a run stopped from outside keeps the samples so far
                last_save = time.time()
            frame = tail.poll()
            if frame >= next_sample:
                try:
                    samples.append({"frame": frame, "rss_bytes": rss_bytes(ps), "t": round(time.time() - started, 2)})
                except psutil.NoSuchProcess:
                    break
                next_sample = (frame // args.sample_every + 1) * args.sample_every
            bar.update(max(0, frame + 1 - bar.n))
            time.sleep(0.2)
    stdout, stderr = proc.communicate()
    result = {"command": " ".join(argv[1:]), "exit_code": proc.returncode, "seconds": round(time.time() - started, 1),
              "frames_asked": args.frames, "sample_every": args.sample_every, "warmup_frames": args.warmup,
              "samples": samples, "stderr_tail": stderr[-2000:]}
    result["outputs"] = check_outputs(out, app)
    result["fit"] = fit(samples, args.warmup)
    result["stopped_at_time_limit"] = stopped_for_time
    o = result["outputs"]
    # a run stopped at --max-minutes ends like Ctrl-C: exit 130, "interrupted", every finished frame kept
    frames = o["metrics_frames"] if stopped_for_time else args.frames
    result["frames_processed"] = o["metrics_frames"]
    result["checks"] = {
        "exit_code": proc.returncode == (EXIT_INTERRUPTED if stopped_for_time else 0),
        "status": o["status"] == ("interrupted" if stopped_for_time else "finished"),
        "events_equal_frames": o["event_records"] == o["metrics_frames"] == o["distinct_event_frames"] == frames,
        "video_frames_equal_frames": o["video_frames_decoded"] == frames,
        "no_part_files": not o["part_files"],
        "rss_growth_below_goal": bool(result["fit"].get("meets_goal")),
    }
    return result


def sigterm_run(args: argparse.Namespace, out: Path) -> Dict[str, Any]:
    app = DETECTORS[args.detector][0]
    rng = random.Random(args.seed)
    stop_after = rng.randint(args.sigterm_min, args.sigterm_max)
    argv = command(args.detector, out, 10 ** 9)
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    tail = EventsTail(out, app)
    while proc.poll() is None and tail.poll() < stop_after:
        time.sleep(0.05)
    signalled_at = tail.frame
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    o = check_outputs(out, app)
    return {"command": " ".join(argv[1:]), "seed": args.seed, "sigterm_after_frame_written": signalled_at,
            "exit_code": proc.returncode, "seconds": round(time.time() - started, 1), "outputs": o,
            "stderr_tail": stderr[-2000:],
            "checks": {"exit_130": proc.returncode == EXIT_INTERRUPTED,
                       "status_interrupted": o["status"] == "interrupted",
                       "events_equal_metrics_equal_video": (o["event_records"] == o["metrics_frames"]
                                                            == o["video_frames_decoded"] > signalled_at >= 0),
                       "no_part_files": not o["part_files"]}}


def plot(result: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["long"]["samples"]
    f = result["long"]["fit"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([s["frame"] for s in samples], [s["rss_bytes"] / 2 ** 20 for s in samples], ".", ms=3, label="RSS sample")
    if f.get("slope_bytes_per_frame") is not None:
        x0, x1 = result["long"]["warmup_frames"], samples[-1]["frame"]
        y = [(f["intercept_bytes"] + f["slope_bytes_per_frame"] * x) / 2 ** 20 for x in (x0, x1)]
        ax.plot([x0, x1], y, "-", label="fit after warm-up: %+.3f %% per 20k frames (goal < %.0f %%)"
                % (f["growth_percent_per_20k"], GOAL_PERCENT_PER_20K))
    ax.axvspan(0, result["long"]["warmup_frames"], color="0.9", label="warm-up")
    ax.set_xlabel("frames processed")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("jetforge app people (%s + tracking + MP4 sink), looped vtest.avi" % result["detector"])
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--detector", choices=sorted(DETECTORS), default="hog")
    parser.add_argument("--frames", type=int, default=20000, help="frames of the long run (default 20000)")
    parser.add_argument("--sample-every", type=int, default=200, help="frames between RSS samples (default 200)")
    parser.add_argument("--warmup", type=int, default=2000, help="frames before the fit starts (default 2000)")
    parser.add_argument("--sigterm-min", type=int, default=30, help="earliest frame for the SIGTERM (default 30)")
    parser.add_argument("--sigterm-max", type=int, default=800, help="latest frame for the SIGTERM (default 800)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the SIGTERM moment (default: random, recorded)")
    parser.add_argument("--skip-long", action="store_true", help="only the SIGTERM run")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop the long run with SIGTERM (handled as Ctrl-C) after this many minutes "
                             "(a shared machine); "
                             "the fit uses the frames done, the JSON says stopped_at_time_limit")
    parser.add_argument("--work", default=None, help="folder for the runs' outputs (default: a temporary folder)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "soak_people.json"))
    parser.add_argument("--shared", action="store_true", help="record that the machine was shared during the run")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2 ** 31)
    work = Path(args.work or tempfile.mkdtemp(prefix="jetforge-soak-"))
    work.mkdir(parents=True, exist_ok=True)

    import psutil

    result: Dict[str, Any] = {
        "what": "people app soak: RSS over a looped clip, outputs after a finished and a SIGTERM-stopped run",
        "detector": args.detector, "clip": "vtest.avi (OpenCV samples, 795 frames, 768x576, looped with --loop)",
        "python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2 ** 30, 1), "machine_shared": bool(args.shared),
        "nice": os.nice(0), "load_average_at_start": list(os.getloadavg()),
    }
    out_json = Path(args.out)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    result["sigterm"] = sigterm_run(args, work / "sigterm")
    print("SIGTERM run: %s" % json.dumps(result["sigterm"]["checks"]))
    if not args.skip_long:
        def save_partial(samples: List[Dict[str, Any]]) -> None:
            partial = dict(result, long_partial={"samples": samples, "fit": fit(samples, args.warmup)})
            out_json.with_name(out_json.stem + ".partial.json").write_text(json.dumps(partial, indent=2) + "\n")

        result["long"] = long_run(args, work / "long", save_partial)
        print("long run: %s" % json.dumps(result["long"]["checks"]))
        print("RSS fit: %s" % json.dumps({k: v for k, v in result["long"]["fit"].items() if k != "intercept_bytes"}))
        plot(result, out_json.with_name(out_json.stem + "_rss.png"))
    result["load_average_at_end"] = list(os.getloadavg())
    checks = dict(result["sigterm"]["checks"], **{("long_" + k): v for k, v in result.get("long", {}).get(
        "checks", {}).items()})
    result["all_checks_pass"] = all(checks.values())
    tmp = out_json.with_name(out_json.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out_json)
    partial = out_json.with_name(out_json.stem + ".partial.json")
    if partial.exists():
        partial.unlink()
    print("all checks pass: %s; written %s" % (result["all_checks_pass"], out_json))
    return 0 if result["all_checks_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
