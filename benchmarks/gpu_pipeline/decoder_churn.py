"""Is PyNvVideoCodec's ThreadedDecoder safe to restart?  N decoders restarted over and over, each way in its own
process, and whether the process survives.

Why: the GPU-path benchmark died of native heap corruption (``malloc(): unaligned tcache chunk detected``,
``tcache_thread_shutdown()``, a segmentation fault) in 4 of ~17 device calls, each time at a different place in
jetforge's Python but always in a process whose ThreadedDecoders had been restarting: a looping source (the
benchmark's, and ``jetforge app --loop``'s) calls ``reconfigure_decoder`` each time its clip ends, hundreds of times
a call at 16 streams, and sources end and start between points.  This isolates that: ``--decoders`` ThreadedDecoders
on the clip, each cycle every decoder fetches ``--frames`` frames (copied into a DeviceFrameRing by the app's copy
kernel, as the pipeline does) and then is restarted one way:

* ``reconfigure``: ``reconfigure_decoder(path)`` (what NvThreadedSource does at the end of a looping clip);
* ``recreate``: ``end()``, then a new ThreadedDecoder;
* ``steady``: not restarted (the control: the same decoding and copies, no restart; capped below the clip's length
  so that no decoder reaches its end);
* ``sources``: the app's NvThreadedSources opened, read and closed each cycle, their decoders reused through the
  process's pool (``decoder_pool.POOL``, made after ``recreate`` was found to kill the process);
* ``sources-noreuse``: the same with ``reuse_decoders=False`` (each close ends its decoder, each open makes one);
* ``sources-grow``: the pooled sources as the GPU-path benchmark opens them between its points: each cycle a
  different number of them (1, 4, then half and all of ``--decoders``, over and over), read by threads of two
  sources each (the app's feed pairs), so that new decoders are made while pooled ones are reused and decoding.
  Added after one of three full benchmark calls (2026-12-07) aborted with ``malloc_consolidate(): unaligned fastbin
  chunk detected`` just after it went from 16 to 32 streams, with the pool in use;
* ``sources-grow-primed``: the same after the pool was filled once with ``--decoders`` decoders (all opened at once
  and closed, none read): no decoder is made after the first cycle's reads begin.

Each way runs in a child process with its own time limit; reported per way: the child's exit (0, or the signal
that killed it), the cycles and restarts done, the last lines it wrote (the abort message).  A way that dies where
the control does not is the unsafe one.

    python3 benchmarks/gpu_pipeline/decoder_churn.py            # a CUDA GPU with NVDEC (carry build/gpu_pipeline)
    .venv/bin/python benchmarks/gpu_pipeline/decoder_churn.py --dry-run --cycles 3 --decoders 2   # the CPU stand-in
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_name, use_checkout  # noqa: E402

use_checkout()

CARRY = ROOT / "build" / "gpu_pipeline"
WAYS = ("steady", "reconfigure", "recreate", "sources", "sources-noreuse", "sources-grow", "sources-grow-primed")
STEADY_FRAMES = 800  # the control stays below the carried clip's 900 frames: no decoder reaches its end


def child(way: str, clip: str, decoders: int, cycles: int, frames: int, dry_run: bool) -> int:
    """One way, in this (child) process: prints ``cycle N restarts R`` after every cycle (flushed), then ``done``."""
    import faulthandler

    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing

    faulthandler.enable()
    if dry_run:
        from tests.standins.fake_nvdec import FakeNvDecoder as nvc
    else:
        sys.path.insert(0, "/tmp/site")  # the carried wheel, installed by the parent
        import PyNvVideoCodec as nvc
    if way.startswith("sources-grow"):
        return grow_sources(nvc, clip, decoders, cycles, frames, primed=way == "sources-grow-primed")
    if way.startswith("sources"):
        return churn_sources(nvc, clip, decoders, cycles, frames, reuse=way == "sources")
    demuxer = nvc.CreateDemuxer(filename=clip)
    width, height = int(demuxer.Width()), int(demuxer.Height())
    del demuxer

    def new_decoder() -> Any:
        return nvc.ThreadedDecoder(clip, 12, gpu_id=0, use_device_memory=True)

    decs = [new_decoder() for _ in range(decoders)]
    rings = [DeviceFrameRing(slots=2 * frames, defer_sync=True) for _ in range(decoders)]
    if way == "steady":
        cycles = min(cycles, STEADY_FRAMES // frames)
    restarts = 0
    for cycle in range(1, cycles + 1):
        for d in range(decoders):
            got = 0
            while got < frames:
                batch = decs[d].get_batch_frames(min(4, frames - got))
                if not batch:
                    break
                for f in batch:
                    rings[d](f, width, height)  # the owned copy, queued; made by one kernel launch in flush()
                rings[d].flush()
                got += len(batch)
            if way == "reconfigure":
                decs[d].reconfigure_decoder(clip)
                restarts += 1
            elif way == "recreate":
                decs[d].end()
                decs[d] = new_decoder()
                restarts += 1
        print("cycle %d restarts %d" % (cycle, restarts), flush=True)
    for dec, ring in zip(decs, rings):
        dec.end()
        ring.close()
    print("done", flush=True)
    return 0


def churn_sources(nvc: Any, clip: str, decoders: int, cycles: int, frames: int, reuse: bool) -> int:
    """The app's own sources, as the benchmark uses them between its points: each cycle ``decoders`` NvThreadedSources
    are opened, read ``frames`` frames each and closed.  ``reuse``: their decoders go through the process's pool
    (decoder_pool.POOL: a closed source's decoder pointed at the next one's file); else each close ends its decoder
    and each open makes a new one (what the sources did before the pool)."""
    from jetforge.apps.video.sources.gpu.decoder_pool import POOL
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    options = ThreadedDecodeOptions(reuse_decoders=reuse)
    restarts = 0
    for cycle in range(1, cycles + 1):
        sources = [NvThreadedSource(clip, stream=d, codec_module=nvc, options=options,
                                    keep=DeviceFrameRing(slots=2 * frames, defer_sync=True)) for d in range(decoders)]
        for src in sources:
            for _ in range(frames):
                if src.read() is None:
                    break
        for src in sources:
            src.close()
        restarts += decoders
        print("cycle %d restarts %d" % (cycle, restarts), flush=True)
    POOL.drain()
    print("done", flush=True)
    return 0


def grow_counts(decoders: int) -> List[int]:
    """The source counts the grow ways cycle through: the benchmark's 1, 4, 16, 32 streams scaled to ``decoders``."""
    counts = [1, 4, max(1, decoders // 2), decoders]
    return [min(c, decoders) for c in counts]


def grow_sources(nvc: Any, clip: str, decoders: int, cycles: int, frames: int, primed: bool) -> int:
    """``sources-grow`` / ``-primed``: pooled NvThreadedSources, a different number each cycle (:func:`grow_counts`),
    each read ``frames`` frames by threads of two sources each, then all closed."""
    import threading

    from jetforge.apps.video.sources.gpu.decoder_pool import POOL
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    options = ThreadedDecodeOptions(reuse_decoders=True)

    def open_sources(n: int) -> List[Any]:
        return [NvThreadedSource(clip, stream=d, codec_module=nvc, options=options,
                                 keep=DeviceFrameRing(slots=2 * frames, defer_sync=True)) for d in range(n)]

    def read_pair(pair: List[Any], errors: List[BaseException]) -> None:
        try:
            for _ in range(frames):
                for src in pair:
                    src.read()
        except BaseException as err:  # reported by the cycle (a thread's exception would otherwise only be printed)
            errors.append(err)

    if primed:
        for src in open_sources(decoders):
            src.close()
    counts, restarts = grow_counts(decoders), 0
    for cycle in range(1, cycles + 1):
        sources = open_sources(counts[(cycle - 1) % len(counts)])
        errors: List[BaseException] = []
        threads = [threading.Thread(target=read_pair, args=(sources[i:i + 2], errors))
                   for i in range(0, len(sources), 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for src in sources:
            src.close()
        if errors:
            raise errors[0]
        restarts += len(sources)
        print("cycle %d restarts %d" % (cycle, restarts), flush=True)
    POOL.drain()
    print("done", flush=True)
    return 0


def run_way(args: argparse.Namespace, way: str) -> Dict[str, Any]:
    """One way in a child process with its own time limit: its exit, progress and last lines."""
    cmd = [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "--child", way, "--clip", args.clip,
           "--decoders", str(args.decoders), "--cycles", str(args.cycles), "--frames", str(args.frames)]
    if args.dry_run:
        cmd.append("--dry-run")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.way_timeout_s, cwd=str(ROOT))
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    return way_result(way, rc, out, err, time.perf_counter() - t0)


def run_ways(args: argparse.Namespace) -> List[Dict[str, Any]]:
    """Every way, one child after another.  A SIGTERM to this process (the device call's time limit, a user's kill)
    stops the running child too -- ``subprocess.run`` kills it as the exit passes through -- and exits with 143,
    instead of leaving a child decoding on its own until its ``--way-timeout-s``."""
    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return [run_way(args, way) for way in args.ways]
    finally:
        signal.signal(signal.SIGTERM, previous)


def way_result(way: str, rc: Any, out: str, err: str, seconds: float) -> Dict[str, Any]:
    """A child's record: its exit (a number, "signal N" for a negative return code, or "timeout"), whether it died
    (any exit but 0) or finished ("done" printed), the cycles and restarts it reported last, and where it died the
    first lines of its error output (the C library's abort message comes first)."""
    progress = [line.split() for line in out.splitlines() if line.startswith("cycle ")]
    cycles, restarts = (int(progress[-1][1]), int(progress[-1][3])) if progress else (0, 0)
    died = rc != 0
    return {"way": way, "exit": rc if isinstance(rc, str) or rc >= 0 else "signal %d" % -rc, "died": died,
            "finished": "done" in out.splitlines(), "cycles": cycles, "restarts": restarts,
            "seconds": round(seconds, 1),
            "last_lines": [line for line in err.strip().splitlines() if line.strip()][:6] if died else []}


def table(doc: Dict[str, Any]) -> str:
    head = "%-19s %-10s %-8s %7s %9s %8s  %s" % ("way", "exit", "finished", "cycles", "restarts", "seconds",
                                                 "first lines of its error output")
    lines = ["%d ThreadedDecoders, %d frames each a cycle, up to %d cycles (steady: %d); %s"
             % (doc["decoders"], doc["frames"], doc["cycles"], STEADY_FRAMES // doc["frames"], doc["machine"]),
             head, "-" * len(head)]
    for r in doc["ways"]:
        lines.append("%-19s %-10s %-8s %7d %9d %8.1f  %s" % (r["way"], r["exit"], r["finished"], r["cycles"],
                                                          r["restarts"], r["seconds"], " | ".join(r["last_lines"][:2])))
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="the CPU stand-in decoder (tests/standins/fake_nvdec.py)")
    ap.add_argument("--clip", default=str(CARRY / "streams" / "people720.mp4"))
    ap.add_argument("--decoders", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=200, help="cycles per way (steady: at most %d frames a decoder)"
                    % STEADY_FRAMES)
    ap.add_argument("--frames", type=int, default=8, help="frames each decoder gives a cycle")
    ap.add_argument("--ways", default=",".join(WAYS), type=lambda s: s.split(","))
    ap.add_argument("--way-timeout-s", type=float, default=60.0)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="decoder-churn")
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.clip, args.decoders, args.cycles, args.frames, args.dry_run)
    unknown = [w for w in args.ways if w not in WAYS]
    if unknown or not Path(args.clip).is_file():
        ap.error("unknown way(s) %s (known: %s)" % (", ".join(unknown), ", ".join(WAYS)) if unknown else
                 "no clip at %s: make it with pipeline_gpu.py --prep, or give --clip" % args.clip)
    if not args.dry_run:
        from benchmarks.gpu_pipeline.pipeline_gpu import install_wheel

        install_wheel(CARRY)
    from jetforge.apps.pipeline import machine_info

    info = machine_info()
    doc = {"benchmark": "decoder_churn", "dry_run": args.dry_run, "decoders": args.decoders, "frames": args.frames,
           "cycles": args.cycles, "clip": Path(args.clip).name,
           "machine": "%s, %s cores" % (info.get("cpu"), info.get("cpu_cores_usable")),
           "ways": run_ways(args)}
    out = Path(os.environ.get("OUT") or ("/tmp/jf_decoder_churn" if args.dry_run else ROOT / "benchmarks" /
                                         "gpu_pipeline" / "results"))
    out.mkdir(parents=True, exist_ok=True)
    name = "decoder_churn_dry_run" if args.dry_run else result_name(args.tag, gpu=True, suffix="")
    from jetforge.fileio import write_json_atomic, write_text_atomic

    text = table(doc)
    print(text, flush=True)
    write_json_atomic(out / (name + ".json"), doc)
    write_text_atomic(out / (name + ".txt"), text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
