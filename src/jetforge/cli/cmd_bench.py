"""``jetforge bench``: latency, throughput, stage split, memory and energy of one model on one backend."""

import argparse
from pathlib import Path
from typing import Any, Dict, List

from jetforge.cli.arguments import (add_accuracy_flags, add_bench_io_flags, add_dla_core_flag, add_json_flag,
                                    add_out_flag, add_run_length_flags, add_threads_flag)
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT
from jetforge.errors import ConfigError
from jetforge.fileio import check_not_input, check_output_path, write_json_atomic
from jetforge.runtime.bench import SEED
from jetforge.runtime.bench_inputs import parse_load_inputs
from jetforge.runtime.bench_profile import format_profile
from jetforge.runtime.session import BACKENDS, backend_suffixes
from jetforge.runtime.tensorrt.trtexec import notes_for_bench
from jetforge.table import format_table


class BenchCommand(Command):
    name = "bench"
    description = ("Benchmark MODEL (.onnx, .engine/.plan, TorchScript .pt/.ts) on one backend: warm-up, then "
                   "ITERATIONS blocking calls (mean, p50/p90/p95/p99, throughput), then a pass with stage timing "
                   "(CUDA events: host-to-device, compute, device-to-host, like trtexec) giving the host overhead "
                   "per call. Memory: process RSS, GPU memory through NVML, tegrastats on a Jetson (with energy per "
                   "inference when power rails are readable).  --accuracy LABELS then runs labelled images through "
                   "the same session: AP per class (detectors) or top-1/top-5 (classifiers), with intervals.")
    examples = """examples:
  jetforge bench model.onnx                              # ONNX Runtime on this machine
  jetforge bench model.engine --dla-core 0 --batch 1     # a TensorRT engine on DLA core 0
  jetforge bench model.engine --no-cuda-graph            # plain enqueue instead of a CUDA graph
  jetforge bench model.onnx --iterations 500 --json --plot latency.png
  jetforge bench model.onnx --out results/               # writes results/bench.json and results/latency.png
  jetforge bench model.onnx --shapes input=8x3x224x224 --duration 10 --warmup-ms 500
  jetforge bench model.onnx --load-inputs input:frame.npy --export-times times.json --profile profile.json
  jetforge bench det.engine --accuracy val.coco.json      # latency, then AP per class of that engine
  jetforge bench det.onnx --accuracy people_boxes.json --accuracy-samples 20
  jetforge bench cls.onnx --accuracy val.txt --accuracy-images val/   # top-1/top-5 of a classifier
every run prints the equivalent trtexec command line"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="MODEL", help="model file (.onnx, .engine/.plan, .pt/.ts)")
        parser.add_argument("--backend", default="auto", metavar="NAME",
                            help="auto (default: by the file suffix) or one of: %s" % "; ".join(
                                "%s (%s) = %s" % (name, " ".join(backend_suffixes(name)), summary)
                                for name, summary in BACKENDS.summaries()))
        parser.add_argument("--batch", type=COUNT.argtype, default=None,
                            help="batch size (dynamic batch axis; default: the batch --shapes gives, else 1); at most "
                                 "what fits in free memory (checked against the model's input size)")
        add_run_length_flags(parser)
        graph = parser.add_mutually_exclusive_group()
        graph.add_argument("--cuda-graph", dest="cuda_graph", action="store_true", default=None,
                           help="capture and replay a CUDA graph (default where the backend has them)")
        graph.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                           help="plain enqueue, no CUDA graph")
        add_dla_core_flag(parser, "DLA core for a TensorRT engine")
        add_threads_flag(parser, "ONNX Runtime intra-op threads: 0 (its choice) up to this machine's CPUs "
                                 "(default: the CPUs)")
        add_bench_io_flags(parser)
        add_accuracy_flags(parser)
        parser.add_argument("--plot", metavar="FILE.png", help="write a latency histogram")
        add_out_flag(parser, "DIR", "write DIR/bench.json (and DIR/latency.png)")
        parser.add_argument("--seed", type=SEED.argtype, default=0, help="seed of the random inputs, 0 or more "
                                                                           "(default 0)")
        parser.add_argument("--trust-pickle", action="store_true",
                            help="allow a TorchScript (.pt/.ts) or torch.export (.pt2) MODEL: both run code stored "
                                 "in the file when opened, so give this only for files you made yourself")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.runtime.bench import run_benchmark
        from jetforge.runtime.bench_inputs import bench_feeds
        from jetforge.runtime.session import open_session

        options: Dict[str, Any] = {}
        if args.threads is not None:
            options["threads"] = args.threads
        if args.trust_pickle:
            options["trust_code"] = True
        _check_outputs(args)
        with open_session(args.model, backend=args.backend, dla_core=args.dla_core, cuda_graph=args.cuda_graph,
                          **options) as session:
            if args.profile and session.backend != "onnxruntime":
                raise ConfigError("--profile reads ONNX Runtime's profiler; the %s backend has none wired in "
                                  "jetforge (TensorRT's per-layer IProfiler is not)" % session.backend,
                                  hint="on the board run: %s" % _trtexec(args, session, {}))
            feeds = bench_feeds(session, args.shape, args.load_inputs, args.batch, args.seed)
            accuracy = _accuracy_plan(args, session, feeds)  # checked before the timed run, measured after it
            result = run_benchmark(session, feeds=feeds, iterations=args.iterations, warmup=args.warmup,
                                   seed=args.seed, progress=not args.json, duration_s=args.duration,
                                   warmup_ms=args.warmup_ms or 0.0)
            shapes = {name: list(a.shape) for name, a in feeds.items()}
            data = result.to_dict()
            data["trtexec"] = _trtexec(args, session, shapes)
            data["trtexec_notes"] = notes_for_bench(args.load_inputs, _is_engine(session))
            if accuracy is not None:
                from jetforge.calibrate.bench_accuracy import measure_accuracy

                data["accuracy"] = measure_accuracy(accuracy, progress=not args.json)
        written = self._write(args, result, data, feeds, options)
        if args.json:
            print_json(dict(data, files=written))
        else:
            print(format_report(data))
            for path in written:
                print("wrote %s" % path)
        return 0

    @staticmethod
    def _write(args: argparse.Namespace, result: Any, data: Dict[str, Any], feeds: Dict[str, Any],
               options: Dict[str, Any]) -> List[str]:
        from jetforge.runtime.bench import plot_histogram
        from jetforge.runtime.bench_profile import export_times, profile_onnx, write_profile

        written: List[str] = []
        if args.profile:  # a separate pass on a second session, after the timed one (trtexec --separateProfileRun)
            data["profile"] = profile_onnx(args.model, feeds, min(data["iterations"], PROFILE_CALLS),
                                           **{k: v for k, v in options.items() if k == "threads"})
            written.append(str(write_profile(data["profile"], args.profile)))
        if args.export_times:
            written.append(str(export_times(result.times_s, args.export_times)))
        if args.out:
            written.append(str(write_json_atomic(Path(args.out) / "bench.json", data)))
            written.append(str(plot_histogram(result, Path(args.out) / "latency.png")))
        if args.plot:
            written.append(str(plot_histogram(result, args.plot)))
        return written


#: calls the profiling pass makes at most (a profile's per-call numbers settle in tens of calls; the trace of
#: thousands of calls is hundreds of MB)
PROFILE_CALLS = 50


def _accuracy_plan(args: argparse.Namespace, session: Any, feeds: Dict[str, Any]) -> Any:
    """What ``--accuracy`` will measure on ``session`` (None without it); its refusals come before the timed run."""
    if args.accuracy is None:
        if args.accuracy_samples is not None or args.accuracy_images is not None:
            raise ConfigError("--accuracy-samples and --accuracy-images go with --accuracy LABELS",
                              hint="add --accuracy LABELS, or drop them")
        return None
    from jetforge.calibrate.bench_accuracy import plan_accuracy

    return plan_accuracy(session, args.accuracy, feeds, args.accuracy_samples, args.accuracy_images)


def _is_engine(session: Any) -> bool:
    return session.backend == "tensorrt"


def _trtexec(args: argparse.Namespace, session: Any, shapes: Dict[str, List[int]]) -> str:
    from jetforge.runtime.tensorrt.trtexec import bench_command

    return bench_command(args.model, engine=_is_engine(session), shapes=shapes, iterations=args.iterations,
                         duration_s=args.duration, warmup_ms=args.warmup_ms, dla_core=args.dla_core,
                         cuda_graph=args.cuda_graph,
                         load_inputs=parse_load_inputs(args.load_inputs) if args.load_inputs else None,
                         export_times=args.export_times, profile=args.profile)


def _check_outputs(args: argparse.Namespace) -> None:
    """Every file the run will write: checked before the benchmark runs (never over an input), not after."""
    outputs: List[Path] = [Path(p) for p in (args.plot, args.export_times, args.profile) if p]
    if args.out:
        outputs += [Path(args.out) / "bench.json", Path(args.out) / "latency.png"]
    inputs = [args.model] + [str(p) for p in parse_load_inputs(args.load_inputs).values()]
    for path in outputs:
        check_not_input(path, inputs)
        check_output_path(path)
    if args.plot and not args.plot.lower().endswith(".png"):
        raise ConfigError("--plot writes a PNG file; got %r" % args.plot, hint="e.g. --plot latency.png")
    for flag, value in (("--export-times", args.export_times), ("--profile", args.profile)):
        if value and not value.lower().endswith(".json"):
            raise ConfigError("%s writes a JSON file; got %r" % (flag, value), hint="e.g. %s times.json" % flag)


def format_report(data: Dict[str, Any]) -> str:
    """The printed summary: what ran, latency table, throughput, stage split, memory, energy."""
    lat = data["latency_ms"]
    rows = [["steady state"] + ["%.3f" % lat[k] for k in ("mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms",
                                                           "max_ms")]]
    stages = data.get("stages_ms") or {}
    for key in ("h2d", "compute", "d2h", "wall"):
        if key in stages:
            s = stages[key]
            label = {"h2d": "host to device", "compute": "compute", "d2h": "device to host",
                     "wall": "wall (timed pass)"}[key]
            rows.append([label] + ["%.3f" % s[k] for k in ("mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms",
                                                            "max_ms")])
    table = format_table(["ms", "mean", "p50", "p90", "p95", "p99", "max"], rows)
    thr = data["throughput"]
    warm = data["warmup"]
    mem = data["memory"]
    lines = [
        "model     %s" % data["model"],
        "backend   %s" % data["backend"].get("description", data["backend"].get("backend")),
        "batch     %d, %d warm-up + %d timed calls" % (data["batch"], data["warmup_iterations"], data["iterations"]),
        "inputs    %s" % "; ".join("%s %s %s" % (name, "x".join(str(d) for d in t["shape"]), t["dtype"])
                                   for name, t in data["inputs"].items()),
        "",
        table,
        "",
        "throughput   %.1f inferences/s (%.1f images/s)" % (thr["inferences_per_s"], thr["images_per_s"]),
        "warm-up      first call %.2f ms, warm-up mean %.3f ms, steady mean %.3f ms (drift %+.1f %% first->second half)"
        % (warm["first_call_ms"], warm["mean_ms"], warm["steady_mean_ms"], data["steady_state"]["drift_pct"]),
    ]
    if data.get("host_overhead_ms_per_call") is not None:
        lines.append("host overhead %.1f us per call (wall minus %s-timed stages)"
                     % (data["host_overhead_ms_per_call"] * 1000.0, stages.get("source")))
    proc = mem["process"]
    lines.append("memory       RSS %.0f MiB (peak %.0f MiB)" % (proc["rss_mib"], proc["peak_rss_mib"]))
    gpu = mem.get("gpu") or {}
    if gpu.get("available"):
        extra = ", this process %.0f MiB" % gpu["process_used_mib"] if "process_used_mib" in gpu else ""
        lines.append("GPU memory   %.0f / %.0f MiB used on %s%s" % (gpu["used_mib"], gpu["total_mib"],
                                                                   gpu.get("device"), extra))
    else:
        lines.append("GPU memory   not measured: %s" % gpu.get("reason", "unknown"))
    energy = data.get("energy") or {}
    if energy.get("mj_per_inference") is not None:
        lines.append("energy       %.2f mJ per inference (%s)" % (energy["mj_per_inference"], energy.get("source")))
    else:
        lines.append("energy       not measured: %s" % energy.get("reason", "unknown"))
    if data.get("profile"):
        lines.append(format_profile(data["profile"]))
    if data.get("accuracy"):
        from jetforge.calibrate.bench_accuracy import accuracy_lines

        lines += accuracy_lines(data["accuracy"])
    if data.get("trtexec"):
        lines.append("trtexec      %s" % data["trtexec"])
        lines += ["             (%s)" % note for note in data.get("trtexec_notes", [])]
    return "\n".join(lines)
