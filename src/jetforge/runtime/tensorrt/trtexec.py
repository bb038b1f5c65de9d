"""The ``trtexec`` command line that does what a jetforge ``build`` or ``bench`` did, for people who check with it.

trtexec (TensorRT's sample tool) is what NVIDIA's forums and Jetson users reach for; printing its equivalent lets
a user repeat a jetforge run with it and compare.  Flag spellings are trtexec's (TensorRT 8.5-10.x "Command-Line
Programs"): ``--onnx``, ``--saveEngine``, ``--loadEngine``, ``--fp16``, ``--int8``, ``--calib``,
``--useDLACore``, ``--allowGPUFallback``, ``--sparsity=enable``, ``--stronglyTyped``,
``--precisionConstraints=prefer`` with ``--layerPrecisions``, ``--memPoolSize=POOL:MiB`` (a bare number is MiB in
every version; TensorRT 10 removed ``--workspace``), ``--minShapes/--optShapes/--maxShapes`` and ``--shapes``
(``NAME:DIMS``), ``--timingCacheFile``, ``--builderOptimizationLevel``, ``--iterations``, ``--warmUp`` (ms),
``--duration`` (s), ``--useCudaGraph``, ``--loadInputs`` (raw bytes, not .npy), ``--exportTimes``,
``--exportProfile`` with ``--separateProfileRun``.  Only strings are made here: nothing imports TensorRT.
"""

import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

#: BuildPlan builder flags -> trtexec options
_FLAG_OPTIONS = {"FP16": "--fp16", "INT8": "--int8", "SPARSE_WEIGHTS": "--sparsity=enable",
                 "GPU_FALLBACK": "--allowGPUFallback", "PREFER_PRECISION_CONSTRAINTS": "--precisionConstraints=prefer"}
#: BuildPlan memory pools -> trtexec's pool names
_POOLS = {"workspace": "workspace", "dla_managed_sram": "dlaSRAM", "dla_local_dram": "dlaLocalDRAM",
          "dla_global_dram": "dlaGlobalDRAM"}


def _arg(flag: str, value: Any) -> str:
    return shlex.quote("%s=%s" % (flag, value))


def _dims(dims: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in dims)


def _shapes(shapes: Mapping[str, Sequence[int]]) -> str:
    return ",".join("%s:%s" % (name, _dims(d)) for name, d in shapes.items())


def _mib(nbytes: int) -> str:
    return ("%.6f" % (nbytes / float(1 << 20))).rstrip("0").rstrip(".")


def build_command(plan: Any, engine_path: Any) -> str:
    """``trtexec`` building what ``plan`` (a :class:`~jetforge.runtime.tensorrt.plan.BuildPlan`) builds."""
    parts: List[str] = ["trtexec", _arg("--onnx", plan.onnx_path)]
    if plan.strongly_typed:
        parts.append("--stronglyTyped")
    parts += [_FLAG_OPTIONS[f] for f in plan.flags if f in _FLAG_OPTIONS]
    if plan.int8_source == "cache" and plan.calibration_cache:
        parts.append(_arg("--calib", plan.calibration_cache))
    if plan.layer_precisions:
        parts.append(_arg("--layerPrecisions", ",".join("%s:%s" % kv for kv in sorted(plan.layer_precisions.items()))))
    if plan.device == "dla" and plan.dla_core is not None:
        parts.append("--useDLACore=%d" % int(plan.dla_core))
    pools = ",".join("%s:%s" % (_POOLS.get(k, k), _mib(v)) for k, v in plan.memory_pools.items())
    if pools:
        parts.append(_arg("--memPoolSize", pools))
    for profile in plan.profiles[:1]:  # trtexec builds one optimisation profile
        for key, flag in (("min", "--minShapes"), ("opt", "--optShapes"), ("max", "--maxShapes")):
            parts.append(_arg(flag, _shapes({name: rng[key] for name, rng in profile.items()})))
    if plan.timing_cache:
        parts.append(_arg("--timingCacheFile", plan.timing_cache))
    if plan.builder_optimization_level is not None:
        parts.append("--builderOptimizationLevel=%d" % int(plan.builder_optimization_level))
    parts.append(_arg("--saveEngine", engine_path))
    return " ".join(parts)


def bench_command(model: Any, *, engine: bool, shapes: Mapping[str, Sequence[int]], iterations: int,
                  duration_s: float, warmup_ms: Optional[float] = None, dla_core: Optional[int] = None,
                  cuda_graph: Optional[bool] = None, load_inputs: Optional[Mapping[str, Any]] = None,
                  export_times: Optional[str] = None, profile: Optional[str] = None) -> str:
    """``trtexec`` timing what ``jetforge bench`` timed (an ONNX model is built by trtexec first: FP32 unless
    precision flags are added, so its numbers are TensorRT's, not ONNX Runtime's)."""
    parts = ["trtexec", _arg("--loadEngine" if engine else "--onnx", model)]
    if dla_core is not None:
        parts.append("--useDLACore=%d" % int(dla_core))
    if shapes:
        parts.append(_arg("--shapes", _shapes(shapes)))
    if load_inputs:  # trtexec reads raw bytes: the .npy's array saved with x.tofile(NAME.bin)
        parts.append(_arg("--loadInputs", ",".join("%s:%s.bin" % (n, str(p).rsplit(".npy", 1)[0])
                                                   for n, p in load_inputs.items())))
    parts += ["--iterations=%d" % int(iterations), "--duration=%s" % ("%g" % duration_s)]
    if warmup_ms is not None:
        parts.append("--warmUp=%s" % ("%g" % warmup_ms))
    if cuda_graph or (cuda_graph is None and engine):
        parts.append("--useCudaGraph")
    if export_times:
        parts.append(_arg("--exportTimes", export_times))
    if profile:
        parts += [_arg("--exportProfile", profile), "--separateProfileRun"]
    return " ".join(parts)


def notes_for_bench(load_inputs: Optional[Mapping[str, Any]], engine: bool) -> List[str]:
    """What differs between the printed trtexec line and the jetforge run."""
    notes: List[str] = []
    if not engine:
        notes.append("trtexec builds a TensorRT engine from the ONNX first (FP32 unless --fp16/--int8 are added)")
    if load_inputs:
        notes.append("trtexec --loadInputs reads raw bytes: np.load(F).tofile(F.bin) for each .npy")
    return notes


def flag_table() -> Dict[str, str]:
    """BuildPlan flag -> trtexec option (documentation and tests)."""
    return dict(_FLAG_OPTIONS)


__all__ = ["bench_command", "build_command", "flag_table", "notes_for_bench"]
