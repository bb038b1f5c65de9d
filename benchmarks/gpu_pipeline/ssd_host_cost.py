"""The person detector's host-side decoding cost on the GPU path: the raw outputs decoded on the host against the host
half of the GPU decoding kernel.

Why: ``jetforge app people --decode gpu`` with a session that takes host arrays (ONNX Runtime) copies the SSD's raw
outputs back (1917 anchors x 6 floats a frame) and decodes and selects on the host (``vision.ssd_batch.
postprocess_batch``, in the pipeline's results thread).  On a TensorRT engine it decodes on the GPU since 2026-12-08
(``vision.ssd_gpu.QueuedSsdDecoder``: decoding and candidate compaction behind the engine, only the candidates back);
its host half in the results thread is ``rows_of`` (the frames' rows of the padded batch) and ``finish`` (NMS).  The
GPU benchmark's detector rows decoded with the kernel until 2026-12-07 (then in the results thread, synchronously),
as the app did not then.  The host's CPU time per frame is what the results thread spends, under the one GIL the
launch thread needs.  This times both host parts on the person detector's real outputs
(``tests/runtime/gpu_kernels/data/ssd_person_vtest.npz``, four vtest.avi frames, repeated to fill a batch padded to
the app's bucket; the kernel's candidates made by its numpy model, ``candidates_reference``), thread CPU time,
interleaved and repeated, and checks that both give the same detections.  Any CPU; no GPU is involved (the kernel's
own GPU time is in ``results/nvidia-h200_2026-12-01_kernels.txt``).

    .venv/bin/python benchmarks/gpu_pipeline/ssd_host_cost.py          # ~10 s
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout, write_result  # noqa: E402

use_checkout()

from benchmarks.common.pipeline_gpu_plan import median_spread  # noqa: E402

FIXTURE = ROOT / "tests" / "runtime" / "gpu_kernels" / "data" / "ssd_person_vtest.npz"
THRESHOLD = 0.5  # the GPU benchmark's SSD_THRESHOLD and the people app's default


def cpu_ms(fn: Callable[[], Any], calls: int) -> float:
    """Thread CPU milliseconds per call of ``fn`` over ``calls`` calls (after one untimed call)."""
    fn()
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return 1000.0 * (time.thread_time() - t0) / calls


def measure(batches: List[int], reps: int, calls: int) -> List[Dict[str, Any]]:
    from jetforge.apps.pipeline.batching import bucket_for
    from jetforge.runtime.cuda.kernels.ssd import effective_threshold, kernel_threshold
    from jetforge.vision.ssd import SSDSpec
    from jetforge.vision.ssd_batch import postprocess_batch
    from jetforge.vision.ssd_gpu import candidates_reference, finish, rows_of

    data = np.load(str(FIXTURE))
    spec = SSDSpec.from_dict(json.loads(str(data["spec"])))
    anchors = spec.anchors()
    threshold = effective_threshold(spec, THRESHOLD)
    rows = []
    for batch in batches:
        padded = bucket_for(batch)  # the engine's rows: the app pads a batch to its bucket, repeating the last frame
        pick = np.minimum(np.arange(padded), batch - 1) % len(data["enc"])
        enc, logits = data["enc"][pick].copy(), data["logits"][pick].copy()
        records = candidates_reference(enc, logits, spec, kernel_threshold(threshold))  # every padded row decoded
        frames = list(range(batch))
        app = lambda: postprocess_batch(enc[:batch], logits[:batch], spec, score_threshold=THRESHOLD,  # noqa: E731
                                        anchors=anchors)
        kernel = lambda: finish(rows_of(records, frames, padded), batch, spec, threshold)  # noqa: E731
        same = all(np.array_equal(a.boxes, b.boxes) and np.array_equal(a.scores, b.scores)
                   for a, b in zip(app(), kernel()))
        times: Dict[str, List[float]] = {"app": [], "kernel": []}
        for _ in range(reps):  # interleaved: a change in the machine's load touches both alike
            times["app"].append(cpu_ms(app, calls))
            times["kernel"].append(cpu_ms(kernel, calls))
        app_ms, kernel_ms = median_spread(times["app"]), median_spread(times["kernel"])
        rows.append({"batch": batch, "padded": padded, "candidates": int(len(records)), "same_detections": same,
                     "app_host_decode_ms_per_batch": app_ms, "kernel_host_part_ms_per_batch": kernel_ms,
                     "app_ms_per_frame": app_ms["median"] / batch, "kernel_ms_per_frame": kernel_ms["median"] / batch,
                     "app_over_kernel": app_ms["median"] / kernel_ms["median"],
                     "bytes_back_per_frame": {"app": int(enc[0].nbytes + logits[0].nbytes),
                                              "kernel": int(records.nbytes // padded)}})
    return rows


def table(doc: Dict[str, Any]) -> str:
    lines = ["SSD person detector, threshold %.1f, host CPU ms (thread time), median [min-max] of %d interleaved runs"
             % (THRESHOLD, doc["settings"]["reps"]),
             "%5s  %-28s %-28s %9s  %s" % ("batch", "host decode + NMS", "kernel: rows + NMS", "host/kernel",
                                          "ms a frame host / kernel; same detections")]
    for r in doc["rows"]:
        a, k = r["app_host_decode_ms_per_batch"], r["kernel_host_part_ms_per_batch"]
        lines.append("%5d  %6.3f [%6.3f-%6.3f]       %6.3f [%6.3f-%6.3f]       %8.1fx  %.4f / %.4f; %s" % (
            r["batch"], a["median"], a["min"], a["max"], k["median"], k["min"], k["max"], r["app_over_kernel"],
            r["app_ms_per_frame"], r["kernel_ms_per_frame"], r["same_detections"]))
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="2,8,24,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40, help="calls per timed run")
    ap.add_argument("--out", default=None, help="results stem (default results/<device>_<date>_ssd-host-cost)")
    args = ap.parse_args(argv)
    from jetforge.apps.pipeline import machine_info

    info = machine_info()
    doc = {"benchmark": "ssd_host_cost", "machine": {"cpu": info.get("cpu"), "cores": info.get("cpu_cores_usable")},
           "settings": {"batches": args.batches, "reps": args.reps, "calls": args.calls, "threshold": THRESHOLD},
           "rows": measure(args.batches, args.reps, args.calls)}
    write_result(Path(args.out or result_path(__file__, "ssd-host-cost", suffix="")), doc, table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
