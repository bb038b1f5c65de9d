"""A model's forward pass timed on a CUDA GPU through jetforge's own ``TorchSession`` (one CUDA graph).

What :class:`SessionTimer` measures: milliseconds per ``TorchSession.infer_tensors`` call on an input tensor already
on the GPU in the session's dtype and memory format, ``n`` calls back to back between two CUDA events (no host
synchronisation inside a burst).  With ``cuda_graph=True`` each call is the session's captured graph replayed after
one device-to-device copy of the input into the graph's static input (a few microseconds; the session's warm-up
and capture happen on the first call, outside every timed burst); with ``cuda_graph=False`` it is the eager forward
under ``no_grad``.  On a machine without CUDA (a script's ``--dry-run``) the same calls are timed with the host
clock in FP32 on the CPU.

Against the hand-captured graph loops it replaced (``session_overhead/timing_helper_check.py``, one H100, both
capture orders: ``session_overhead/results/nvidia-h100-80gb-hbm3_2026-12-06_timing-helper.json``): +0.4 to
+1.4 % for forwards of 0.3 to 18 ms (ResNet-50, MobileNetV2 at batch 1/32/256, SqueezeNet, ResNet-18, r3d_18 in
``channels_last_3d``), +4 % for a 0.09 ms one -- the input copy.  Where a benchmark compares models timed the same
way (speed-ups), that cancels; where an absolute time is the quantity, it does not.  So:

* used by ``pruning/prune_gpu.py`` (speed-ups of pruned models; the latency-aware search's table) and
  ``action3d/action_mobilenet3d_gpu.py`` (teacher vs student, 5-D clips passed as ready ``channels_last_3d``
  tensors);
* not by ``session_overhead/session_overhead.py`` -- the bare graph *is* the baseline the session is measured
  against;
* not by ``estimator/estimate_h200.py`` -- its whole-model time is compared with the estimator's sum over the
  network's own kernels, which an input copy is not part of (+4 % on its fastest model);
* not by ``detector_students/detector_student_gpu.py`` -- each graph captured on its own stream and checked against
  the eager forward after the timed rounds (the fix for a SIGSEGV in an earlier H200 run), its committed results
  measured that way, and its device run needs the study's carry folder: not re-verified on a GPU here.
"""

import copy
import statistics
import time
from typing import Any, Dict, List, Optional, Tuple


class SessionTimer:
    """One model at one input in a jetforge ``TorchSession``: ``ms(n)`` per call, ``bursts()``, ``check()``.

    ``inputs`` is a shape (with the batch axis: a random input is made in the session's dtype, channels-last for a
    4-D shape when ``channels_last``) or a ready tensor, used as it is (its dtype and memory format, e.g.
    ``channels_last_3d``, are the caller's: pass ``channels_last=False`` and a module already in that format).
    The module is copied first (``copy_model``) so that the caller's module keeps its device and dtype.
    ``device="auto"``: CUDA where there is one, else the CPU (FP32, host clock).
    """

    def __init__(self, module: Any, inputs: Any, dtype: str = "fp16", channels_last: bool = True,
                 cuda_graph: bool = True, warmup: int = 3, copy_model: bool = True, device: str = "auto") -> None:
        import torch

        from jetforge.runtime.session.torch_backend import TorchSession

        self.torch = torch
        self.cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
        dtype = dtype if self.cuda else "fp32"
        shape = [int(d) for d in inputs.shape] if hasattr(inputs, "shape") else [int(d) for d in inputs]
        m = copy.deepcopy(module) if copy_model else module
        self.session = TorchSession.from_module(m, input_shapes={"input": shape},
                                                device="cuda" if self.cuda else "cpu", dtype=dtype,
                                                channels_last=channels_last, cuda_graph=cuda_graph, warmup=warmup,
                                                max_graphs=1)
        self.module = m  # moved to the session's device and dtype in place (nn.Module.to returns itself)
        if hasattr(inputs, "shape"):
            self.x = inputs
        else:
            fmt = torch.channels_last if channels_last and len(shape) == 4 else torch.contiguous_format
            self.x = torch.randn(*shape, device="cuda" if self.cuda else "cpu",
                                 dtype=torch.float16 if dtype == "fp16" else torch.float32).contiguous(
                                     memory_format=fmt)
        self.call()  # the session warms up and captures here, on its side stream
        self.sync()

    def call(self) -> Dict[str, Any]:
        return self.session.infer_tensors({"input": self.x})

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def ms(self, n: int) -> float:
        """Milliseconds per call over ``n`` calls back to back (CUDA events; the host clock on the CPU)."""
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(n):
                self.call()
            return 1e3 * (time.perf_counter() - t0) / n
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            self.call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n

    def calls_for(self, target_ms: float, min_calls: int = 3, max_calls: int = 500, settle: int = 3) -> int:
        """How many calls a burst of about ``target_ms`` holds: ``settle`` untimed calls, one timed with the host
        clock after a synchronisation (what the hand-written loops did)."""
        for _ in range(settle):
            self.call()
        self.sync()
        t0 = time.perf_counter()
        self.call()
        self.sync()
        one = max(1e-3, (time.perf_counter() - t0) * 1e3)
        return int(min(max_calls, max(min_calls, target_ms / one)))

    def bursts(self, reps: int = 5, target_ms: float = 25.0, min_calls: int = 3,
               max_calls: int = 500) -> Tuple[List[float], int]:
        """``reps`` bursts of about ``target_ms`` each: (ms per call of every burst, calls per burst)."""
        n = self.calls_for(target_ms, min_calls, max_calls)
        return [self.ms(n) for _ in range(reps)], n

    def check(self) -> Dict[str, float]:
        """Largest |session output - eager output| (same module, same input), and the eager output's scale."""
        torch = self.torch
        with torch.no_grad():
            eager = [t.float() for t in _flat(self.module(self.x))]
            got = [t.float() for t in self.call().values()]
            self.sync()
        return {"session_vs_eager_max_abs": max(float((g - e).abs().max()) for g, e in zip(got, eager)),
                "eager_max_abs": max(float(t.abs().max()) for t in eager)}

    def info(self) -> Dict[str, Any]:
        return dict(self.session.info(), timing="TorchSession.infer_tensors, %s" % (
            "CUDA events over back-to-back calls" if self.cuda else "host clock (CPU)"))

    def close(self) -> None:
        self.session.close()
        self.x = None


def _flat(value: Any) -> List[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, (tuple, list)) else [value]


def median_ms(module: Any, inputs: Any, reps: int = 5, target_ms: float = 25.0, min_calls: int = 3,
              max_calls: int = 500, **options: Any) -> Tuple[float, float, int]:
    """(median, min, calls per burst) of ms per forward: a :class:`SessionTimer` opened, timed and closed."""
    timer = SessionTimer(module, inputs, **options)
    try:
        times, n = timer.bursts(reps, target_ms, min_calls=min_calls, max_calls=max_calls)
    finally:
        timer.close()
    return statistics.median(times), min(times), n


def side_by_side(timers: Dict[str, SessionTimer], rounds: int, calls: int,
                 order: Optional[List[str]] = None) -> Dict[str, List[float]]:
    """ms per call of every timer, alternating within each of ``rounds`` rounds (the order reversed every other
    round), so a drifting machine hits them alike."""
    names = order or list(timers)
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            samples[name].append(timers[name].ms(calls))
    return samples
