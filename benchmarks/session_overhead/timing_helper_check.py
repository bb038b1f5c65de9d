"""Does the shared GPU timer measure what the hand-captured graph loops measured?  Both, side by side, on one GPU.

``benchmarks/common/gpu_timing.py`` times a forward pass through jetforge's ``TorchSession`` (its CUDA graph
replayed after a device-to-device copy of the input into the graph's static input).  It replaced the loops that
``pruning/prune_gpu.py`` and ``action3d/action_mobilenet3d_gpu.py`` wrote by hand (``estimator/estimate_h200.py``
keeps its own, for the reason this check measures): a graph captured with ``torch.cuda.graph`` after three warm-up
passes on a side stream, replayed back to back between two CUDA events.  That loop is the reference here
(``bare``), kept verbatim: a bare graph is this check's baseline.

Cases (random weights; FP16, cuDNN autotuned; each model prepared as its benchmark prepares it):

* prune_gpu.py's: ResNet-50 and MobileNetV2 at 224 px, channels-last, batch 1, 32 and 256;
* estimate_h200.py's fastest: the models with the shortest committed graph times (``jetforge_mtcnn_onet``
  at 48 px: 0.087 ms; ``jetforge_action_walking_direction``; SqueezeNet 1.1; ResNet-18) at batch 1, and r3d_18
  (a 5-D clip in ``channels_last_3d``, passed to the session as a ready tensor) at batch 1 and 8.

Per case both timers are built once, then ``--rounds`` rounds alternate them (the order reversed every other
round), each round one burst of the same number of calls (about ``--target-ms`` of the bare loop).  Reported: the
median ms per call of each, session / bare, and the bare loop's own spread between rounds (its max / min).  The
timer is a drop-in where session / bare stays within that spread.

    python benchmarks/session_overhead/timing_helper_check.py --both-orders --rounds 12   # the GPU (~1 min)
    python benchmarks/session_overhead/timing_helper_check.py --dry-run      # CPU: tiny inputs, JSON in /tmp

Writes ``results/<device>_<date>_timing-helper.json``.
"""

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()


class BareGraph:
    """The reference: the hand-written loop of prune_gpu.py / estimate_h200.py (a bare graph is the baseline)."""

    def __init__(self, model: Any, x: Any) -> None:
        import torch

        self.torch, self.model, self.x = torch, model, x
        self.cuda = x.is_cuda
        if not self.cuda:
            return
        with torch.no_grad():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = model(x)
        for _ in range(3):
            self.graph.replay()
        torch.cuda.synchronize()

    def ms(self, n: int) -> float:
        torch = self.torch
        if not self.cuda:
            t0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(n):
                    self.model(self.x)
            return 1e3 * (time.perf_counter() - t0) / n
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n


def cases(dry_run: bool) -> List[Dict[str, Any]]:
    size = 64 if dry_run else 224
    out = [{"name": "%s_%dpx" % (m, size), "model": m, "source": "prune_gpu", "shape": (b, 3, size, size)}
           for m in ("resnet50", "mobilenet_v2") for b in ((1, 2) if dry_run else (1, 32, 256))]
    names = ("tiny_cnn",) if dry_run else ("jetforge_mtcnn_onet", "jetforge_action_walking_direction",
                                           "squeezenet1_1", "resnet18", "r3d_18")
    for name in names:
        for b in ((1, 8) if name == "r3d_18" else (1,)):
            out.append({"name": name, "model": name, "source": "estimate_h200", "batch": b})
    return out


def build(case: Dict[str, Any], cuda: bool) -> Any:
    """(model, input, session options) prepared as the case's benchmark prepares them."""
    import torch
    import torchvision

    dtype = torch.half if cuda else torch.float
    device = "cuda" if cuda else "cpu"
    if case["source"] == "prune_gpu":
        torch.manual_seed(0)
        model = getattr(torchvision.models, case["model"])().eval()
        model = model.to(device=device, dtype=dtype, memory_format=torch.channels_last)
        x = torch.randn(*case["shape"], device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
        return model, x
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "estimator"))
    import estimate_h200
    from benchmarks.common.estimate_models import DRY_RUN_MODELS, H200_MODELS, by_name

    spec = by_name(list(H200_MODELS) + list(DRY_RUN_MODELS))[case["model"]]
    model = estimate_h200.prepare(spec, cuda)
    x = torch.randn(case["batch"], *spec.input_shape, device=device, dtype=dtype)
    if spec.image and x.dim() in (4, 5):
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    return model, x


def run_case(case: Dict[str, Any], cuda: bool, rounds: int, target_ms: float,
             session_first: bool = False) -> Dict[str, Any]:
    import torch

    from benchmarks.common.gpu_timing import SessionTimer

    model, x = build(case, cuda)
    def make_session() -> SessionTimer:
        return SessionTimer(model, x, dtype="fp16" if cuda else "fp32", channels_last=False, copy_model=False,
                            device="cuda" if cuda else "cpu", cuda_graph=cuda)

    with torch.no_grad():
        if session_first:  # which graph is captured first must not decide the answer
            session = make_session()
            bare = BareGraph(model, x)
        else:
            bare = BareGraph(model, x)
            session = make_session()
        one = bare.ms(3)
        n = int(min(500, max(5, target_ms / max(one, 1e-3))))
        samples: Dict[str, List[float]] = {"bare": [], "session": []}
        for r in range(rounds):
            for name in (("bare", "session") if r % 2 == 0 else ("session", "bare")):
                samples[name].append(bare.ms(n) if name == "bare" else session.ms(n))
        check = session.check()
    session.close()
    med = {k: statistics.median(v) for k, v in samples.items()}
    row = {"case": case["name"], "source": case["source"], "input": list(x.shape),
           "memory_format": "channels_last_3d" if x.dim() == 5 and x.is_contiguous(
               memory_format=torch.channels_last_3d) else "channels_last" if x.dim() == 4 else "contiguous",
           "calls_per_burst": n, "captured_first": "session" if session_first else "bare",
           "bare_ms": med["bare"], "session_ms": med["session"],
           "session_over_bare": med["session"] / med["bare"],
           "bare_round_spread": max(samples["bare"]) / min(samples["bare"]),
           "session_round_spread": max(samples["session"]) / min(samples["session"]),
           "rounds": samples, "session_vs_eager": check}
    row["within_spread"] = abs(row["session_over_bare"] - 1.0) <= max(row["bare_round_spread"] - 1.0, 0.02)
    del bare, model, x
    if cuda:
        torch.cuda.empty_cache()
    return row


def main(argv: Any = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--target-ms", type=float, default=25.0, help="about this long a burst (default 25 ms)")
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--both-orders", action="store_true",
                   help="run every case twice: the bare graph captured first, then the session's first")
    p.add_argument("--out", default=None, help="JSON (default results/<device>_<date>_timing-helper.json)")
    p.add_argument("--dry-run", action="store_true", help="CPU, 64 px and a tiny model, 2 rounds, JSON in /tmp")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("no CUDA GPU: use --dry-run to check the script on the CPU")
        return 1
    if args.dry_run:
        args.rounds, args.target_ms = 2, 5.0
    torch.backends.cudnn.benchmark = True
    out = Path(args.out) if args.out else (
        Path(tempfile.mkdtemp(prefix="jetforge-timing-check-dry-")) / "timing_helper.json" if args.dry_run
        else result_path(__file__, "timing-helper", gpu=True))
    todo = [c for c in cases(args.dry_run) if not args.only or c["name"] in args.only.split(",")]
    print("timing_helper_check: %d cases, %d rounds, %s -> %s" % (len(todo), args.rounds,
                                                                  "CUDA" if cuda else "CPU (dry run)", out))
    doc: Dict[str, Any] = {
        "benchmark": "timing_helper_check", "dry_run": bool(args.dry_run),
        "machine": {"gpu": torch.cuda.get_device_name(0) if cuda else None, "torch": torch.__version__,
                    "python": platform.python_version(), "platform": platform.platform()},
        "method": "per case: the hand-captured graph loop (bare) and benchmarks/common/gpu_timing.SessionTimer "
                  "(TorchSession, its CUDA graph), each built once, then alternating bursts of the same number of "
                  "calls between CUDA events; medians of the rounds",
        "rows": []}
    t0 = time.perf_counter()
    for case in todo:
        for session_first in ((False, True) if args.both_orders else (False,)):
            try:
                row = run_case(case, cuda, args.rounds, args.target_ms, session_first)
            except Exception as err:  # one case failing is reported, the others still run
                row = {"case": case["name"], "error": "%s: %s" % (type(err).__name__, str(err)[:300])}
            doc["rows"].append(row)
            if "error" in row:
                print("%-36s FAILED %s" % (row["case"], row["error"]), flush=True)
                continue
            print("%-30s %-16s %-7s first: bare %8.4f ms  session %8.4f ms  ratio %.4f  (bare spread %.3f)  %s" % (
                row["case"] + " b%d" % row["input"][0], row["memory_format"], row["captured_first"], row["bare_ms"],
                row["session_ms"], row["session_over_bare"], row["bare_round_spread"],
                "ok" if row["within_spread"] else "DIFFERS"), flush=True)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["all_within_spread"] = all(r.get("within_spread") for r in doc["rows"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote %s (%.0f s)" % (out, doc["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
