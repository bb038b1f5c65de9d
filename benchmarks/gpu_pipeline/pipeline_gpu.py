"""The GPU video path against the hardware bound (issues 15, 29): NVDEC -> GPU preprocessing -> batched CUDA-graph
inference -> events (render off) or CPU encoder workers (render on), for 1/4/16/32 streams of 720p H.264.

Three steps, each one command:

    .venv/bin/python benchmarks/gpu_pipeline/pipeline_gpu.py --prep     # here: streams + wheel + weights -> build/gpu_pipeline/
    .venv/bin/python benchmarks/gpu_pipeline/pipeline_gpu.py --dry-run  # here: the whole script on the CPU (FakeNvDecoder)
    python3 benchmarks/gpu_pipeline/pipeline_gpu.py --models classify,people,people-tiles2 --wall-limit-s 560  # the GPU

Every point is the MEDIAN of ``--reps`` (3) repetitions inside the one call, with min and max (issue 29: the spread
between calls was as large as the gap to the goal).  The repetitions run in rounds (round r: the bounds, then every
goal point once), in priority order: the goal rows first - render off at 1/4/16/32 streams of both models
(MobileNetV2 classify, the SSDLite person detector) on the app's default host layout (``auto``: what
``jetforge app --decode gpu`` does, with ``GpuAppOptions``' defaults) - and in each round their bounds: the model
alone at the pipeline's batch (device tensors, CUDA graph) and NVDEC alone of the same N streams.  Then the person
detector with 2x2 tiles (``people-tiles2``: the app's ``--detector-tiles 2`` path, checked once against the CPU
reference, then its rounds; :mod:`benchmarks.common.pipeline_gpu_tiles`), then, if asked, render on at 16 streams (``--render-on``, with the encoder pool alone as its bound), then other host layouts
(``--variants``: exploratory, recorded apart).  A step whose estimated time (the longest earlier repetition of it,
else a guess) would end after ``--budget-s`` is skipped and recorded as skipped.

Per repetition: FPS, p50/p99 latency, CPU cores per 30-FPS stream (getrusage per frame x 30), the host CPU (model,
cores, load average before and after), and the per-stage times - the app's own TaskOps/PipelineMetrics stages
(launch, results, postprocess, sink: its metrics.json latency block) plus the feeder thread's CPU per frame.

Writes ``<device>_<date>_<tag>.json``, ``.txt`` (the table) and ``.png`` under $OUT (else this study's ``results/``;
a dry run: ``pipeline_gpu_dry_run.*`` in /tmp/jf_pipeline_gpu_dry_run).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARRY = ROOT / "build" / "gpu_pipeline"
WHEEL = "pynvvideocodec-2.2.4-cp312-cp312-manylinux_2_28_x86_64.whl"
# The device call: at most 600 s in all.  The default matrix (3 rounds of 8 goal points with their bounds) takes
# ~235 s by the step times of results/nvidia-h200_2026-12-01_gpu-path.json, ~285 s with --render-on; the tiled detector
# (people-tiles2: a check, 3 rounds of 4 points) adds ~70 s by the detector's step times of the H100 run: all fit this
# budget, which leaves start-up (wheel, torch, models, graphs) and the report room inside --wall-limit-s 560.
DEFAULT_BUDGET_S = 420.0

sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_name, use_checkout  # noqa: E402

use_checkout()
from benchmarks.common.pipeline_gpu_env import (APP_BUCKETS, FINE_BUCKETS, Env, batch_of, bucket,  # noqa: E402
                                                capture_graphs, device_pool_run)
from benchmarks.common.pipeline_gpu_variants import (DEFAULT_VARIANT, UNTIMED, VARIANTS,  # noqa: E402
                                                     frame_copy_label, resolve_variant, split_untimed, split_variant,
                                                     variant_label)

def log(*parts: Any) -> None:
    print(*parts, flush=True)


def install_wheel(carry: Path) -> None:
    """The device has no PyNvVideoCodec: install the carried wheel into /tmp/site (no index, no deps)."""
    try:
        import PyNvVideoCodec  # noqa: F401
        return
    except ImportError:
        pass
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", "/tmp/site", str(carry / WHEEL)], check=True)
    sys.path.insert(0, "/tmp/site")
    import importlib

    importlib.invalidate_caches()


def run_gpu_tests(args: argparse.Namespace, out: Path) -> Dict[str, Any]:
    """F2's kernel tests (marked gpu) first, with their own time limit; the log goes to $OUT."""
    if not args.gpu_tests:
        return {"skipped": True}
    t0 = time.perf_counter()
    env = dict(os.environ)
    clip = CARRY / "streams" / "people720.mp4"  # the kernel tests' real 720p frames: the device cannot fetch assets
    if clip.is_file():
        env.setdefault("JETFORGE_KERNEL_VIDEO", str(clip))
    if Path("/tmp/site").is_dir():  # the carried PyNvVideoCodec (install_wheel), for the tests that decode with NVDEC
        env["PYTHONPATH"] = os.pathsep.join(p for p in ["/tmp/site", env.get("PYTHONPATH", "")] if p)
    probe = subprocess.run([sys.executable, "-P", "-c", "import jetforge.cli"], cwd="/tmp", capture_output=True)
    if probe.returncode != 0:  # a plain checkout: install it where the test process finds it (no deps, no index)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", "/tmp/jf", str(ROOT)], check=True, capture_output=True)
        env["PYTHONPATH"] = os.pathsep.join(["/tmp/jf", env.get("PYTHONPATH", "")])
    # -P: the checkout's root is not put on sys.path, so `jetforge` is the installed package, not its root folder
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"] + args.gpu_tests.split()
    try:
        proc = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=args.gpu_tests_timeout,
                              env=env)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as err:
        text, rc = "TIMEOUT after %ss\n%s" % (args.gpu_tests_timeout, err.stdout or ""), 124
    (out / "gpu_tests.log").write_text(text if isinstance(text, str) else text.decode("utf-8", "replace"))
    tail = text.strip().splitlines()[-1:] if isinstance(text, str) else []
    log("gpu tests: rc=%d, %s (%.0f s)" % (rc, tail[0] if tail else "", time.perf_counter() - t0))
    return {"returncode": rc, "summary": tail[0] if tail else "", "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------- a point
def pipeline_run(env: "Env", model: str, n: int, render: bool, variant: str) -> Dict[str, Any]:
    """One repetition of the whole GPU path for N streams of ``model`` run the ``variant`` way (:data:`VARIANTS`),
    its batches timed by the app's TaskOps; render on sends every frame to the encoder pool."""
    from jetforge.apps.pipeline.streams import StreamRunOptions, run_streams
    from jetforge.apps.video.sinks.encode_pool import EncoderPool
    from benchmarks.common.pipeline_gpu_measure import (app_timed, app_timed_sink, feeder_waits, open_group,
                                                        open_sources, source_label, stage_block)
    from benchmarks.common.pipeline_gpu_ops import keep_hook, ssd_decode_label

    from benchmarks.common.pipeline_gpu_plan import rows_per_frame

    v = VARIANTS[resolve_variant(variant, n)]
    _, timed, host_decode = split_variant(variant)
    inner = env.ops(model, n, v["nonblocking"], v["per_stream"], host_decode=host_decode)
    inner.app_copy_back = v.get("copy_back", "app") == "app"
    ops = app_timed(inner, env.args.warmup_frames) if timed else inner
    if v.get("source") == "ipc":
        sources: Any = open_group([env.streams[model]], n, env.args.dry_run, v["workers"], v["per_stream"])
        first = sources.infos[0]
    elif v.get("source") == "feed":
        from jetforge.apps.pipeline.gpu_app import FEED_COPY_AHEAD, FEED_DEPTH, FEED_RING_SLOTS
        from jetforge.apps.video.sources.gpu.feed_group import SourceFeedGroup

        # as `jetforge app` would: the ring holds the batcher's frames, the batches in flight and one fetch
        sources = SourceFeedGroup(open_sources([env.streams[model]], n, env.codec, keep="ring", threaded=True,
                                               ring_slots=FEED_RING_SLOTS, defer_sync=True,
                                               batch_copy=v.get("batch_copy"),
                                               decoder_buffer=v.get("decoder_buffer"),
                                               copy_priority=v.get("copy_priority", "default"),
                                               copy_ahead=v.get("copy_ahead", FEED_COPY_AHEAD),
                                               decoder_priority=v.get("decoder_priority", "default")),
                                depth=FEED_DEPTH)
        first = vars(sources.sources[0])
    else:
        keep = "ring" if v["keep"] == "ring" else keep_hook(env.torch, env.device, nonblocking=v["nonblocking"])
        sources = open_sources([env.streams[model]], n, env.codec, keep=keep, threaded=v.get("source") == "threaded",
                               decoder_priority=v.get("decoder_priority", "default"))
        first = vars(sources[0])
    pool = None
    if render:
        pool = EncoderPool(env.scratch / ("%s_%d" % (model, n)), first["width"], first["height"], 30.0,
                           workers=env.args.encoders)
        pool.wait_ready()
        sink = lambda s, f, e, host: pool.submit(s, host, e)  # noqa: E731
    else:
        sink = env.event_sink()
    if timed:
        sink = app_timed_sink(sink, ops)
    batch = batch_of(n, v["per_stream"], rows_per_frame(model))
    opts = StreamRunOptions(max_batch=batch, batch_timeout_s=env.args.batch_timeout_ms / 1000.0,
                            buckets=FINE_BUCKETS if v.get("buckets") == "fine4" else APP_BUCKETS,
                            time_limit_s=env.args.seconds, per_stream=v["per_stream"], depth=max(2, v["per_stream"]))
    switch = sys.getswitchinterval()
    if v["switch_ms"]:
        sys.setswitchinterval(v["switch_ms"] / 1000.0)
    if timed:
        ops.metrics.start()
    try:
        result = run_streams(sources, ops, opts, sink=sink, render=render)
    finally:
        if timed:
            ops.metrics.stop()
        sys.setswitchinterval(switch)
        t_drain = time.perf_counter()
        enc = pool.close() if pool is not None else []  # render on: the frames still queued get encoded here
        drain_s = time.perf_counter() - t_drain
        for src in ([sources] if hasattr(sources, "feed") else sources):
            src.close()
        inner.close_copy_back()
    row = result.summary()
    stages = stage_block(row, ops.metrics.to_dict() if timed else {}, inner.launch_parts())
    # the feeder's wall split: waiting for decoded frames, waiting for the owned copies (ms a frame)
    stages.setdefault("feeder", {}).update(feeder_waits(getattr(sources, "sources", sources), row["frames"]))
    if render:  # end to end = until the last frame is encoded and the files are joined, not until it is queued
        row["fps_until_queued"], row["encoder_drain_s"] = row["fps"], drain_s
        row["fps"] = row["frames"] / (row["wall_s"] + drain_s)
    head = getattr(inner, "head", None)
    row.update({"model": model, "render": render, "preprocess": getattr(inner.pre, "kind", env.pre_kind[model]),
                "ssd_decode": ssd_decode_label(head),
                "variant": variant_label(variant, n), "max_batch": batch, "per_stream": v["per_stream"],
                "rows_per_frame": rows_per_frame(model),
                "keep": v["keep"], "source": source_label(v), "frame_copy": frame_copy_label(v),
                "buckets": list(opts.buckets),
                "gil_switch_interval_ms": v["switch_ms"] or 1000.0 * switch,
                "cuda_streams": "non-blocking + events" if v["nonblocking"] else "legacy default stream",
                "launch_parts_ms_per_batch": inner.launch_parts(),
                "stages": stages,
                "app_stage_timing": timed,
                "colour": "%s %s range" % (first["matrix"], "full" if first["full_range"] else "limited")})
    if enc:
        row["encoded_frames"] = sum(r["frames"] for r in enc)
        row["cpu_ms_per_encoded_frame"] = 1000.0 * sum(r["cpu_s"] for r in enc) / max(1, row["encoded_frames"])
    return row



# --------------------------------------------------------------------------------------------------- the matrix
def plan_settings(args: argparse.Namespace) -> Any:
    from benchmarks.common.pipeline_gpu_plan import PlanSettings, rows_per_frame

    def buckets_of(n: int, variant: str, model: str) -> int:
        return bucket(batch_of(n, VARIANTS[resolve_variant(variant, n)]["per_stream"], rows_per_frame(model)))

    return PlanSettings(models=args.models, streams=args.streams, reps=args.reps, default_variant=args.default_variant,
                        exploratory=args.exploratory, variant_streams=args.variant_streams, render_on=args.render_on, decode_procs=args.decode_procs,
                        decode_feed=args.decode_feed, decode_beside=args.decode_beside,
                        decode_beside_graph=args.decode_beside_graph, device_pool=args.device_pool, buckets_of=buckets_of)


def measure(env: "Env", args: argparse.Namespace, checkpoint: Any, state: Dict[str, Any],
            resume: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Every step of the plan (:mod:`benchmarks.common.pipeline_gpu_plan`) that fits ``--budget-s``: a step whose
    estimate would end after it is recorded in ``skipped`` and the next one is tried; ``checkpoint(res)`` before each
    (naming it: ``state["current"]``, for the watchdog and for a death) and after each keeps what a time-out or a
    death would lose.  ``resume`` (a died call's checkpoint): its results go on, its steps are not run again, and
    its measured seconds count against the budget (:mod:`benchmarks.common.pipeline_gpu_resume`)."""
    from benchmarks.common.pipeline_gpu_plan import estimate_s, fits, guess_s, plan_steps
    from benchmarks.common.pipeline_gpu_resume import done_labels, history_of, spent_s

    res: Dict[str, Any] = {"bounds_runs": {"model_only": {m: {} for m in args.models}, "decode_alone": {},
                                           "decode_alone_procs": {}, "decode_alone_feed": {}, "decode_beside_model": {},
                                           "decode_beside_model_graph": {},
                                           "encode_alone": {}},
                           "runs": [], "errors": [], "skipped": [], "step_seconds": []}
    if resume is not None:  # the same flags: its results have every key the plan records into
        res = dict(res, **resume["results"])
    state["res"] = res
    done = done_labels(res)
    history: Dict[str, List[float]] = history_of(res)
    t0 = time.perf_counter() - spent_s(res)
    for step in plan_steps(plan_settings(args)):
        if step.label in done:
            continue
        elapsed = time.perf_counter() - t0
        guess = guess_s(step, args.seconds, args.decode_seconds, args.encode_seconds, args.model_seconds)
        est = estimate_s(step, history, guess)
        if not fits(elapsed, est, args.budget_s):
            res["skipped"].append({"step": step.label, "group": step.group, "estimate_s": round(est, 1),
                                   "elapsed_s": round(elapsed, 1)})
            continue
        state["current"] = step.label
        checkpoint(res)  # names the step: a death in it is recorded against it
        t_step = time.perf_counter()
        _guard(res, step.label, lambda: run_step(env, args, res, step))
        took = time.perf_counter() - t_step
        history.setdefault(step.key, []).append(took)
        res["step_seconds"].append([step.label, round(took, 2)])  # sizes the next device call
        state["current"] = None
        checkpoint(res)
    if res["skipped"]:
        log("skipped (time budget %.0f s): %s" % (args.budget_s, "; ".join(s["step"] for s in res["skipped"])))
    return res


def run_step(env: "Env", args: argparse.Namespace, res: Dict[str, Any], step: Any) -> None:
    """One step; bound repetitions go to ``res["bounds_runs"]``, pipeline repetitions to ``res["runs"]``."""
    from benchmarks.common.pipeline_gpu_measure import (decode_alone, decode_alone_feed, decode_alone_procs,
                                                        encode_alone, host_frames)
    from benchmarks.common.pipeline_gpu_beside import decode_beside_model, decode_beside_model_graph
    from benchmarks.common.pipeline_gpu_ops import model_only
    from benchmarks.common.pipeline_gpu_plan import Step, rows_per_frame
    from benchmarks.common.pipeline_gpu_tiles import per_frame, run_detector_check

    kind, model, arg, bounds = step.kind, step.model, step.arg, res["bounds_runs"]
    files = sorted(set(env.streams.values()))
    rows = rows_per_frame(model) if model else 1  # tiles: a frame is 1 + N^2 input rows, FPS counts frames
    if kind == "model_only":
        for b in arg:
            r = per_frame(model_only(env.torch, env.sessions[model], env.models[model][1], b * rows,
                                     args.model_seconds, env.device), rows)
            bounds["model_only"][model].setdefault(str(b), []).append(dict(r, rep=step.rep))
            log("model alone %-8s batch %2d: %8.1f FPS" % (model, b, r["fps"]))
    elif kind == "detector_check":
        run_detector_check(env, res, model)
    elif kind in ("decode_alone", "decode_alone_procs", "decode_alone_feed"):
        if kind == "decode_alone":
            r = decode_alone(files, arg, env.codec, args.decode_seconds)
        elif kind == "decode_alone_feed":
            r = decode_alone_feed(files, arg, env.codec, args.decode_seconds)
        else:
            r = decode_alone_procs(files, arg, args.dry_run, args.decode_seconds)
        bounds[kind].setdefault(str(arg), []).append(dict(r, rep=step.rep))
        log("%s %2d streams: %.1f FPS" % (kind.replace("_", " "), arg, r["fps"]))
    elif kind in ("decode_beside_model", "decode_beside_model_graph"):
        b = bucket(batch_of(arg, VARIANTS[resolve_variant(args.default_variant, arg)]["per_stream"], rows))
        decode = lambda: decode_alone(files, arg, env.codec, args.decode_seconds)  # noqa: E731
        if kind == "decode_beside_model":
            capture_graphs(env, env.sessions[model], env.models[model][1], b, rows)
            r = decode_beside_model(env.torch, env.sessions[model], env.models[model][1], b * rows, env.device, decode)
        else:  # the same GPU work from one long CUDA graph: the host all but idle
            r = decode_beside_model_graph(env.torch, env.models[model][0], env.models[model][1], b * rows,
                                          env.device, decode)
        bounds[kind].setdefault("%s %d" % (model, arg), []).append(dict(r, rep=step.rep))
        log("%s %-8s %2d streams: NVDEC %.1f FPS while the model ran %.1f FPS at batch %d"
            % (kind.replace("_", " "), model, arg, r["fps"], r["model_fps"] / rows, b))
    elif kind == "encode_alone":
        frames = host_frames(files[0])
        height, width = frames[0].shape[0] * 2 // 3, frames[0].shape[1]  # NV12: (H * 3/2, W); the stream's own size
        r = encode_alone(frames, width, height, args.encoders, arg, args.encode_seconds, env.scratch / "enc")
        bounds["encode_alone"].setdefault(str(arg), []).append(dict(r, rep=step.rep))
        log("encode alone, %d workers: %.1f FPS, %.2f CPU ms per frame" % (args.encoders, r["fps"],
                                                                           r["cpu_ms_per_encoded_frame"]))
    elif kind == "pipeline":
        n, render, variant = arg
        b = bucket(batch_of(n, VARIANTS[resolve_variant(variant, n)]["per_stream"], rows))
        if str(b) not in bounds["model_only"][model]:  # its graph and its bound first
            run_step(env, args, res, Step("model_only", model, (b,), step.rep, step.group))
        capture_graphs(env, env.sessions[model], env.models[model][1], b, rows)
        before = list(os.getloadavg())
        row = pipeline_run(env, model, n, render, variant)
        row.update(rep=step.rep, group=step.group,
                   host=dict(env.host, loadavg_before=before, loadavg_after=list(os.getloadavg())))
        res["runs"].append(row)
        st = row["stages"]
        log("pipeline %-8s %2d streams render %-3s %-18s rep %d: %8.1f FPS, %.3f cores/30fps stream, feeder CPU "
            "%.3f ms/f (waits: decode %s, copies %s ms/f), launch %s, results %s, load %.1f->%.1f"
            % (model, n, "on" if render else "off", row["variant"], step.rep + 1, row["fps"],
               row["cores_per_30fps_stream"], st["feeder"]["cpu_ms"] or 0.0, _opt(st["feeder"].get("decode_wait_ms")),
               _opt(st["feeder"].get("copy_wait_ms")), _ms(st.get("launch")), _ms(st.get("results")), before[0],
               row["host"]["loadavg_after"][0]))
    elif kind == "device_pool":
        res["device_pool"] = row = device_pool_run(env, model, arg, args.device_pool)
        log("device pool: %d sessions, %d streams: %.1f FPS, batches per session %s, order kept %s"
            % (args.device_pool, arg, row["fps"], row["batches_per_device"], row["order_ok"]))


def _opt(ms: Optional[float]) -> str:
    return "-" if ms is None else "%.3f" % ms


def _ms(stage: Optional[Dict[str, Any]]) -> str:
    return "-" if not stage else "%.3f/%.3f ms" % (stage["mean_ms"], stage["cpu_ms"])


def _guard(res: Dict[str, Any], what: str, fn: Any) -> Any:
    """One failing measurement is recorded and the matrix goes on (one device call must bring back the rest)."""
    try:
        return fn()
    except Exception as err:  # recorded with its type, printed, and counted in the exit status
        import traceback

        res["errors"].append({"what": what, "error": "%s: %s" % (type(err).__name__, err)})
        log("FAILED %s: %s" % (what, traceback.format_exc()))
        return None


def main(argv: Any = None) -> int:
    args = parse_args(argv)
    if args.prep:
        from benchmarks.common.pipeline_gpu_prep import prepare

        prepare(CARRY, args.ffmpeg, args.wheel_dir)
        print_device_command(Path(args.carry))
        return 0
    from benchmarks.common.pipeline_gpu_report import report, report_partial, write_outputs

    if args.report_partial:  # here, after a call whose process died: its checkpointed JSON -> json/txt/png
        report_partial(Path(args.report_partial), args, Path(args.report_partial).parent, args.died)
        return 0
    carry = Path(args.carry)
    default_out = Path("/tmp/jf_pipeline_gpu_dry_run") if args.dry_run else HERE / "results"
    out = Path(os.environ.get("OUT") or default_out)
    out.mkdir(parents=True, exist_ok=True)
    name = "pipeline_gpu_dry_run" if args.dry_run else result_name(args.tag, gpu=True, suffix="")
    if args.restarts > 0:  # run as a child, and go on from its checkpoint when it dies (pipeline_gpu_resume)
        from benchmarks.common.pipeline_gpu_resume import supervise

        rc = supervise(Path(__file__).resolve(), list(sys.argv[1:] if argv is None else argv), out / (name + ".json"),
                       args.restarts, args.wall_limit_s, log)
        if rc == 4:  # the last child died: its checkpoint (deaths recorded) -> the outputs, marked partial
            report_partial(out / (name + ".json"), args, out, None)
        return rc
    from benchmarks.common.pipeline_gpu_resume import load_checkpoint

    resume = load_checkpoint(Path(args.resume_from)) if args.resume_from else None
    t0 = time.perf_counter()
    if not args.dry_run:
        install_wheel(carry)
    if resume is not None:
        tests = resume.get("gpu_tests", {})  # ran before the death
    else:
        tests = run_gpu_tests(args, out) if not args.dry_run else {"skipped": "dry run"}
    state: Dict[str, Any] = {"res": None, "current": "start-up", "info": {}}

    def checkpoint(res: Dict[str, Any]) -> None:
        partial = {"partial": True, "machine": state["info"], "gpu_tests": tests, "results": res,
                   "current": state.get("current")}
        (out / (name + ".json")).write_text(json.dumps(partial, indent=1, default=str))  # replaced at the end

    start_watchdog(args.wall_limit_s - (time.perf_counter() - t0), state, checkpoint)
    env = Env(args, carry)
    state["info"] = machine(env)
    env.host = {"cpu": state["info"].get("cpu"), "cores": state["info"].get("cpu_cores_usable")}
    res = measure(env, args, checkpoint, state, resume)
    state["info"]["loadavg_end"] = list(os.getloadavg())
    write_outputs(report(res, args, tests, state["info"], time.perf_counter() - t0), out, name)
    if args.dry_run:
        print_device_command(carry)
    return 1 if res["errors"] else 0


def print_device_command(carry: Path) -> None:
    """The one device call this script is made for, with what travels (64 MiB at most, working tree included)."""
    size = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file()) if carry.is_dir() else 0
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=str(ROOT),
                            capture_output=True).stdout.split(b"\0")
    tree = sum((ROOT / p.decode()).stat().st_size for p in listed if p and (ROOT / p.decode()).is_file())
    over = (size + tree) / 2 ** 20 - CALL_LIMIT_MIB
    log("device call (carry %s: %.1f MiB; working tree %.1f MiB; %d MiB in all%s):" % (
        carry.relative_to(ROOT) if carry.is_relative_to(ROOT) else carry, size / 2 ** 20, tree / 2 ** 20,
        CALL_LIMIT_MIB, "" if over <= 0 else ": %.1f MiB over -- move result folders the call does not need (the "
        "largest: benchmarks/estimator/results) out of the tree for the call and back after it" % over))
    log("  " + DEVICE_COMMAND)


CALL_LIMIT_MIB = 64  # what one device call carries: the working tree and the carried folder together
DEVICE_COMMAND = ("set -o pipefail; PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1 "
                  "python3 benchmarks/gpu_pipeline/pipeline_gpu.py --models classify,people,people-tiles2 --render-on "
                  "--no-decode-procs --decode-beside --variant-streams 1,4,16,32 --variants auto-hostdecode "
                  "--restarts 2 --budget-s 430 --wall-limit-s 540 2>&1 | tee $OUT/pipeline_gpu.log   "
                  "# carry: build/gpu_pipeline, timeout_s 590")


def start_watchdog(seconds: float, state: Dict[str, Any], checkpoint: Any) -> None:
    """The script's own wall limit: after ``seconds`` the partial JSON records the point that was cut and the
    process exits at once (os._exit: a hung decoder, CUDA call or thread cannot keep a device call waiting)."""
    if seconds <= 0:
        return

    def fire() -> None:
        res = state.get("res") or {"pipeline": [], "errors": []}
        res.setdefault("errors", []).append({"what": state.get("current"), "error": "cut by the script's wall "
                                             "limit (--wall-limit-s)"})
        log("WALL LIMIT %.0f s reached during %s: partial results kept, exiting" % (seconds, state.get("current")))
        try:
            checkpoint(res)
        finally:
            os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()



def machine(env: "Env") -> Dict[str, Any]:
    from jetforge.apps.pipeline import machine_info

    info = machine_info()
    info["torch"] = env.torch.__version__
    if env.device == "cuda":
        info["gpu"] = env.torch.cuda.get_device_name(0)
    info["decoder"] = getattr(env.codec, "__version__", "?")
    info["loadavg_start"] = list(os.getloadavg())
    return info


def parse_args(argv: Any) -> argparse.Namespace:
    from dataclasses import asdict

    from jetforge.apps.pipeline.gpu_app import GpuAppOptions

    app = GpuAppOptions()  # the goal rows run the app's defaults
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prep", action="store_true", help="make the carry folder here (streams, wheel, weights)")
    ap.add_argument("--dry-run", action="store_true", help="run everything on the CPU with the fake decoder")
    ap.add_argument("--carry", default=str(CARRY))
    ap.add_argument("--ffmpeg", default=None, help="ffmpeg with libx264 for --prep (default: imageio-ffmpeg's)")
    ap.add_argument("--wheel-dir", default="/tmp/whl", help="folder with the PyNvVideoCodec wheel for --prep")
    ap.add_argument("--models", default="classify,people", type=lambda s: s.split(","),
                    help="classify (MobileNetV2), people (the SSD person detector): the goal rows; people-tiles2: the "
                         "detector with --detector-tiles 2 (5 rows a frame), measured after the goal rows")
    ap.add_argument("--streams", default="1,4,16,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per point (the median is reported; >= 3)")
    ap.add_argument("--render-on", action="store_true", help="also render on at 16 streams, both models (after "
                    "the goal rows; the encoder pool alone as its bound)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per pipeline repetition")
    ap.add_argument("--decode-seconds", type=float, default=3.0)
    ap.add_argument("--encode-seconds", type=float, default=4.0)
    ap.add_argument("--model-seconds", type=float, default=0.5)
    ap.add_argument("--no-decode-procs", dest="decode_procs", action="store_false",
                    help="leave out NVDEC alone in worker processes (the decode bound is then one thread a stream)")
    ap.add_argument("--decode-feed", action="store_true", help="also NVDEC alone the way the feed layout decodes "
                    "(ThreadedDecoders read by one thread, frames dropped), at --variant-streams, recorded apart: "
                    "the decode layout's own ceiling")
    ap.add_argument("--decode-beside", action="store_true", help="also NVDEC alone while each model runs back to "
                    "back on the SMs, at --variant-streams, recorded apart: whether the two engines slow each other")
    ap.add_argument("--decode-beside-graph", action="store_true", help="also NVDEC beside the "
                    "same model work run from one long CUDA graph (the host all but idle), recorded apart: whether "
                    "the host's side of running the model is what slows NVDEC")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="seconds of measuring: a step that "
                    "would end after this is skipped and recorded (0: no budget; the goal rows run first)")
    ap.add_argument("--encoders", type=int, default=8, help="CPU encoder worker processes (render on)")
    ap.add_argument("--batch-timeout-ms", type=float, default=1000.0 * app.batch_timeout_s,
                    help="batched-push-timeout (default: the app's)")
    ap.add_argument("--variants", dest="exploratory", default="", type=lambda s: [v for v in s.split(",") if v],
                    help="exploratory host layouts, measured after everything else and recorded apart: %s; "
                         "NAME%s: the same layout without the app's per-frame stage timing (the harness's own A/B)"
                         % (", ".join(VARIANTS), UNTIMED))
    ap.add_argument("--variant-streams", default="", type=lambda s: [int(x) for x in s.split(",") if x],
                    help="the stream counts (of --streams) the --variants run at (default: all of them)")
    ap.add_argument("--wall-limit-s", type=float, default=0.0,
                    help="exit (code 3) after this many seconds of the whole script, keeping the partial JSON")
    ap.add_argument("--torch-preprocess", action="store_true", help="use the torch fallback, not the NVRTC kernel")
    ap.add_argument("--device-pool", type=int, default=0,
                    help="sessions of MobileNetV2 standing in for GPU + DLA engines in the scheduler run (0: skip; "
                         "it hung on the H200 in both runs that reached it)")
    ap.add_argument("--report-partial", default="", metavar="JSON", help="no measuring: the json/txt/png of a "
                    "call whose process died, from its partial JSON (give the call's own flags beside it)")
    ap.add_argument("--died", default="the process died", help="with --report-partial: what killed it (its log)")
    ap.add_argument("--restarts", type=int, default=0, help="run as a child process; when it dies (a native crash), "
                    "go on from its checkpoint in a new one, up to this many times within --wall-limit-s")
    ap.add_argument("--resume-from", default="", metavar="JSON", help="a died call's checkpoint: its steps are kept "
                    "and not run again (what --restarts gives each new child)")
    ap.add_argument("--gpu-tests", default="", help="pytest paths of GPU tests to run first")
    ap.add_argument("--gpu-tests-timeout", type=float, default=120.0)
    ap.add_argument("--scratch", default="/tmp/jf_pipeline_gpu")
    ap.add_argument("--tag", default="gpu-path", help="the variant part of the result name "
                                                       "(<device>_<date>_<tag>.{json,txt,png}; default gpu-path)")
    args = ap.parse_args(argv)
    from benchmarks.common.pipeline_gpu_plan import known_model

    if not all(known_model(m) for m in args.models):
        ap.error("unknown model(s) %s; known: classify, people, people-tiles2 (people-tilesN, N 2..4)"
                 % ", ".join(m for m in args.models if not known_model(m)))
    unknown = [v for v in args.exploratory if split_untimed(v)[0] not in VARIANTS]
    if unknown:
        ap.error("unknown variant(s) %s; known: %s (each also as NAME%s: without the app's per-frame stage timing)"
                 % (", ".join(unknown), ", ".join(VARIANTS), UNTIMED))
    stray = [n for n in args.variant_streams if n not in args.streams]
    if stray:
        ap.error("--variant-streams %s not in --streams %s: a variant's point needs its goal row beside it"
                 % (",".join(map(str, stray)), ",".join(map(str, args.streams))))
    if args.reps < 1:
        ap.error("--reps must be at least 1 (the issue asks for 3 or more)")
    args.default_variant = DEFAULT_VARIANT
    args.exploratory = [v for v in args.exploratory if v != DEFAULT_VARIANT]
    args.app_defaults = asdict(app)
    args.warmup_frames = app.warmup_frames
    VARIANTS[DEFAULT_VARIANT].update(per_stream=app.per_stream, switch_ms=app.gil_switch_ms)
    if args.dry_run:  # the whole script on a small CPU in well under 3 minutes: short points, at most 3 streams
        args.streams = sorted({min(n, 2) for n in args.streams})[:2]
        args.variant_streams = sorted({min(n, 2) for n in args.variant_streams} & set(args.streams))
        args.warmup_frames = 1  # a 1-s point gives each stream only a few frames: keep their stage times
        args.seconds, args.decode_seconds, args.encode_seconds = 1.0, 1.0, 1.5
        args.model_seconds = 0.2
        args.render_on = True  # the render path runs here too
    return args


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: decoder/CUDA objects or a stray thread must not hold a device call
