"""``python -m jetforge.deploy.remote_bench MODEL``: the deploy's fallback benchmark.

Used by ``jetforge deploy --run bench`` only where the board's jetforge has no ``jetforge bench``
command.  It times blocking ``infer`` calls of one session (ONNX Runtime for ``.onnx``) with
:mod:`jetforge.runtime.measure` and prints the same top-level keys as ``jetforge bench --json``
(``latency_ms``, ``throughput``, ``memory``, ``backend``), so the fetched results read the same.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np


def _inputs(session: Any, batch: int, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.inputs:
        shape = [int(d) if isinstance(d, int) and d > 0 else (batch if axis == 0 else 1)
                 for axis, d in enumerate(spec.shape)]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[spec.name] = rng.random(shape, dtype=np.float32).astype(dtype)
        else:
            feeds[spec.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


def benchmark(model: str, iterations: int = 200, warmup: int = 20, batch: int = 1, seed: int = 0,
              threads: Optional[int] = None) -> Dict[str, Any]:
    from jetforge.runtime.measure import latency_stats, memory_info, reset_peak_rss
    from jetforge.runtime.session import open_session

    options = {"threads": threads} if threads else {}
    reset_peak_rss()
    with open_session(model, **options) as session:
        feeds = _inputs(session, batch, seed)
        t0 = time.perf_counter()
        session.infer(feeds)
        first = time.perf_counter() - t0
        for _ in range(max(0, warmup - 1)):
            session.infer(feeds)
        samples: List[float] = []
        for _ in range(iterations):
            t = time.perf_counter()
            session.infer(feeds)
            samples.append(time.perf_counter() - t)
        backend = session.info() if hasattr(session, "info") else {"backend": session.backend}
    stats = latency_stats(samples)
    return {"model": str(model), "backend": backend, "batch": batch, "iterations": iterations,
            "warmup_iterations": warmup, "latency_ms": stats.to_dict(),
            "throughput": {"inferences_per_s": stats.fps, "images_per_s": stats.fps * batch},
            "warmup": {"first_call_ms": first * 1000.0},
            "memory": {"process": memory_info().to_dict()}, "source": "jetforge.deploy.remote_bench"}


PROG = "python -m jetforge.deploy.remote_bench"


def main(argv: Optional[List[str]] = None) -> int:
    """The board-side command (:mod:`jetforge.entry`: bad input one line and exit 1, SIGTERM like Ctrl-C: 130)."""
    from jetforge.entry import run_entry

    return run_entry(PROG, lambda: _main(argv), process_exit=argv is None)


def _main(argv: Optional[List[str]]) -> int:
    from jetforge.entry import ArgumentParser

    parser = ArgumentParser(prog=PROG, description="time a model's infer calls (deploy's fallback benchmark)")
    parser.add_argument("model")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", metavar="DIR")
    parser.add_argument("--json", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    from jetforge.fileio import write_json_atomic

    data = benchmark(args.model, args.iterations, args.warmup, args.batch, args.seed, args.threads)
    if args.out:
        write_json_atomic(Path(args.out) / "bench.json", data)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        lat = data["latency_ms"]
        print("%s: mean %.3f ms, p50 %.3f ms, p99 %.3f ms, %.1f inferences/s, peak RSS %.0f MiB"
              % (args.model, lat["mean_ms"], lat["p50_ms"], lat["p99_ms"], data["throughput"]["inferences_per_s"],
                 data["memory"]["process"]["peak_rss_mib"]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
