"""``estimate()``: the model on a target at each batch size, with what the numbers rest on and where they are weak.

The warnings are part of the result, not decoration: rates the profile marks uncertain, layer
types whose efficiency was never calibrated (with their share of the estimated time), DLA
placement verdicts that rest on uncertain rules, operators the estimator does not know, a memory
total above the board's, and the efficiency set's own measured error.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from jetforge.errors import ConfigError
from jetforge.runtime.estimate.efficiency import EfficiencySet, efficiency_set
from jetforge.runtime.estimate.model import DLA, GPU, BatchEstimate, Placed, place, read_model, time_placed
from jetforge.runtime.estimate.rates import TargetRates, target_rates

MAX_BATCH = 4096


@dataclass
class Estimate:
    model: str
    target: str
    precision: str
    dla_core: Optional[int]
    fusion: str
    efficiency: EfficiencySet
    rates: TargetRates
    batches: List[BatchEstimate]
    warnings: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    dla_fallback: List[str] = field(default_factory=list)
    validation: List[str] = field(default_factory=list)   # the checks that cover this case (see validation_lines)

    def to_dict(self, layers: bool = True) -> Dict[str, Any]:
        return {
            "model": self.model, "target": self.target, "precision": self.precision,
            "power_mode": self.rates.power_mode, "dla_core": self.dla_core, "fusion": self.fusion,
            "efficiency_set": {"name": self.efficiency.name, "description": self.efficiency.description,
                               "obtained": self.efficiency.obtained, "fitted_on": list(self.efficiency.fitted_on),
                               "validation": list(self.efficiency.validation)},
            "rates": self.rates.to_dict(),
            "batches": [b.to_dict(layers=layers) for b in self.batches],
            "dla_gpu_fallback": list(self.dla_fallback),
            "validation_for_this_case": list(self.validation),
            "warnings": list(self.warnings), "notes": list(self.notes),
            "model_kind": "roofline estimate (not a measurement)",
        }


def parse_batches(text: Union[str, Sequence[int]]) -> List[int]:
    """``"1,8"`` -> ``[1, 8]``; each batch in 1..4096, no duplicates."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: List[int] = []
    for item in items:
        try:
            value = int(str(item).strip())
        except ValueError:
            raise ConfigError("batch size %r is not an integer" % (item,), hint="e.g. --batch 1,8,32") from None
        if not 1 <= value <= MAX_BATCH:
            raise ConfigError("batch size %d is outside 1..%d" % (value, MAX_BATCH), hint="e.g. --batch 1,8,32")
        if value not in out:
            out.append(value)
    if not out:
        raise ConfigError("no batch size given", hint="e.g. --batch 1,8")
    return out


def estimate(model: Union[str, Path, Any], target: Any, precision: str = "fp16", batches: Sequence[int] = (1,),
             dla_core: Optional[int] = None, power_mode: Optional[str] = None,
             efficiency: Union[str, EfficiencySet] = "tensorrt", fusion: Optional[str] = None,
             input_shapes: Optional[Mapping[str, Sequence[int]]] = None) -> Estimate:
    """Estimate ``model`` on ``target`` (a profile) at each of ``batches``; see the package docstring.
    ``fusion=None``: the kernel grouping the efficiency set describes (its ``fusion``)."""
    eff = efficiency if isinstance(efficiency, EfficiencySet) else efficiency_set(efficiency)
    fusion = fusion or eff.fusion
    precision, best_note = _resolve_best(target, precision, "dla" if dla_core is not None else "gpu")
    if dla_core is not None:
        if not target.has_dla:
            from jetforge.errors import TargetError

            raise TargetError("target %s has no DLA core" % target.name, hint="drop --dla-core or choose a DLA target")
        if not 0 <= dla_core < target.dla_cores:
            raise ConfigError("--dla-core %d: %s has DLA cores 0..%d" % (dla_core, target.name, target.dla_cores - 1),
                              hint="use --dla-core 0")
        if precision not in ("fp16", "int8"):
            raise ConfigError("the DLA runs FP16 or INT8 only, not %s" % precision,
                              hint="use --precision fp16 or int8 with --dla-core")
    rates = target_rates(target, precision, power_mode, dla=dla_core is not None)
    if dla_core is not None and rates.dla_per_core is None:
        from jetforge.errors import TargetError

        raise TargetError("target %s has no DLA %s rate in its profile" % (target.name, precision),
                          hint="add dla_%s_%s_dense with its source to the profile" % (
                              precision, "tops" if precision == "int8" else "tflops"))
    proto = read_model(model)
    name = str(model) if isinstance(model, (str, Path)) else (proto.graph.name or "model")
    results: List[BatchEstimate] = []
    last: Optional[Placed] = None
    for batch in parse_batches(batches):
        last = place(proto, batch, precision, target=target, dla_core=dla_core, fusion=fusion,
                     input_shapes=input_shapes, unfold_batchnorm=eff.unfolded_batchnorm)
        results.append(time_placed(last, rates, eff))
    assert last is not None
    over = [(b.batch, b.dla_subgraphs) for b in results if last.dla_loadable_limit and
            b.dla_subgraphs > last.dla_loadable_limit]
    out = Estimate(model=name, target=target.name, precision=precision, dla_core=dla_core, fusion=fusion,
                   efficiency=eff, rates=rates, batches=results, dla_fallback=list(last.dla_fallback),
                   notes=best_note + list(rates.notes) + list(last.notes))
    out.warnings = _warnings(out, last, target)
    out.validation = validation_lines(out, target)
    for batch, count in over:
        out.warnings.insert(0, "batch %d: %d DLA subgraphs exceed the %d loadables per core: TensorRT would not "
                               "build this engine as estimated (see jetforge dla-check)"
                            % (batch, count, last.dla_loadable_limit))
    return out


def _resolve_best(target: Any, precision: str, device: str) -> Tuple[str, List[str]]:
    """``best`` (TensorRT picks the fastest kernel of every precision it may use, per layer) is estimated at the
    fastest precision the device runs: INT8 where it has INT8, else FP16; (precision, note)."""
    if precision != "best":
        return precision, []
    chosen = "int8" if target.supports_precision("int8", device) else "fp16"
    return chosen, ["precision best estimated as %s: TensorRT picks the fastest kernel per layer, and %s is the "
                    "fastest precision the %s of %s runs" % (chosen.upper(), chosen.upper(), device.upper(),
                                                             target.name)]


def validation_lines(est: Estimate, target: Any) -> List[str]:
    """What the efficiency set was checked on that covers this case -- device (GPU, and DLA where layers run
    there), precision and kind of target -- from its shipped validation entries; and, where none covers it, that
    the number is unchecked and what was checked instead (issue 26, item 2)."""
    eff = est.efficiency
    devices = [GPU] + ([DLA] if any(k.kernel.device == DLA for k in est.batches[0].kernels) else [])
    lines: List[str] = []
    for device in devices:
        checks = eff.checks_for(device, est.precision, target.kind)
        for v in checks:
            numbers = ""
            if v.median_abs_pct is not None:
                numbers = " -- median |error| %.1f %%, worst %.2fx over %d points (%s)" % (
                    v.median_abs_pct, v.worst_ratio or float("nan"), v.points, v.kind.replace("_", " "))
            lines.append("%s %s on %s: %s%s%s" % (device, est.precision.upper(), target.kind, v.text, numbers,
                                                  " [%s]" % v.file if v.file else ""))
        if not checks:
            covered = sorted({"%s %s on %s" % (v.device, "/".join(p.upper() for p in v.precisions), v.targets)
                              for v in eff.validation})
            lines.append("%s %s on a %s target: NOT validated -- efficiency set %r was checked only for %s; treat "
                         "the number as a first-order estimate" % (device, est.precision.upper(), target.kind,
                                                                   eff.name, ", ".join(covered) or "nothing"))
    return lines


def _warnings(est: Estimate, placed: Placed, target: Any) -> List[str]:
    out: List[str] = []
    if est.rates.uncertain:
        out.append("rates the profile marks uncertain (derived or not checked against an NVIDIA document): %s; "
                   "their sources are in --json under rates.used" % ", ".join(sorted(set(est.rates.uncertain))))
    first = est.batches[0]
    total = first.latency_s or 1.0
    shares: Dict[str, float] = {}
    for k in first.kernels:
        cat = k.kernel.category
        if cat != "elided" and est.efficiency.uncalibrated(k.kernel.device, cat):
            key = "%s on %s" % (cat, k.kernel.device)
            shares[key] = shares.get(key, 0.0) + k.time_s
    if shares:
        ranked = sorted(shares.items(), key=lambda kv: -kv[1])
        listed = ", ".join("%s %.0f%%" % (k, 100.0 * v / total) for k, v in ranked)
        out.append("layer types without calibration data in efficiency set %r (share of the estimated time): %s"
                   % (est.efficiency.name, listed))
    unknown = sorted({k.kernel.head.op for k in first.kernels if k.kernel.category == "other"})
    if unknown:
        out.append("operators the estimator has no cost model for (timed as generic memory-bound work): %s"
                   % ", ".join(unknown))
    if est.dla_core is not None and placed.dla_uncertain_layers:
        out.append("%d layers' DLA placement rests on rules marked uncertain (see jetforge dla-check)"
                   % placed.dla_uncertain_layers)
    if est.precision == "int8":
        out.append("INT8 assumes every convolution and GEMM runs in INT8 (a calibration cache or Q/DQ model); "
                   "layers TensorRT keeps in FP16 run slower than estimated")
    if target.kind == "jetson" and est.efficiency.fusion != "tensorrt":
        out.append("efficiency set %r was not made for TensorRT on Jetson" % est.efficiency.name)
    memory_gb = target.memory_gb
    peak = max(b.memory.total for b in est.batches)
    if memory_gb and peak > memory_gb * 1e9 * 0.8:
        out.append("estimated memory %.2f GB is above 80%% of the board's %.0f GB (shared with the CPU)"
                   % (peak / 1e9, memory_gb))
    if est.dla_core is not None and any(k.kernel.device == DLA for k in first.kernels):
        out.append("DLA FP16 rates are assumed upper bounds on Orin (NVIDIA publishes INT8 only)"
                   if est.precision == "fp16" and target.dla_version == "2.0" else
                   "GPU and DLA work of one inference is modelled as serial; concurrent engines contend for memory "
                   "bandwidth, which is not modelled")
    return out


__all__ = ["Estimate", "estimate", "parse_batches", "validation_lines"]
