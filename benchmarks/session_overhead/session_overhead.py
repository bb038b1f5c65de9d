"""Session overhead, measured side by side in one run.

GPU section (needs a CUDA GPU and torchvision): MobileNetV2 (torchvision's ImageNet weights
from the jetforge asset cache when present, else random) and ResNet-50 (random weights: speed
does not depend on them), FP16, batch 1, channels-last (and, with ``--layouts``, contiguous
NCHW for comparison), the same device input for every variant:

* ``eager``        -- ``model(x)`` under ``torch.inference_mode()``
* ``bare_graph``   -- a ``torch.cuda.CUDAGraph`` captured by hand: ``static.copy_(x); g.replay()``
* ``jetforge_graph``  -- ``TorchSession(cuda_graph=True).infer_tensors({"input": x})``
* ``jetforge_eager``  -- the same session with ``cuda_graph=False``
* ``numpy`` rows   -- end to end from a host numpy array to a host numpy array: the
  jetforge session's ``infer`` (pinned H2D, replay, D2H) vs eager PyTorch doing the same copies

Every call is followed by ``torch.cuda.synchronize()`` (per-call latency at batch 1).  The
variants run in interleaved rounds and each reports the median of its rounds' per-call means.

CPU section: the jetforge ONNX Runtime session's ``infer`` vs ``InferenceSession.run`` on the
same ORT session object and the same input, MobileNetV2 exported by jetforge (random weights).

    python benchmarks/session_overhead/session_overhead.py             # both sections -> results/<device>_<date>.json
    python benchmarks/session_overhead/session_overhead.py --skip-gpu --threads 2
    python benchmarks/session_overhead/session_overhead.py --dry-run   # a few calls of each section, JSON in /tmp

The bare graph is the GPU section's baseline, so it is captured by hand here on purpose (not through the shared
timing helper ``benchmarks/common/gpu_timing.py``, which times through the session being measured).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()
GOALS = {"eager_over_graph": {"mobilenet_v2": 6.0, "resnet50": 4.0}, "graph_overhead_pct": 5.0,
         "graph_overhead_us": 20.0, "ort_overhead_pct": 3.0}


def timed_rounds(variants: Dict[str, Callable[[], Any]], iterations: int, rounds: int, sync: Callable[[], None]
                 ) -> Dict[str, Dict[str, float]]:
    """Per-call µs of each variant: ``rounds`` interleaved rounds of ``iterations // rounds`` synced calls."""
    per_round = max(1, iterations // rounds)
    results: Dict[str, List[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
                sync()
            results[name].append((time.perf_counter() - t0) / per_round * 1e6)
    return {name: {"us_per_call": statistics.median(v), "min_round_us": min(v), "max_round_us": max(v),
                   "rounds": rounds, "calls_per_round": per_round} for name, v in results.items()}


def _mobilenet_weights() -> Any:
    """torchvision's MobileNetV2 ImageNet state dict from the jetforge asset cache, or None (never downloads)."""
    try:
        import torch

        from jetforge.assets import asset_path

        path = asset_path("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth", fetch_missing=False)
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception:
        return None


def timed_pairs(a: Callable[[], Any], b: Callable[[], Any], n: int) -> Dict[str, float]:
    """Per-call times of ``a`` and ``b`` called alternately (a b, b a, a b, ...): medians and means in µs."""
    ta: List[float] = []
    tb: List[float] = []
    for i in range(n):
        for fn, store in (((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta))):
            t0 = time.perf_counter()
            fn()
            store.append(time.perf_counter() - t0)
    return {"calls": n, "median_a_us": statistics.median(ta) * 1e6, "median_b_us": statistics.median(tb) * 1e6,
            "mean_a_us": statistics.mean(ta) * 1e6, "mean_b_us": statistics.mean(tb) * 1e6}


def gpu_section(models: List[str], iterations: int, warmup: int, rounds: int,
                layouts: List[str]) -> Dict[str, Any]:
    import numpy as np
    import torch
    import torchvision

    from jetforge.runtime.session import open_session

    torch.backends.cudnn.benchmark = True  # the same setting for every variant
    dev = torch.device("cuda")
    out: Dict[str, Any] = {}
    for name, layout in [(m, lay) for m in models for lay in layouts]:
        torch.manual_seed(0)
        factory = {"mobilenet_v2": torchvision.models.mobilenet_v2, "resnet50": torchvision.models.resnet50}[name]
        model = factory(weights=None)
        weights = "random (torchvision architecture, weights=None)"
        state = _mobilenet_weights() if name == "mobilenet_v2" else None
        if state is not None:
            model.load_state_dict(state)
            weights = "torchvision ImageNet weights mobilenet_v2-b0353104.pth (jetforge asset)"
        channels_last = layout == "channels_last"
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.eval().to(dev).half().to(memory_format=fmt)
        x = torch.randn(1, 3, 224, 224, device=dev).half().contiguous(memory_format=fmt)
        x_np = torch.randn(1, 3, 224, 224).numpy().astype(np.float32)

        # bare graph, captured by hand (PyTorch's documented recipe): the baseline the session is measured against,
        # so deliberately not the shared timing helper (benchmarks/common/gpu_timing.py times through TorchSession)
        static = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                model(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            static_out = model(static)

        def bare():
            static.copy_(x)
            graph.replay()
            return static_out

        def eager():
            with torch.inference_mode():
                return model(x)

        def eager_numpy():
            with torch.inference_mode():
                t = torch.from_numpy(x_np).to(dev, non_blocking=False).half().contiguous(memory_format=fmt)
                return model(t).float().cpu().numpy()

        common = dict(backend="pytorch", device="cuda", dtype="fp16", channels_last=channels_last,
                      input_shapes={"input": [1, 3, 224, 224]}, output_names=["logits"])
        s_graph = open_session(model, cuda_graph=True, **common)
        s_eager = open_session(model, cuda_graph=False, **common)
        variants = {
            "eager": eager,
            "bare_graph": bare,
            "jetforge_graph": lambda: s_graph.infer_tensors({"input": x}),
            "jetforge_eager": lambda: s_eager.infer_tensors({"input": x}),
            "eager_numpy": eager_numpy,
            "jetforge_graph_numpy": lambda: s_graph.infer({"input": x_np}),
        }
        for fn in variants.values():  # warm-up (the session captures its graph here)
            for _ in range(warmup):
                fn()
        torch.cuda.synchronize()
        # the same answers: session graph vs bare graph vs eager
        ref = eager().float()
        diffs = {"jetforge_graph_vs_eager_max_abs": float((s_graph.infer_tensors({"input": x})["logits"].float()
                                                           - ref).abs().max()),
                 "bare_graph_vs_eager_max_abs": float((bare().float() - ref).abs().max()),
                 "top1_same": bool(int(s_graph.infer_tensors({"input": x})["logits"].argmax()) == int(ref.argmax())),
                 "logits_max_abs": float(ref.abs().max())}
        timings = timed_rounds(variants, iterations, rounds, torch.cuda.synchronize)
        # device time of one bare replay (CUDA events over many back-to-back replays)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            graph.replay()
        end.record()
        end.synchronize()
        us = {k: v["us_per_call"] for k, v in timings.items()}
        overhead_us = us["jetforge_graph"] - us["bare_graph"]
        key = name if channels_last else name + "_nchw"
        out[key] = {
            "model": name, "weights": weights,
            "dtype": "fp16", "batch": 1, "channels_last": channels_last,
            "per_call": timings,
            "bare_graph_device_us": start.elapsed_time(end) * 1000.0 / 200,
            "speedup_eager_over_jetforge_graph": us["eager"] / us["jetforge_graph"],
            "speedup_eager_over_bare_graph": us["eager"] / us["bare_graph"],
            "jetforge_graph_overhead_us": overhead_us,
            "jetforge_graph_overhead_pct": 100.0 * overhead_us / us["bare_graph"],
            "speedup_numpy_eager_over_jetforge": us["eager_numpy"] / us["jetforge_graph_numpy"],
            "session_info": s_graph.info(),
            "check": diffs,
        }
        goal = GOALS["eager_over_graph"][name]
        out[key]["goals"] = {
            "speedup_goal": goal, "speedup_met": out[key]["speedup_eager_over_jetforge_graph"] >= goal,
            "overhead_met": overhead_us <= GOALS["graph_overhead_us"]
            or out[key]["jetforge_graph_overhead_pct"] <= GOALS["graph_overhead_pct"]}
        s_graph.close()
        s_eager.close()
        del graph, static_out, model
        torch.cuda.empty_cache()
    return out


def cpu_section(iterations: int, warmup: int, rounds: int, threads: int) -> Dict[str, Any]:
    import numpy as np

    from jetforge.compress.export import export_onnx
    from jetforge.compress.models import build
    from jetforge.runtime.session import open_session

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mobilenet_v2.onnx"
        export_onnx(build("mobilenet_v2").eval(), path, (1, 3, 224, 224), model_name="mobilenet_v2")
        x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float64).astype(np.float32)
        with open_session(path, threads=threads) as session:
            raw = session._sess  # the same InferenceSession object: the difference is jetforge's wrapper alone
            names = [o.name for o in raw.get_outputs()]
            feeds = {"input": x}
            variants = {"ort_run": lambda: raw.run(names, feeds), "jetforge_infer": lambda: session.infer(feeds)}
            for fn in variants.values():
                for _ in range(warmup):
                    fn()
            same = bool(np.array_equal(raw.run(names, feeds)[0], session.infer(feeds)["logits"]))
            timings = timed_rounds(variants, iterations, rounds, lambda: None)
            paired = timed_pairs(variants["ort_run"], variants["jetforge_infer"], iterations)
            info = session.info()
    us = {k: v["us_per_call"] for k, v in timings.items()}
    # the goal is judged on the paired medians: alternating single calls cancels the drift of a shared CPU
    overhead = paired["median_b_us"] - paired["median_a_us"]
    us = {"ort_run": paired["median_a_us"], "jetforge_infer": paired["median_b_us"]}
    return {"model": "mobilenet_v2 (jetforge export, random weights)", "batch": 1, "intra_op_threads": threads,
            "per_call": timings, "paired": paired, "jetforge_overhead_us": overhead,
            "overhead_statistic": "median of per-call times, calls alternating ort_run / jetforge_infer",
            "block_means_overhead_us": timings["jetforge_infer"]["us_per_call"] - timings["ort_run"]["us_per_call"],
            "jetforge_overhead_pct": 100.0 * overhead / us["ort_run"], "same_outputs": same, "session_info": info,
            "goals": {"overhead_goal_pct": GOALS["ort_overhead_pct"],
                      "overhead_met": 100.0 * overhead / us["ort_run"] <= GOALS["ort_overhead_pct"]}}


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                            "platform": platform.platform()}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda_runtime"] = torch.version.cuda
    except ImportError:
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


def print_table(result: Dict[str, Any]) -> None:
    for name, r in result.get("gpu", {}).items():
        print("\n%s (fp16, batch 1, %s; %s) on %s" % (r["model"], "channels_last" if r["channels_last"] else "NCHW",
                                                    r["weights"], result["machine"].get("gpu")))
        for variant, t in r["per_call"].items():
            print("  %-22s %9.1f us/call" % (variant, t["us_per_call"]))
        print("  eager / jetforge graph  %6.2fx (goal >= %.0fx: %s)   eager / bare graph %6.2fx"
              % (r["speedup_eager_over_jetforge_graph"], r["goals"]["speedup_goal"],
                 "met" if r["goals"]["speedup_met"] else "NOT met", r["speedup_eager_over_bare_graph"]))
        print("  jetforge over bare graph %+.1f us (%+.2f %%) (goal <= 20 us or <= 5 %%: %s); bare replay device "
              "time %.1f us" % (r["jetforge_graph_overhead_us"], r["jetforge_graph_overhead_pct"],
                                "met" if r["goals"]["overhead_met"] else "NOT met", r["bare_graph_device_us"]))
    cpu = result.get("cpu")
    if cpu:
        print("\nONNX Runtime CPU, MobileNetV2, batch 1, %d threads" % cpu["intra_op_threads"])
        for variant, t in cpu["per_call"].items():
            print("  %-22s %9.1f us/call (block rounds, median of round means)" % (variant, t["us_per_call"]))
        p = cpu["paired"]
        print("  alternating calls: ort_run median %.1f us (mean %.1f), jetforge_infer median %.1f us (mean %.1f)"
              % (p["median_a_us"], p["mean_a_us"], p["median_b_us"], p["mean_b_us"]))
        print("  jetforge overhead %+.1f us (%+.2f %%) (goal <= 3 %%: %s); same outputs: %s"
              % (cpu["jetforge_overhead_us"], cpu["jetforge_overhead_pct"],
                 "met" if cpu["goals"]["overhead_met"] else "NOT met", cpu["same_outputs"]))


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet50")
    parser.add_argument("--iterations", type=int, default=2000, help="GPU calls per variant (default 2000)")
    parser.add_argument("--cpu-iterations", type=int, default=2000, help="CPU calls per variant (default 2000)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds on the GPU (default 10)")
    parser.add_argument("--cpu-rounds", type=int, default=20, help="interleaved rounds on the CPU (default 20)")
    parser.add_argument("--layouts", default="channels_last,nchw", help="GPU memory formats to measure")
    parser.add_argument("--threads", type=int, default=4, help="ONNX Runtime intra-op threads (default 4)")
    parser.add_argument("--skip-gpu", action="store_true")
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--out", help="JSON path (default benchmarks/session_overhead/results/<device>_<date>.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the script: a few calls per variant (the GPU section only where CUDA is), "
                             "JSON with dry_run: true in a temporary folder unless --out is given")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.iterations = args.cpu_iterations = 20
        args.warmup, args.rounds, args.cpu_rounds = 2, 2, 2
    result: Dict[str, Any] = {"benchmark": "session_overhead", "date": datetime.date.today().isoformat(),
                              "machine": machine(), "goals": GOALS, "dry_run": bool(args.dry_run)}
    print("session_overhead: GPU section %s (models %s, layouts %s, %d calls x %d rounds); CPU section %s "
          "(%d calls, %d threads)" % ("skipped" if args.skip_gpu else "where CUDA is", args.models, args.layouts,
                                      args.iterations, args.rounds, "skipped" if args.skip_cpu else "on",
                                      args.cpu_iterations, args.threads), flush=True)
    if not args.skip_gpu:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA GPU: GPU section skipped", file=sys.stderr)
            result["gpu_skipped"] = "no CUDA GPU"
        else:
            result["gpu"] = gpu_section(args.models.split(","), args.iterations, args.warmup, args.rounds,
                                        args.layouts.split(","))
    if not args.skip_cpu:
        result["cpu"] = cpu_section(args.cpu_iterations, min(args.warmup, 20), args.cpu_rounds, args.threads)
    if args.out:
        out = Path(args.out)
    elif args.dry_run:
        out = Path(tempfile.mkdtemp(prefix="jetforge-session-overhead-dry-")) / "session_overhead.json"
    else:
        out = result_path(__file__, gpu="gpu" in result, date=result["date"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print_table(result)
    print("\nwrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
