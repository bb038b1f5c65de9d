"""Measure per-layer kernel times and whole-model latency on a CUDA GPU, for checking ``jetforge estimate``.

For each model of ``estimate_models.H200_MODELS`` (>= 20: torchvision classification, detection
bodies, segmentation, video, and jetforge's own) at batch 1, 8 and 32, FP16, cuDNN autotuning on,
channels-last for image/video tensors:

1. **whole model**: the forward pass captured once in a CUDA graph and replayed; median of 5 timed
   bursts (CUDA events), in ms per inference (``graph_ms``);
2. **per layer, profiler**: 2 eager forward passes under the PyTorch profiler (CPU + CUDA activity)
   with every module's forward wrapped in a ``record_function("mod::<qualified name>")`` range by
   forward pre/post hooks; each GPU kernel (and memcpy/memset) is attributed to the innermost module
   range around the CPU call that launched it (CUPTI correlation ids in the exported trace), giving
   per module the kernel time it owns itself (``kernel_us``, per inference; a module called several
   times, such as ResNet's shared ReLU, sums its calls) and its kernel count;
3. **per layer, CUDA events**: one more eager pass with CUDA events recorded in the hooks of every
   leaf module (``event_us``): closer to what a user times, but it includes launch gaps in eager mode.

The script needs only torch and torchvision (plus this repository for jetforge's own models: it
puts the checkout's ``src/`` on ``sys.path`` itself, no install).  It writes one JSON file
(``--out``; by default ``$OUT/estimate_h200_measured.json`` when ``$OUT`` is set, else
``benchmarks/estimator/results/<device>_<date>_measured.json``) after every model, so a
run cut short keeps what it measured; models not reached within ``--budget-s`` are listed as skipped.
``--dry-run`` runs the same steps on the CPU with two tiny models (module self wall time instead of
kernel time, eager timing instead of the CUDA graph), to check the script before a device run.

    python benchmarks/estimator/estimate_h200.py                       # on the GPU machine (~5-6 min)
    python benchmarks/estimator/estimate_h200.py --models unseen       # the 12 never-fitted models (~3 min)
    python benchmarks/estimator/estimate_h200.py --dry-run --out /tmp/dry.json
    python benchmarks/estimator/estimate_h200.py --models unseen --dry-run    # CPU: builds them, prints the GPU command

``--models unseen`` measures exactly ``estimate_models.UNSEEN_MODELS`` (the models no fit ever sees) and writes
``$OUT/estimate_h200_unseen_measured.json`` (committed as ``results/<device>_<date>_unseen-measured.json``, which
``estimate_h200_fit.py`` reports apart).  With ``--dry-run`` it builds each of them on the CPU, runs one forward
pass at batch 1 and prints the command to run on the GPU.
"""

import argparse
import bisect
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

SCHEMA = 1


def log(*parts: Any) -> None:
    print(*parts, flush=True)


# ------------------------------------------------------------------------------------------------
# hooks
# ------------------------------------------------------------------------------------------------
class ModuleRanges:
    """Forward pre/post hooks that open a profiler range per module call (and CUDA events per leaf)."""

    def __init__(self, model: Any, events: bool) -> None:
        import torch

        self.torch = torch
        self.events = events
        self.stack: List[Any] = []
        self.timings: Dict[str, List[Tuple[Any, Any]]] = {}
        self.handles = []
        self.info: Dict[str, Dict[str, Any]] = {}
        for name, module in model.named_modules():
            key = name or "<root>"
            leaf = not any(True for _ in module.children())
            self.info[key] = {"type": type(module).__name__, "leaf": leaf, "calls": 0}
            self.handles.append(module.register_forward_pre_hook(self._pre(key, leaf)))
            self.handles.append(module.register_forward_hook(self._post(key, leaf)))

    def _pre(self, key: str, leaf: bool):
        def hook(module: Any, inputs: Any) -> None:
            self.info[key]["calls"] += 1
            if self.events and leaf:
                start = self.torch.cuda.Event(enable_timing=True)
                start.record()
                self.stack.append(("event", key, start))
            else:
                rf = self.torch.autograd.profiler.record_function("mod::" + key)
                rf.__enter__()
                self.stack.append(("range", key, rf))
        return hook

    def _post(self, key: str, leaf: bool):
        def hook(module: Any, inputs: Any, output: Any) -> None:
            kind, _, handle = self.stack.pop()
            if kind == "event":
                end = self.torch.cuda.Event(enable_timing=True)
                end.record()
                self.timings.setdefault(key, []).append((handle, end))
            else:
                handle.__exit__(None, None, None)
            if "out_shape" not in self.info[key]:
                first = output[0] if isinstance(output, (tuple, list)) and output else output
                shape = getattr(first, "shape", None)
                self.info[key]["out_shape"] = list(shape) if shape is not None else None
        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


# ------------------------------------------------------------------------------------------------
# trace attribution
# ------------------------------------------------------------------------------------------------
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def attribute_kernels(trace: Dict[str, Any]) -> Tuple[Dict[str, List[float]], float, int]:
    """Kernel durations (us) per innermost ``mod::`` range of the CPU call that launched them.

    Returns ({module: [durations]}, total kernel us, kernels without a launching call found).
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launches: Dict[Any, Tuple[float, Any]] = {}
    ops: Dict[Any, Tuple[float, Any]] = {}          # "External id" -> the aten op (fallback link)
    ranges: Dict[Any, List[Tuple[float, float, str]]] = {}
    for e in events:
        cat = e.get("cat", "")
        args = e.get("args", {})
        if cat in _LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = (float(e["ts"]), e.get("tid"))
        elif cat == "cpu_op" and "External id" in args:
            ops.setdefault(args["External id"], (float(e["ts"]), e.get("tid")))
        elif cat == "user_annotation" and str(e.get("name", "")).startswith("mod::"):
            ranges.setdefault(e.get("tid"), []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
                                                        e["name"][5:]))
    points: Dict[Any, List[Tuple[float, float]]] = {}
    orphans = 0
    total = 0.0
    for e in events:
        if e.get("cat", "") not in _DEVICE_CATS:
            continue
        dur = float(e.get("dur", 0))
        total += dur
        args = e.get("args", {})
        launch = launches.get(args.get("correlation")) or ops.get(args.get("External id"))
        if launch is None:
            orphans += 1
            continue
        points.setdefault(launch[1], []).append((launch[0], dur))
    out: Dict[str, List[float]] = {}
    for tid, pts in points.items():
        for owner, dur in zip(_innermost(ranges.get(tid, []), [p[0] for p in pts]), [p[1] for p in pts]):
            out.setdefault(owner or "<unattributed>", []).append(dur)
    return out, total, orphans


def _innermost(ranges: List[Tuple[float, float, str]], times: List[float]) -> List[Optional[str]]:
    """For each time, the name of the innermost range containing it (ranges nest, as module calls do)."""
    ranges = sorted(ranges, key=lambda r: (r[0], -r[1]))
    starts = [r[0] for r in ranges]
    out: List[Optional[str]] = []
    for t in times:
        i = bisect.bisect_right(starts, t) - 1
        found = None
        while i >= 0:                     # the latest-starting range that still contains t is the innermost
            if ranges[i][1] >= t:
                found = ranges[i][2]
                break
            i -= 1
        out.append(found)
    return out


def self_wall_times(trace: Dict[str, Any]) -> Dict[str, List[float]]:
    """CPU dry run: each module range's own wall time (its duration minus its direct child ranges)."""
    spans = sorted([(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"][5:])
                    for e in trace.get("traceEvents", []) if e.get("ph") == "X" and
                    e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("mod::")],
                   key=lambda s: (s[0], -s[1]))
    own: List[float] = [s[1] - s[0] for s in spans]
    stack: List[int] = []
    for i, (start, end, _) in enumerate(spans):
        while stack and spans[stack[-1]][1] <= start:
            stack.pop()
        if stack:
            own[stack[-1]] -= end - start
        stack.append(i)
    out: Dict[str, List[float]] = {}
    for (_, _, name), value in zip(spans, own):
        out.setdefault(name, []).append(max(0.0, value))
    return out


# ------------------------------------------------------------------------------------------------
# measuring one model at one batch size
# ------------------------------------------------------------------------------------------------
def graph_ms(model: Any, x: Any, cuda: bool, repeats: int = 5, target_ms: float = 20.0) -> List[float]:
    """Per-inference ms of bursts of CUDA-graph replays (eager wall time on the CPU).

    A bare graph, captured here by hand on purpose, not jetforge's TorchSession (benchmarks/common/gpu_timing.py):
    this total is compared with the estimator's sum over the network's own kernels, and a session call adds a
    device-to-device copy of the input -- on an H100 +0.4 to +1.4 % at 0.3-18 ms, +4 % on the 0.09 ms MTCNN
    ONet (benchmarks/session_overhead/results/*_timing-helper.json).
    """
    import torch

    if not cuda:
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(x)
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(x)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    n = max(3, min(500, int(target_ms / max(1e-3, (time.perf_counter() - t0) * 1e3))))
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / n)
    del graph
    return out


def profile_modules(model: Any, x: Any, cuda: bool, passes: int = 2) -> Dict[str, Any]:
    """Per-module kernel time (GPU) or self wall time (CPU dry run) per inference, from a profiler trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    hooks = ModuleRanges(model, events=False)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:
        with profile(activities=activities) as prof:
            for _ in range(passes):
                model(x)
            if cuda:
                torch.cuda.synchronize()
    finally:
        hooks.remove()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    if cuda:
        per, total, orphans = attribute_kernels(trace)
    else:
        per, total, orphans = self_wall_times(trace), 0.0, 0
        total = sum(sum(v) for v in per.values())
    modules = {}
    for key, meta in hooks.info.items():
        durations = per.get(key, [])
        modules[key] = dict(meta, calls=meta["calls"] // passes, kernel_us=sum(durations) / passes,
                            kernels=len(durations) // passes)
    return {"modules": modules, "kernel_total_us": total / passes,
            "kernels": sum(len(v) for v in per.values()) // passes,
            "unattributed_us": sum(per.get("<unattributed>", [])) / passes, "orphan_kernels": orphans // passes}


def event_times(model: Any, x: Any) -> Dict[str, float]:
    """Leaf-module times from CUDA events in forward hooks, one eager pass (includes launch gaps)."""
    import torch

    hooks = ModuleRanges(model, events=True)
    try:
        model(x)
        torch.cuda.synchronize()
    finally:
        hooks.remove()
    return {k: sum(s.elapsed_time(e) for s, e in pairs) * 1e3 for k, pairs in hooks.timings.items()}


def prepare(spec: Any, cuda: bool) -> Any:
    """The model on the device, in the precision and memory format every batch size uses (built once)."""
    import torch

    model = spec.build().to(device="cuda" if cuda else "cpu", dtype=torch.half if cuda else torch.float)
    if spec.image and len(spec.input_shape) in (3, 4):
        model = model.to(memory_format=torch.channels_last if len(spec.input_shape) == 3 else torch.channels_last_3d)
    return model


def measure(spec: Any, model: Any, batch: int, cuda: bool) -> Dict[str, Any]:
    import torch

    device = "cuda" if cuda else "cpu"
    x = torch.randn(batch, *spec.input_shape, device=device, dtype=torch.half if cuda else torch.float)
    if spec.image and x.dim() in (4, 5):
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(2):            # cuDNN autotuning happens here
            model(x)
        if cuda:
            torch.cuda.synchronize()
        runs = graph_ms(model, x, cuda)
        prof = profile_modules(model, x, cuda)
        events = event_times(model, x) if cuda else {}
    for key, value in events.items():
        prof["modules"].setdefault(key, {})["event_us"] = value
    result = {"batch": batch, "graph_ms": statistics.median(runs), "graph_ms_runs": runs,
              "eager_kernel_ms": prof["kernel_total_us"] / 1e3, "kernels": prof["kernels"],
              "unattributed_us": prof["unattributed_us"], "orphan_kernels": prof["orphan_kernels"],
              "modules": prof["modules"], "seconds": round(time.perf_counter() - t0, 2)}
    del x
    if cuda:
        torch.cuda.empty_cache()
    return result


# ------------------------------------------------------------------------------------------------
def environment(cuda: bool) -> Dict[str, Any]:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "host": platform.node(),
           "cpu": platform.processor() or platform.machine()}
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = None
    if cuda:
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sm_count=props.multi_processor_count, memory_gb=round(props.total_memory / 2**30, 1),
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return env


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, two tiny models, batches 1,2")
    parser.add_argument("--out", help="JSON path (default $OUT/estimate_h200_measured.json when $OUT is set, else "
                                      "results/<device>_<date>_measured.json; a dry run: a temporary folder)")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="start no new model after this many seconds (300)")
    parser.add_argument("--batches", default=None, help="batch sizes (default 1,8,32; dry run 1,2)")
    parser.add_argument("--models", default=None, help="comma-separated subset of model names")
    args = parser.parse_args(argv)
    use_checkout()
    import torch

    from benchmarks.common.estimate_models import UNSEEN, select

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        log("no CUDA device: use --dry-run to check the script on the CPU")
        return 1
    specs = select(args.models or "", dry_run=args.dry_run)
    if args.models == UNSEEN and args.dry_run:
        return dry_run_unseen(specs)
    batches = [int(b) for b in (args.batches or ("1,2" if args.dry_run else "1,8,32")).split(",")]
    stem = "estimate_h200_unseen_measured.json" if args.models == UNSEEN else "estimate_h200_measured.json"
    if args.out:
        out_path = Path(args.out)
    elif os.environ.get("OUT"):
        out_path = Path(os.environ["OUT"]) / stem
    elif args.dry_run:
        out_path = Path(tempfile.mkdtemp(prefix="jetforge-estimate-h200-dry-")) / "estimate_h200_measured.json"
    else:
        out_path = result_path(__file__, "unseen-measured" if args.models == UNSEEN else "measured", gpu=True)
    torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    data: Dict[str, Any] = {"schema": SCHEMA, "dry_run": bool(args.dry_run), "environment": environment(cuda),
                            "settings": {"precision": "fp16" if cuda else "fp32", "cudnn_benchmark": True,
                                         "channels_last": True, "batches": batches, "profiled_passes": 2,
                                         "graph_bursts": 5},
                            "models": [], "skipped": []}
    log("device:", data["environment"].get("gpu", "CPU (dry run)"), "| models:", len(specs), "| batches:", batches)
    for spec in specs:
        elapsed = time.perf_counter() - start
        if elapsed > args.budget_s:
            data["skipped"].append({"name": spec.name, "reason": "time budget %.0f s reached" % args.budget_s})
            continue
        entry: Dict[str, Any] = {"name": spec.name, "group": spec.group, "input_shape": list(spec.input_shape),
                                 "batches": [], "error": None}
        try:
            model = prepare(spec, cuda)
        except Exception as err:  # a model that cannot be built is recorded, the run goes on
            entry["error"] = "build: %s: %s" % (type(err).__name__, str(err)[:300])
            data["models"].append(entry)
            continue
        for batch in batches:
            if time.perf_counter() - start > args.budget_s + 40:     # a slow last model must not overrun
                entry["error"] = "batch %d and larger skipped: time budget" % batch
                break
            try:
                result = measure(spec, model, batch, cuda)
                entry["batches"].append(result)
                log("%-34s b=%-3d graph %8.3f ms  kernels %8.3f ms  (%d kernels, %.1f s)" % (
                    spec.name, batch, result["graph_ms"], result["eager_kernel_ms"], result["kernels"],
                    result["seconds"]))
            except Exception as err:  # one model failing must not end the device run
                entry["error"] = "batch %d: %s: %s" % (batch, type(err).__name__, str(err)[:300])
                log("%-34s b=%-3d FAILED %s" % (spec.name, batch, entry["error"]))
                if cuda:
                    torch.cuda.empty_cache()
                break
        del model
        data["models"].append(entry)
        data["elapsed_s"] = round(time.perf_counter() - start, 1)
        _write(out_path, data)
    data["elapsed_s"] = round(time.perf_counter() - start, 1)
    _write(out_path, data)
    log("wrote %s (%d models measured, %d skipped, %.0f s)" % (out_path, len(data["models"]), len(data["skipped"]),
                                                               data["elapsed_s"]))
    return 0


GPU_COMMAND = "python benchmarks/estimator/estimate_h200.py --models unseen --budget-s 400"


def dry_run_unseen(specs: List[Any]) -> int:
    """``--models unseen --dry-run``: build each never-fitted model on the CPU, one forward pass at batch 1 (what the
    GPU run needs to work), then print the command that measures them on the GPU."""
    import torch

    for spec in specs:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = spec.build()(torch.randn(1, *spec.input_shape))
        first = out[0] if isinstance(out, (tuple, list)) else out
        log("%-22s builds and runs on the CPU: input %s -> %s (%.1f s)" % (
            spec.name, "x".join(map(str, spec.input_shape)), "x".join(map(str, first.shape)),
            time.perf_counter() - t0))
    log("dry run only: nothing measured. On the CUDA GPU, from the checkout's root (~3-4 min, writes "
        "$OUT/estimate_h200_unseen_measured.json):\n  %s" % GPU_COMMAND)
    return 0


def _write(path: Path, data: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(str(tmp), str(path))


if __name__ == "__main__":
    sys.exit(main())
