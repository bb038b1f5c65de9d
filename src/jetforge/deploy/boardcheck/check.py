"""``jetforge board-check BUNDLE``: the acceptance run on a real board, the first thing to run on a new Jetson.

On the board it:

1. verifies the bundle and detects the board (module, JetPack, TensorRT, power mode from ``nvpmodel -q``);
2. builds the bundle's engines through the board's engine cache (:func:`jetforge.deploy.onboard.build_bundle`):
   GPU FP16, GPU INT8 (when the bundle has an INT8 source for this TensorRT), and one engine per DLA core
   (INT8 from the calibration cache where there is one, else FP16);
3. runs every engine on the bundle's samples and compares its outputs with jetforge's FP32 and simulated-INT8
   outputs stored in the bundle (:mod:`.boardcheck_compare` has the thresholds);
4. compares the layer placement TensorRT reports (engine inspector, in the build report) with dla-check's
   prediction for the DLA engines;
5. measures each engine's latency (:func:`jetforge.runtime.bench.run_benchmark`) and compares it with
   ``jetforge estimate``'s (:func:`jetforge.runtime.estimate.result.estimate`);
6. records tegrastats (power, DLA activity, memory) for the whole run and per engine;
7. writes ``board-check.json`` and ``board-check.txt``; the JSON's ``estimate_points`` are measured points in
   the format of the estimator's published-results file (``benchmarks/estimator/data/published_jetson.yaml``).

Everything up to the first TensorRT call runs anywhere; where TensorRT is missing the report says so,
with the dla-check prediction and the estimate it already has, and the command exits 3 like
``jetforge build BUNDLE``.  The TensorRT parts go through :class:`JetsonTensorRT` (build, run, time), which
tests replace with a fake named as such.  Not executed on a board by jetforge's authors.
"""

import datetime
import logging
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.deploy.boardcheck import compare as cmp
from jetforge.fileio import PathLike, write_json_atomic, write_text_atomic

log = logging.getLogger(__name__)

REPORT_JSON = "board-check.json"
REPORT_TEXT = "board-check.txt"
REPORT_FORMAT = 1


class JetsonTensorRT:
    """The TensorRT side of board-check: build an engine from a plan, run it, time it (JetPack's TensorRT)."""

    def build(self, plan: Any, engine_path: Path) -> Any:
        from jetforge.runtime.tensorrt.builder import build_engine

        return build_engine(plan, engine_path)

    def run(self, engine: Path, dla_core: Optional[int], inputs: np.ndarray) -> Dict[str, np.ndarray]:
        """Every output for every sample, one sample per inference (bundle engines have a static batch of 1)."""
        from jetforge.runtime.session import open_session

        with open_session(engine, backend="tensorrt", dla_core=dla_core) as session:
            name = session.inputs[0].name
            rows = [session.infer({name: x[None]}) for x in inputs]
        return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}

    def benchmark(self, engine: Path, dla_core: Optional[int], iterations: int) -> Dict[str, Any]:
        from jetforge.runtime.bench import run_benchmark
        from jetforge.runtime.session import open_session

        with open_session(engine, backend="tensorrt", dla_core=dla_core) as session:
            return run_benchmark(session, iterations=iterations).to_dict()


def power_mode() -> Optional[str]:
    """The board's nvpmodel mode name (``nvpmodel -q``: "NV Power Mode: MAXN"), None off a Jetson."""
    try:
        out = subprocess.run(["nvpmodel", "-q"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if "Power Mode" in line and ":" in line:
            return line.split(":", 1)[1].strip() or None
    return None


def engine_list(bundle: Any, board: Any) -> List[Tuple[str, str, Optional[int]]]:
    """(name, precision, DLA core) of each engine to build on this board."""
    from jetforge.runtime.tensorrt.int8_source import choose_int8_source

    version = board.tensorrt_version
    caches = [c["tensorrt"] for c in bundle.manifest.calibration]
    have_qdq = bundle.qdq is not None
    engines = [("gpu-fp16", "fp16", None)]
    if choose_int8_source(version, "gpu", "int8", caches, have_qdq)[0] is not None:
        engines.append(("gpu-int8", "int8", None))
    dla_int8 = choose_int8_source(version, "dla", "int8", caches, have_qdq)[0] is not None
    for core in range(int(getattr(board.target, "dla_cores", 0) or 0)):
        engines.append(("dla%d-%s" % (core, "int8" if dla_int8 else "fp16"), "int8" if dla_int8 else "fp16", core))
    return engines


def _estimate(bundle: Any, target: Any, precision: str, dla_core: Optional[int], mode: Optional[str],
              notes: List[str]) -> Optional[float]:
    """``jetforge estimate``'s batch-1 latency in ms, or None (with a note) where it cannot run here."""
    try:
        from jetforge.runtime.estimate.result import estimate

        est = estimate(bundle.onnx, target, precision=precision, batches=[1], dla_core=dla_core, power_mode=mode,
                       input_shapes=bundle.manifest.build_options.get("input_shapes") or None)
        return float(est.batches[0].latency_s * 1e3)
    except Exception as err:  # the estimate is information: a board-check must not fail on it
        text = getattr(err, "message", str(err))
        note = "no latency estimate for %s%s: %s" % (precision, "" if dla_core is None else " DLA", text)
        if note not in notes:
            notes.append(note)
        return None


def _prediction(bundle: Any, target: Any, precision: str, notes: List[str]) -> Optional[List[Any]]:
    """dla-check's per-node prediction for this bundle on ``target`` (None, with a note, where it cannot run)."""
    try:
        from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx

        shapes = bundle.manifest.build_options.get("input_shapes") or None
        return list(analyze_onnx(bundle.onnx, target, precision=precision, input_shapes=shapes).layers)
    except Exception as err:
        notes.append("no dla-check prediction: %s" % getattr(err, "message", str(err)))
        return None


def run_board_check(bundle_path: PathLike, out: PathLike, *, target: Optional[str] = "auto",
                    tensorrt: Optional[str] = None, layer: Optional[JetsonTensorRT] = None, board: Any = None,
                    cache: Any = None, iterations: int = 200, tegrastats: Optional[str] = "tegrastats",
                    mode: Optional[str] = None) -> Dict[str, Any]:
    """Do the steps of the module docstring; returns the report (also written to ``out``)."""
    from jetforge.deploy.bundle import open_bundle
    from jetforge.deploy.bundle_samples import read_samples
    from jetforge.deploy.onboard import detect_board
    from jetforge.output_set import check_output_folder
    from jetforge.runtime.sidecar import read_sidecar

    check_output_folder(out, "board-check --out")  # a file there failed only after every engine was built and timed
    bundle = open_bundle(bundle_path)
    sidecar = read_sidecar(bundle.onnx)
    board = board or detect_board(target, tensorrt)
    samples = read_samples(bundle.path, sidecar)
    mode = mode or power_mode()
    report: Dict[str, Any] = {
        "format": REPORT_FORMAT, "kind": "jetforge-board-check",
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "bundle": {"name": bundle.manifest.name, "hash": bundle.manifest.bundle_hash, "model": sidecar.model_name,
                   "task": sidecar.task}, "board": board.to_dict(), "power_mode": mode,
        "samples": None if samples is None else {"count": len(samples), "names": samples.names, "how": samples.how},
        "engines": [], "notes": [], "estimate_points": []}
    notes: List[str] = report["notes"]
    if samples is None:
        notes.append("the bundle has no samples: outputs are not compared (bundle create --samples DIR_OR_VIDEO)")
    if board.target is None:
        return _finish(report, out, "no-target", "cannot tell which board this is (%s): pass --target" % board.how)
    predictions: Dict[str, Optional[List[Any]]] = {}
    if getattr(board.target, "has_dla", False):
        for precision in sorted({p for _, p, core in engine_list(bundle, board) if core is not None}):
            predictions[precision] = _prediction(bundle, board.target, precision, notes)
    if board.tensorrt_installed is None and layer is None:
        for name, precision, core in engine_list(bundle, board):
            estimated = _estimate(bundle, board.target, precision, core, mode, notes)
            report["engines"].append({"name": name, "precision": precision, "dla_core": core, "built": False,
                                      "latency": cmp.latency_comparison(None, estimated)})
        return _finish(report, out, "tensorrt-missing",
                       "TensorRT is not installed here: no engine was built; run board-check on the Jetson")
    layer = layer or JetsonTensorRT()
    monitor = _start_tegrastats(tegrastats, notes)
    try:
        for name, precision, core in engine_list(bundle, board):
            report["engines"].append(_check_engine(bundle, board, layer, cache, samples, sidecar.task, name, precision,
                                                   core, predictions.get(precision), iterations, monitor, mode, notes))
    finally:
        if monitor is not None:
            monitor.stop()
            report["tegrastats"] = monitor.summary()
    failed = [e["name"] for e in report["engines"] if not e.get("ok")]
    status = "pass" if not failed else "fail"
    report["points_for_estimate"] = "estimate_points: measured latencies in the format of the estimator's data file"
    return _finish(report, out, status, "" if not failed else "engines that did not pass: %s" % ", ".join(failed))


def _check_engine(bundle: Any, board: Any, layer: JetsonTensorRT, cache: Any, samples: Any, task: str, name: str,
                  precision: str, core: Optional[int], predicted: Optional[List[Any]], iterations: int, monitor: Any,
                  mode: Optional[str], notes: List[str]) -> Dict[str, Any]:
    from jetforge.deploy.onboard import build_bundle
    from jetforge.errors import JetforgeError

    entry: Dict[str, Any] = {"name": name, "precision": precision, "dla_core": core, "built": False}
    started = time.monotonic()
    overrides: Dict[str, Any] = {"precision": precision, "dla_core": core}
    try:
        built = build_bundle(bundle.path, board=board, overrides=overrides, builder=layer.build, cache=cache)
    except Exception as err:  # one engine failing to build is a finding, not the end of the check
        entry.update(ok=False, reasons=["build failed: %s" % getattr(err, "message", str(err))])
        return entry
    engine = Path(built["engine"])
    entry.update(built=True, engine=str(engine), cache=built.get("cache"), int8_source=built.get("int8_source"))
    reasons: List[str] = []
    report_path = Path(str(engine) + ".report.json")
    inspector = _read_json(report_path).get("inspector", {"available": False, "reason": "no build report"})
    if core is not None and predicted is not None:
        entry["placement"] = cmp.compare_placement(predicted, inspector)
        if entry["placement"].get("available") and not entry["placement"]["ok"]:
            reasons.append("%d layer(s) placed differently from dla-check's prediction"
                           % len(entry["placement"]["disagree"]))
    if samples is not None:
        outputs = layer.run(engine, core, samples.inputs)
        entry["vs_fp32"] = cmp.compare_outputs(outputs, samples.references.get("fp32", {}), task)
        sim = samples.references.get("int8_simulated")
        entry["vs_int8_simulated"] = cmp.compare_outputs(outputs, sim, task) if sim else None
        verdict = cmp.output_verdict(precision, entry["vs_fp32"], entry["vs_int8_simulated"])
        reasons += verdict["reasons"]
    try:
        bench = layer.benchmark(engine, core, iterations)
    except JetforgeError as err:  # timing is information: the report says why it is missing, the check goes on
        bench = {"latency_ms": None}
        notes.append("%s: latency not measured: %s" % (name, err.message))
    measured = (bench.get("latency_ms") or {}).get("mean")
    estimated = _estimate(bundle, board.target, precision, core, mode, notes)
    entry["latency"] = cmp.latency_comparison(measured, estimated)
    entry["latency"]["percentiles_ms"] = bench.get("latency_ms")
    if monitor is not None:
        entry["tegrastats"] = _window_summary(monitor, started, time.monotonic())
    entry["ok"] = not reasons
    entry["reasons"] = reasons
    if measured is not None:
        entry["estimate_point"] = _point(bundle, board, mode, name, precision, core, bench)
    return entry


def _point(bundle: Any, board: Any, mode: Optional[str], name: str, precision: str, core: Optional[int],
           bench: Dict[str, Any]) -> Dict[str, Any]:
    """A measured point in the estimator's data format (board, power mode, JetPack/TensorRT, precision, batch, devices)."""
    lat = bench.get("latency_ms") or {}
    shapes = bundle.manifest.build_options.get("input_shapes") or {}
    return {"id": "board-check-%s-%s-%s" % (board.target.name, bundle.manifest.bundle_hash[:12], name),
            "source": "jetforge board-check %s" % datetime.date.today().isoformat(),
            "board": board.target.name, "power_mode": mode, "jetpack": board.jetpack,
            "tensorrt": board.tensorrt_installed, "network": bundle.manifest.name,
            "model": "bundle %s model.onnx (sha256 in its manifest)" % bundle.manifest.bundle_hash[:12],
            "input_shapes": shapes, "precision": precision, "devices": "gpu" if core is None else "dla",
            "dla_engines": 0 if core is None else 1, "batch": 1, "metric": "latency_ms", "value": lat.get("mean"),
            "statistic": "mean of the run; p50 %s, p99 %s ms" % (lat.get("p50"), lat.get("p99")), "measured": True}


def _window_summary(monitor: Any, start: float, end: float) -> Dict[str, Any]:
    samples = monitor.between(start, end)
    out: Dict[str, Any] = {"samples": len(samples)}
    power = [s.total_power_mw for s in samples if s.total_power_mw is not None]
    if power:
        out["total_power_mw"] = {"mean": float(np.mean(power)), "max": float(max(power))}
    ram = [s.ram_used_mb for s in samples if s.ram_used_mb is not None]
    if ram:
        out["ram_used_mb"] = {"mean": float(np.mean(ram)), "max": float(max(ram))}
    dla: Dict[str, List[float]] = {}
    for s in samples:
        for engine, value in s.dla_active.items():
            if value is not None:
                dla.setdefault(engine, []).append(float(value))
    if dla:
        out["dla_active"] = {k: {"mean": float(np.mean(v)), "max": float(max(v))} for k, v in dla.items()}
    return out


def _start_tegrastats(executable: Optional[str], notes: List[str]) -> Any:
    if not executable:
        return None
    from jetforge.errors import DependencyError
    from jetforge.runtime.tegrastats import TegrastatsMonitor

    try:
        return TegrastatsMonitor(interval_ms=100, executable=executable).start()
    except DependencyError as err:
        notes.append("tegrastats not recorded: %s" % err.message)
        return None


def _read_json(path: Path) -> Dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _finish(report: Dict[str, Any], out: PathLike, status: str, message: str) -> Dict[str, Any]:
    report["status"] = status
    if message:
        report["message"] = message
    report["estimate_points"] = [e.pop("estimate_point") for e in report["engines"] if "estimate_point" in e]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / REPORT_JSON, report)
    write_text_atomic(folder / REPORT_TEXT, cmp.render_text(report))
    report["files"] = [str(folder / REPORT_JSON), str(folder / REPORT_TEXT)]
    return report


__all__ = ["JetsonTensorRT", "REPORT_JSON", "REPORT_TEXT", "engine_list", "power_mode", "run_board_check"]
