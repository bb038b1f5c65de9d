"""``jetforge bench``: latency, throughput, stage split, memory and energy of one model on one backend."""

import argparse
from pathlib import Path
from typing import Any, Dict, List

from jetforge.cli.arguments import add_dla_core_flag, add_json_flag, add_out_flag, add_threads_flag
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT, NON_NEGATIVE
from jetforge.table import format_table
from jetforge.errors import ConfigError
from jetforge.fileio import check_not_input, check_output_path, write_json_atomic
from jetforge.runtime.bench import SEED
from jetforge.runtime.session import BACKENDS, backend_suffixes


class BenchCommand(Command):
    name = "bench"
    description = ("Benchmark MODEL (.onnx, .engine/.plan, TorchScript .pt/.ts) on one backend: warm-up, then "
                   "ITERATIONS blocking calls (mean, p50/p90/p95/p99, throughput), then a pass with stage timing "
                   "(CUDA events: host-to-device, compute, device-to-host, like trtexec) giving the host overhead "
                   "per call. Memory: process RSS, GPU memory through NVML, tegrastats on a Jetson (with energy per "
                   "inference when power rails are readable).")
    examples = """examples:
  jetforge bench model.onnx                              # ONNX Runtime on this machine
  jetforge bench model.engine --dla-core 0 --batch 1     # a TensorRT engine on DLA core 0
  jetforge bench model.engine --no-cuda-graph            # plain enqueue instead of a CUDA graph
  jetforge bench model.onnx --iterations 500 --json --plot latency.png
  jetforge bench model.onnx --out results/               # writes results/bench.json and results/latency.png"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="MODEL", help="model file (.onnx, .engine/.plan, .pt/.ts)")
        parser.add_argument("--backend", default="auto", metavar="NAME",
                            help="auto (default: by the file suffix) or one of: %s" % "; ".join(
                                "%s (%s) = %s" % (name, " ".join(backend_suffixes(name)), summary)
                                for name, summary in BACKENDS.summaries()))
        parser.add_argument("--batch", type=COUNT.argtype, default=1,
                            help="batch size (dynamic batch axis; default 1); at most what fits in free memory "
                                 "(checked against the model's input size)")
        parser.add_argument("--iterations", type=COUNT.argtype, default=200,
                            help="timed steady-state calls (default 200)")
        parser.add_argument("--warmup", type=NON_NEGATIVE.argtype, default=20,
                            help="untimed warm-up calls (default 20)")
        graph = parser.add_mutually_exclusive_group()
        graph.add_argument("--cuda-graph", dest="cuda_graph", action="store_true", default=None,
                           help="capture and replay a CUDA graph (default where the backend has them)")
        graph.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                           help="plain enqueue, no CUDA graph")
        add_dla_core_flag(parser, "DLA core for a TensorRT engine")
        add_threads_flag(parser, "ONNX Runtime intra-op threads: 0 (its choice) up to this machine's CPUs "
                                 "(default: the CPUs)")
        parser.add_argument("--plot", metavar="FILE.png", help="write a latency histogram")
        add_out_flag(parser, "DIR", "write DIR/bench.json (and DIR/latency.png)")
        parser.add_argument("--seed", type=SEED.argtype, default=0, help="seed of the random inputs, 0 or more "
                                                                           "(default 0)")
        parser.add_argument("--trust-pickle", action="store_true",
                            help="allow a TorchScript (.pt/.ts) or torch.export (.pt2) MODEL: both run code stored "
                                 "in the file when opened, so give this only for files you made yourself")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.runtime.bench import plot_histogram, run_benchmark
        from jetforge.runtime.session import open_session

        options: Dict[str, Any] = {}
        if args.threads is not None:
            options["threads"] = args.threads
        if args.trust_pickle:
            options["trust_code"] = True
        outputs: List[Path] = []
        if args.plot:
            outputs.append(Path(args.plot))
        if args.out:
            outputs += [Path(args.out) / "bench.json", Path(args.out) / "latency.png"]
        for path in outputs:
            check_not_input(path, [args.model])
            check_output_path(path)  # before the benchmark runs, not after
        if args.plot and not args.plot.lower().endswith(".png"):
            raise ConfigError("--plot writes a PNG file; got %r" % args.plot, hint="e.g. --plot latency.png")
        with open_session(args.model, backend=args.backend, dla_core=args.dla_core, cuda_graph=args.cuda_graph,
                          **options) as session:
            result = run_benchmark(session, batch=args.batch, iterations=args.iterations, warmup=args.warmup,
                                   seed=args.seed, progress=not args.json)
        data = result.to_dict()
        written = []
        if args.out:
            written.append(str(write_json_atomic(Path(args.out) / "bench.json", data)))
            written.append(str(plot_histogram(result, Path(args.out) / "latency.png")))
        if args.plot:
            written.append(str(plot_histogram(result, args.plot)))
        if args.json:
            data = dict(data)
            data["files"] = written
            print_json(data)
        else:
            print(format_report(data))
            for path in written:
                print("wrote %s" % path)
        return 0


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
    return "\n".join(lines)
