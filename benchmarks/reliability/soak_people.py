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

The detector is chosen with ``--detector``: ``ssd`` (the people app's default: the SSDLite-MobileNetV2
CNN through ONNX Runtime on the CPU) or ``hog`` (OpenCV's classical HOG detector; OpenCV 5 has none).
The JSON records the detector, the OpenCV and ONNX Runtime versions, the CPU and the cores used.

On the workstation (the project's venv):

    .venv/bin/python benchmarks/reliability/soak_people.py --dry-run            # 150 frames, SIGTERM run, ~1-2 min
    .venv/bin/python benchmarks/reliability/soak_people.py --prepare            # what the GPU host lacks, into build/
    nice -n 15 .venv/bin/python benchmarks/reliability/soak_people.py --frames 20000 --shared    # hours on 2 shared cores

On a host with only ``python3`` (torch, numpy, onnxruntime, OpenCV; no network, no jetforge install),
from a checkout carrying ``build/issue12_device`` (wheels, vtest.avi, the exported detector):

    taskset -c 12-15 python3 benchmarks/reliability/soak_people.py --minutes 7     # JSON into $OUT

``--minutes`` bounds the long run (a SIGTERM at the limit; the checks then use the frames done).
Writes ``--out`` (default ``$OUT/soak_people.json`` when ``$OUT`` is set, else
benchmarks/reliability/results/<device>_<date>_soak.json) and, where matplotlib is importable, ``*_rss.png``
beside it (``--plot-only JSON`` draws it later from the JSON).
"""

import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the checkout's root: benchmarks.common

from benchmarks.common import device_env, paths  # noqa: E402  (standard library only)

PACK = REPO / "build" / "issue12_device"  # what --prepare gathers for the GPU host (git-ignored)
SSD_MODEL = "ssdlite_mobilenet_v2_person.onnx"
APP = "people"  # the app's per-frame event records have type == "people"
DETECTORS = ("ssd", "hog")
EXIT_INTERRUPTED = 130
GOAL_PERCENT_PER_20K = 1.0


def default_clip() -> Path:
    carried = PACK / "vtest.avi"
    if carried.is_file():
        return carried
    from jetforge.assets import asset_path

    return asset_path("opencv_samples", "vtest.avi")


def default_detector_model() -> Optional[Path]:
    """The carried export, else None: the app exports the detector into the cache once (needs torch)."""
    carried = PACK / SSD_MODEL
    return carried if carried.is_file() else None


def command(args: argparse.Namespace, out: Path, frames: int) -> List[str]:
    detector = ["--detector", args.detector]
    if args.detector == "ssd" and args.detector_model:
        detector += ["--detector-model", str(args.detector_model)]
    return ([sys.executable, "-m", "jetforge.cli.main", "app", APP, "--source", str(args.clip), "--loop",
             "--max-frames", str(frames), "--out", str(out), "--no-plots", "-q"] + detector)


def start_app(argv: List[str], out: Path) -> "subprocess.Popen[str]":
    """The app in its own process, started from its output folder: from the repository root ``jetforge`` would be
    the bare root folder, not the package the checkout maps (benchmarks/common/device_env.py)."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, cwd=str(out))


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
    while cap.grab():  # demuxes and decodes each frame; skips only the colour conversion read() adds
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


MP4_INDEX_PROBE = """
import sys, numpy as np, psutil
from jetforge.apps.video.sinks.file import Mp4Sink
frames, out = int(sys.argv[1]), sys.argv[2]
me, image, rss = psutil.Process(), np.zeros((48, 64, 3), np.uint8), []
with Mp4Sink(out, 25.0) as sink:
    for i in range(frames + 1):
        image[:] = i % 251
        sink.write(image)
        if i in (frames // 4, frames):
            rss.append(me.memory_info().rss)
print((rss[1] - rss[0]) / (frames - frames // 4))
"""


def mp4_index_bytes_per_frame(work: Path, frames: int = 40000) -> Optional[float]:
    """RSS growth per frame of jetforge's MP4 sink alone (tiny frames, same writer and container), in bytes.

    An MP4 file that is not fragmented keeps one index entry per frame in memory until it is closed (the
    ``moov`` box is written last): the long run's RSS grows by this much per frame whatever the app does.
    Measured here, on the same machine and OpenCV, so the app's own growth can be told apart from it.
    """
    proc = subprocess.run([sys.executable, "-c", MP4_INDEX_PROBE, str(frames), str(work / "probe.mp4")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, cwd=str(work),
                          timeout=600)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print("MP4 index probe failed: %s" % proc.stderr[-500:], flush=True)
        return None


def fit(samples: List[Dict[str, Any]], warmup: int, mp4_index: Optional[float] = None) -> Dict[str, Any]:
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
            "meets_goal": abs(growth) < GOAL_PERCENT_PER_20K, "intercept_bytes": float(intercept),
            "mp4_index_bytes_per_frame": mp4_index,
            "growth_percent_per_20k_without_mp4_index": (None if mp4_index is None else
                                                         float((slope - mp4_index) * 20000.0 / base * 100.0))}


def long_run(args: argparse.Namespace, out: Path, on_samples: Any = None) -> Dict[str, Any]:
    import psutil
    from tqdm import tqdm

    app = APP
    argv = command(args, out, args.frames)
    started = time.time()
    proc = start_app(argv, out)
    ps = psutil.Process(proc.pid)
    tail = EventsTail(out, app)
    samples: List[Dict[str, Any]] = []
    next_sample = 0
    stopped_for_time = False
    last_save = time.time()
    with tqdm(total=args.frames, desc="soak %s" % args.detector, unit="frame", mininterval=10.0) as bar:
        while proc.poll() is None:
            if args.minutes and not stopped_for_time and time.time() - started > args.minutes * 60.0:
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
    result["fit"] = fit(samples, args.warmup, mp4_index_bytes_per_frame(out.parent))
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
    app = APP
    rng = random.Random(args.seed)
    stop_after = rng.randint(args.sigterm_min, args.sigterm_max)
    argv = command(args, out, 10 ** 9)
    started = time.time()
    proc = start_app(argv, out)
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
        label = "fit after warm-up: %+.3f %% per 20k frames (goal < %.0f %%)" % (f["growth_percent_per_20k"],
                                                                                 GOAL_PERCENT_PER_20K)
        if f.get("growth_percent_per_20k_without_mp4_index") is not None:
            label += "\nwithout the MP4 file's index (%.0f B/frame, measured alone): %+.3f %%" % (
                f["mp4_index_bytes_per_frame"], f["growth_percent_per_20k_without_mp4_index"])
        ax.plot([x0, x1], y, "-", label=label)
    ax.axvspan(0, result["long"]["warmup_frames"], color="0.9", label="warm-up")
    ax.set_xlabel("frames processed")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("jetforge app people (%s + tracking + MP4 sink), looped vtest.avi" % result["detector"])
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def parse_args(argv: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--detector", choices=DETECTORS, default="ssd",
                        help="the people app's person detector (default ssd, the app's default)")
    parser.add_argument("--detector-model", type=Path, default=None,
                        help="--detector ssd: the exported detector (default: the carried one in build/issue12_device, "
                             "else the app exports it into the cache once, which needs torch)")
    parser.add_argument("--clip", type=Path, default=None, help="the clip to loop (default: vtest.avi)")
    parser.add_argument("--frames", type=int, default=20000, help="frames of the long run (default 20000)")
    parser.add_argument("--sample-every", type=int, default=200, help="frames between RSS samples (default 200)")
    parser.add_argument("--warmup", type=int, default=2000, help="frames before the fit starts (default 2000)")
    parser.add_argument("--sigterm-min", type=int, default=30, help="earliest frame for the SIGTERM (default 30)")
    parser.add_argument("--sigterm-max", type=int, default=400, help="latest frame for the SIGTERM (default 400)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the SIGTERM moment (default: random, recorded)")
    parser.add_argument("--skip-long", action="store_true", help="only the SIGTERM run")
    parser.add_argument("--minutes", "--max-minutes", dest="minutes", type=float, default=None,
                        help="stop the long run with SIGTERM (handled as Ctrl-C) after this many minutes; the checks "
                             "use the frames done, the JSON says stopped_at_time_limit")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the runs' outputs (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=None,
                        help="result JSON (default: $OUT/soak_people.json when $OUT is set, else "
                             "benchmarks/reliability/results/<device>_<date>_soak.json)")
    parser.add_argument("--shared", action="store_true", help="record that the machine was shared during the run")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the whole path quickly: 150 frames (warm-up 50, a sample every 10), a SIGTERM "
                             "between frames 20 and 60; JSON in a temporary folder unless --out is given")
    parser.add_argument("--prepare", action="store_true",
                        help="gather what the GPU host lacks (wheels, vtest.avi, the exported detector) into "
                             "build/issue12_device and stop")
    parser.add_argument("--wheels", type=Path, default=PACK / "wheels", help=argparse.SUPPRESS)
    parser.add_argument("--plot-only", type=Path, default=None, metavar="JSON",
                        help="draw the RSS plot of a finished run's JSON beside it, and stop")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.frames, args.warmup, args.sample_every = min(args.frames, 150), 50, 10
        args.sigterm_min, args.sigterm_max = 20, 60
        if args.out is None:
            args.out = Path(tempfile.mkdtemp(prefix="jetforge-soak-dry-")) / "soak_people.json"
    if args.out is None:
        args.out = Path(os.environ["OUT"]) / "soak_people.json" if os.environ.get("OUT") else \
            paths.result_path(__file__, "soak")
    return args


def prepare(pack: Path) -> int:
    """Wheels for the device's Python, the clip, and the exported detector (exported here first if needed)."""
    import shutil

    names = device_env.prepare_wheels(pack / "wheels")
    from jetforge.assets import asset_path

    shutil.copy2(asset_path("opencv_samples", "vtest.avi"), pack / "vtest.avi")
    model = cached_detector_model()
    for src in (model, model.with_name(model.name + ".json")):
        shutil.copy2(src, pack / src.name)
    sizes = {p.name: p.stat().st_size for p in sorted(pack.rglob("*")) if p.is_file()}
    print("%s: %.1f MiB\n  %s" % (pack, sum(sizes.values()) / 2 ** 20, "\n  ".join(
        "%-90s %8.1f KiB" % (k, v / 1024) for k, v in sizes.items())))
    return 0 if names else 1


def cached_detector_model() -> Path:
    """The people app's exported detector in the cache; a 3-frame run of the app exports it when missing."""
    from jetforge.assets.store import cache_root

    model = cache_root() / "models" / SSD_MODEL
    if not model.is_file():
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([sys.executable, "-m", "jetforge.cli.main", "app", APP, "--max-frames", "3", "--out", out,
                            "--no-plots", "-q"], check=True)
    return model


def environment_facts(args: argparse.Namespace, env: Dict[str, Any]) -> Dict[str, Any]:
    import cv2
    import onnxruntime
    import psutil

    return {
        "what": "people app soak: RSS over a looped clip, outputs after a finished and a SIGTERM-stopped run",
        "detector": args.detector, "detector_model": str(args.detector_model) if args.detector_model else None,
        "clip": "%s (OpenCV samples' vtest.avi: 795 frames, 768x576, looped with --loop)" % args.clip.name,
        "dry_run": bool(args.dry_run), "machine": device_env.machine(), "environment": env,
        "source": device_env.source_digest(),
        "opencv": cv2.__version__, "onnxruntime": onnxruntime.__version__,
        "memory_gib": round(psutil.virtual_memory().total / 2 ** 30, 1), "machine_shared": bool(args.shared),
        "nice": os.nice(0), "time_budget_minutes": args.minutes,
    }


def load_environment(wheels: Path) -> Dict[str, Any]:
    """psutil/tqdm/yaml from the carried wheels where this Python lacks them; jetforge from the checkout."""
    extra: List[Path] = []
    installed: List[str] = []
    try:
        import psutil  # noqa: F401  (only: are they here?)
        import tqdm  # noqa: F401
        import yaml  # noqa: F401
    except ImportError:
        site = Path(tempfile.mkdtemp(prefix="jetforge-site-"))
        installed = device_env.install_wheels(wheels, site)
        extra.append(site)
    env = device_env.use_checkout(extra)
    env["wheels_installed"] = installed
    return env


def main(argv: Any = None) -> int:
    args = parse_args(argv)
    if args.plot_only:
        result = json.loads(args.plot_only.read_text())
        plot(result, args.plot_only.with_name(args.plot_only.stem + "_rss.png"))
        return 0
    env = load_environment(args.wheels)
    if args.prepare:
        return prepare(PACK)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2 ** 31)
    args.clip = (args.clip or default_clip()).resolve()
    if args.detector == "ssd" and args.detector_model is None:
        args.detector_model = default_detector_model()
    if args.detector_model is not None:
        args.detector_model = args.detector_model.resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="jetforge-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    result = environment_facts(args, env)
    out_json = args.out
    out_json.parent.mkdir(parents=True, exist_ok=True)
    result["sigterm"] = sigterm_run(args, work / "sigterm")
    print("SIGTERM run: %s" % json.dumps(result["sigterm"]["checks"]), flush=True)
    if not args.skip_long:
        def save_partial(samples: List[Dict[str, Any]]) -> None:
            partial = dict(result, long_partial={"samples": samples, "fit": fit(samples, args.warmup)})
            out_json.with_name(out_json.stem + ".partial.json").write_text(json.dumps(partial, indent=2) + "\n")

        result["long"] = long_run(args, work / "long", save_partial)
        print("long run: %d frames in %.0f s; %s" % (result["long"]["frames_processed"] or 0,
                                                     result["long"]["seconds"], json.dumps(result["long"]["checks"])))
        print("RSS fit: %s" % json.dumps({k: v for k, v in result["long"]["fit"].items() if k != "intercept_bytes"}))
        result["reached_frames_goal"] = (result["long"]["frames_processed"] or 0) >= 20000
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
    if "long" in result:
        try:
            plot(result, out_json.with_name(out_json.stem + "_rss.png"))
        except ImportError:
            print("no matplotlib here: draw the plot later with --plot-only %s" % out_json)
    print("all checks pass: %s; written %s" % (result["all_checks_pass"], out_json))
    return 0 if result["all_checks_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
