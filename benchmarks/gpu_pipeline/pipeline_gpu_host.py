"""The GPU path's host side on a CPU: what each way of feeding N streams costs the pipeline's process per frame.

Why: on the H200 the GPU path was limited by Python, not by the GPU: at 16 streams the thread that launches each batch
waited for the GIL held by 16 decode threads (0.68x of NVDEC's rate).  Whether a design removes that work from the
pipeline's process can be measured without a GPU: decoding and the GPU are replaced by stand-ins that cost (almost) no
CPU time, so what is left is the Python glue the H200 runs were bound by:

* decoding: FakeReplayNvDecoder (a ThreadedDecoder stand-in replaying a few OpenCV-decoded frames of a tiny clip:
  NVDEC decodes in hardware), the owned copy of each frame into its stream's ring, the batcher;
* the GPU: a serial device model - a batch takes ``frames x gpu_us`` microseconds of "GPU" time after the previous one,
  and the finish thread waits (sleeps, GIL released, as a CUDA sync does) until it is done; 82 us a frame is the H200's
  MobileNetV2 alone at batch 32 (12237 FPS, benchmarks/gpu_pipeline/results/nvidia-h200_2026-12-01_host-variants3.json);
* per frame: a small preprocessing array per frame stacked per batch (the launch's per-frame Python), one event dict,
  one JSON line (render off).

Measured per variant (benchmarks/gpu_pipeline/pipeline_gpu.py's names) and stream count, in one run: FPS, the pipeline process's
own CPU ms per frame (getrusage minus the decode workers; the GIL-holding work), the workers' CPU ms per frame, and
the launch thread's wall / CPU ms per frame (wall far above CPU: it waited).  Absolute numbers belong to this machine
(and how loaded it was); compare variants within one run.

    .venv/bin/python benchmarks/gpu_pipeline/pipeline_gpu_host.py                # ~2-3 min on 2 cores
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent

VARIANTS = ("threaded-pairs", "feed-pairs", "ipc-pairs", "ipc2-pairs")
H200_MOBILENET_US = 1e6 / 12237.0  # MobileNetV2 alone at batch 32 on the H200, per frame


def make_clip(path: Path, width: int = 160, height: int = 96, frames: int = 600) -> Path:
    """A tiny MPEG-4 clip (the frame copies stay negligible: the Python around them is what is measured)."""
    import cv2

    rng = np.random.default_rng(0)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (width, height))
    base = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    for i in range(frames):
        writer.write(np.roll(base, i, axis=1))
    writer.release()
    return path


class GpuStandIn:
    """BatchOps with a serial 'GPU': each batch occupies it ``frames x gpu_us`` after the previous batch."""

    def __init__(self, gpu_us: float) -> None:
        self.gpu_s, self.free_at, self.zero = gpu_us / 1e6, 0.0, np.zeros((3, 4, 4), np.float32)

    def launch(self, frames: List[Any], padded: int) -> Any:
        x = np.stack([self.zero + f.index for f in frames])  # per-frame Python of a launch (frame table, pointers)
        self.free_at = max(self.free_at, time.perf_counter()) + self.gpu_s * padded
        return self.free_at, x

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        left = handle[0] - time.perf_counter()
        if left > 0:
            time.sleep(left)  # the CUDA sync: the GIL is released while waiting
        return [{"stream": f.stream, "frame": f.index, "class": int(handle[1][i, 0, 0, 0]) % 1000, "score": 0.5}
                for i, f in enumerate(frames)]

    def host_frames(self, handle: Any, frames: List[Any]) -> List[Any]:
        return [None] * len(frames)

    def gpu_ms(self) -> Dict[str, float]:
        return {}


def open_variant(variant: str, clip: Path, n: int) -> Any:
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from tests.standins.fake_nvdec import FakeReplayNvDecoder
    from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup
    from jetforge.apps.video.sources.gpu.ipc_decode import IpcDecodeGroup
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    if variant.startswith("ipc"):
        return IpcDecodeGroup([clip] * n, streams_per_worker=2 if variant.startswith("ipc2") else 4, slots=16,
                              fetch=4, loop=True, codec=FakeReplayNvDecoder)
    sources = [NvThreadedSource(clip, stream=s, codec_module=FakeReplayNvDecoder, loop=True,
                                keep=DeviceFrameRing(24), options=ThreadedDecodeOptions(fetch=4))
               for s in range(n)]
    for src in sources:
        src.prime()
    return SourceFeedGroup(sources, depth=8) if variant == "feed-pairs" else sources


def run_point(variant: str, clip: Path, n: int, seconds: float, gpu_us: float) -> Dict[str, Any]:
    from jetforge.apps.pipeline.streams import StreamRunOptions, run_streams

    sources = open_variant(variant, clip, n)
    sink_file = open(os.devnull, "w")

    def sink(s: int, frame: Any, event: Dict[str, Any], host: Any) -> None:
        sink_file.write(json.dumps(event) + "\n")

    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the GPU path's setting
    try:
        opts = StreamRunOptions(max_batch=min(2 * n, 32), per_stream=2, depth=2, time_limit_s=seconds)
        result = run_streams(sources, GpuStandIn(gpu_us), opts, sink=sink)
    finally:
        sys.setswitchinterval(switch)
        for src in ([sources] if hasattr(sources, "feed") else sources):
            src.close()
        sink_file.close()
    row = result.summary()
    frames = max(1, row["frames"])
    main_ms = row["process_cpu_ms_per_frame"] - row["decode_workers_cpu_ms_per_frame"]
    return {"variant": variant, "streams": n, "fps": row["fps"], "frames": row["frames"], "order_ok": row["order_ok"],
            "gpu_stand_in_fps": 1e6 / gpu_us, "main_process_cpu_ms_per_frame": main_ms,
            "workers_cpu_ms_per_frame": row["decode_workers_cpu_ms_per_frame"],
            "launch_wall_ms_per_frame": row["stage_wall_ms_per_frame"]["launch"],
            "launch_cpu_ms_per_frame": row["stage_cpu_ms_per_frame"]["launch"],
            "feed_cpu_ms_per_frame": row["stage_cpu_ms_per_frame"]["decode"], "mean_batch": row["mean_batch"],
            "gil_ceiling_fps": 1000.0 / main_ms if main_ms > 0 else None, "wall_s": row["wall_s"],
            "per_stream_frames_min": min(row["per_stream_frames"]), "frames_per_stream": frames / n}


def summary_table(rows: List[Dict[str, Any]], args: Any) -> str:
    """Per variant and N: the median over the repeats, [min-max] beside the two main columns."""
    from jetforge.table import format_table

    def med(vals: List[float], fmt: str, spread: bool = False) -> str:
        text = fmt % float(np.median(vals))
        return text + (" [%s-%s]" % (fmt % min(vals), fmt % max(vals)) if spread and len(vals) > 1 else "")

    out = []
    for n in args.streams:
        for variant in args.variants:
            rs = [r for r in rows if r["variant"] == variant and r["streams"] == n]
            if not rs:
                continue
            main_cpu = [r["main_process_cpu_ms_per_frame"] for r in rs]
            out.append([variant, n, med([r["fps"] for r in rs], "%.0f", True), "%.0f" % rs[0]["gpu_stand_in_fps"],
                        med(main_cpu, "%.3f", True), med([r["workers_cpu_ms_per_frame"] for r in rs], "%.3f"),
                        med([r["launch_wall_ms_per_frame"] for r in rs], "%.3f") + "/"
                        + med([r["launch_cpu_ms_per_frame"] for r in rs], "%.3f"),
                        "%.0f" % (1000.0 / float(np.median(main_cpu))), med([r["mean_batch"] for r in rs], "%.1f"),
                        "ok" if all(r["order_ok"] for r in rs) else "BROKEN"])
    head = ["variant", "N", "FPS (median [min-max])", "GPU stand-in FPS", "pipeline proc CPU ms/f [min-max]",
            "workers CPU ms/f", "launch wall/CPU ms/f", "1 core / pipeline CPU (FPS)", "batch", "order"]
    return format_table(head, out)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,4,16,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--variants", default=",".join(VARIANTS), type=lambda s: s.split(","))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3, help="rounds over every point (interleaved: load drifts)")
    ap.add_argument("--gpu-us", type=float, default=H200_MOBILENET_US, help="stand-in GPU time per frame (us)")
    ap.add_argument("--out", default=None, help="results stem: .json and .txt (default results/<device>_<date>_"
                                                "host-side)")
    args = ap.parse_args(argv)
    from jetforge.apps.pipeline import machine_info

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_clip(Path(tmp) / "tiny.mp4")
        for repeat in range(args.repeats):
            for n in args.streams:
                for variant in args.variants:
                    row = run_point(variant, clip, n, args.seconds, args.gpu_us)
                    row["repeat"] = repeat
                    rows.append(row)
                    print("%-15s %2d streams: %7.0f FPS, pipeline process %.3f CPU ms/frame, workers %.3f, launch "
                      "wall/CPU %.3f/%.3f ms/frame" % (variant, n, row["fps"], row["main_process_cpu_ms_per_frame"],
                                                       row["workers_cpu_ms_per_frame"], row["launch_wall_ms_per_frame"],
                                                           row["launch_cpu_ms_per_frame"]), flush=True)
    table = summary_table(rows, args)
    print(table)
    out = Path(args.out or result_path(__file__, "host-side", suffix=""))
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "pipeline_gpu_host", "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "machine": machine_info(), "settings": vars(args), "rows": rows,
           "notes": ["decoding and the GPU are stand-ins (FakeReplayNvDecoder; a serial device model of "
                     "%.1f us a frame): the numbers are the host side's Python only" % args.gpu_us,
                     "pipeline process CPU = getrusage of this process minus the decode workers' /proc CPU"]}
    Path(str(out) + ".json").write_text(json.dumps(doc, indent=1, default=str))
    info = doc["machine"]
    header = ("pipeline_gpu_host on %s (%s cores, no GPU), %s UTC: the GPU path's host side with decoding and the GPU "
              "replaced by stand-ins (FakeReplayNvDecoder; a serial device model of %.1f us a frame = the H200's "
              "MobileNetV2 alone at batch 32); %.1f s a point, %d interleaved rounds (medians); the machine was shared with other engineers' work.\n"
              "pipeline proc CPU = this process's getrusage minus the decode workers (the GIL-holding work per frame);"
              " '1 core / pipeline CPU' = the FPS one core of that work allows.\n\n"
              % (info.get("cpu", "?"), os.cpu_count(), time.strftime("%Y-%m-%d %H:%M", time.gmtime()), args.gpu_us,
                 args.seconds, args.repeats))
    Path(str(out) + ".txt").write_text(header + table + "\n")
    return 0 if all(r["order_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
