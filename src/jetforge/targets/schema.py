"""The shape of a target profile: frozen dataclasses and the table of allowed spec keys.

A profile (``targets/profiles/<name>.yaml``) is data, and every number in it
carries its source.  Numbers live under ``specs:`` as ``{value, source,
uncertain, note}`` mappings whose keys and units are fixed by
:data:`SPEC_FIELDS`; power modes, JetPack releases and precision support carry
a source of their own.  ``uncertain: true`` marks a value from general
knowledge, a derivation, a third-party report or a datasheet not checked here;
such values are shown with a mark by the CLI and must never be treated as
measured.  A value whose primary source was not recorded says so in its source.

Loading and validation live in :mod:`jetforge.targets.loader`; this module only
defines what a valid profile looks like and the read-only :class:`Target` view.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from jetforge.errors import UnknownNameError

KINDS = ("jetson", "desktop", "server")

#: Precisions a target may support, in the order they are shown.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp4")

#: Precisions the DLA can run at all (DLA-SW FAQ; TensorRT developer guide: "FP16 or INT8 mode").
DLA_PRECISIONS = ("fp16", "int8")

#: Keys allowed in a power mode's ``clocks`` mapping (MHz unless the name says otherwise).
CLOCK_KEYS = ("cpu_cores", "cpu_max_mhz", "gpu_max_mhz", "gpu_tpcs", "dla_core_mhz", "dla1_core_mhz",
              "dla_falcon_mhz", "emc_max_mhz")

CC_PATTERN = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
VERSION_PATTERN = re.compile(r"^\d+(\.\d+){0,3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class SpecField:
    """What one key under ``specs:`` may hold."""

    type: type          # int, float, str or list (of str)
    unit: Optional[str]
    label: str
    required: bool = False


#: Every key a profile may put under ``specs:``. An unknown key is an error (with a did-you-mean).
SPEC_FIELDS: Dict[str, SpecField] = {
    "gpu_architecture": SpecField(str, None, "GPU architecture", required=True),
    "compute_capability": SpecField(str, None, "CUDA compute capability", required=True),
    "sm_count": SpecField(int, "SMs", "streaming multiprocessors"),
    "cuda_cores": SpecField(int, None, "CUDA cores"),
    "tensor_cores": SpecField(int, None, "Tensor cores"),
    "max_gpu_clock_mhz": SpecField(float, "MHz", "max GPU clock"),
    "max_gpu_clock_mhz_super": SpecField(float, "MHz", "max GPU clock in Super mode"),
    "cpu": SpecField(str, None, "CPU"),
    "memory_gb": SpecField(float, "GB", "memory size"),  # required for Jetson (checked by the loader)
    "memory_type": SpecField(str, None, "memory type"),
    "memory_bus_width_bits": SpecField(int, "bit", "memory bus width"),
    "memory_bandwidth_gbs": SpecField(float, "GB/s", "memory bandwidth"),
    "memory_bandwidth_gbs_super": SpecField(float, "GB/s", "memory bandwidth in Super mode"),
    "int8_tops_dense": SpecField(float, "TOPS", "INT8 peak, dense (GPU + DLA)"),
    "int8_tops_sparse": SpecField(float, "TOPS", "INT8 peak, 2:4 sparse (GPU + DLA)"),
    "int8_tops_sparse_super": SpecField(float, "TOPS", "INT8 peak, sparse, Super mode"),
    "gpu_int8_tops_sparse": SpecField(float, "TOPS", "GPU-only INT8 peak, sparse"),
    "gpu_fp16_tflops_dense": SpecField(float, "TFLOPS", "GPU FP16 peak, dense"),
    "gpu_fp32_tflops": SpecField(float, "TFLOPS", "GPU FP32 peak"),
    "gpu_fp8_tflops_sparse": SpecField(float, "TFLOPS", "GPU FP8 peak, sparse"),
    "gpu_fp4_tflops_sparse": SpecField(float, "TFLOPS", "GPU FP4 peak, sparse"),
    # Rates the latency estimator (jetforge.runtime.estimate) reads; each is dense, at max_gpu_clock_mhz.
    "gpu_int8_tops_dense": SpecField(float, "TOPS", "GPU-only INT8 Tensor Core peak, dense"),
    "gpu_tf32_tflops_dense": SpecField(float, "TFLOPS", "GPU TF32 Tensor Core peak, dense"),
    "gpu_fp16_tflops_cuda_cores": SpecField(float, "TFLOPS", "GPU FP16 peak on CUDA cores (no Tensor Cores)"),
    "dla_cores": SpecField(int, None, "DLA cores", required=True),
    "dla_version": SpecField(str, None, "DLA generation"),
    "dla_max_clock_mhz": SpecField(float, "MHz", "max DLA core clock"),
    "dla_int8_tops_dense": SpecField(float, "TOPS", "INT8 peak of all DLA cores, dense"),
    "dla_int8_tops_sparse": SpecField(float, "TOPS", "INT8 peak of all DLA cores, sparse"),
    "dla_fp16_tflops_dense": SpecField(float, "TFLOPS", "FP16 peak of all DLA cores, dense"),
    "dla_sram_bytes_per_core": SpecField(int, "bytes", "DLA managed SRAM per core"),
    "dla_sram_bytes_shared": SpecField(int, "bytes", "SRAM shared by DLAs and PVAs"),
    "dla_loadables_per_core": SpecField(int, None, "DLA loadables per core"),
    "channel_multiple": SpecField(int, "channels", "channel multiple (pruning, FP16)"),
    "channel_multiple_int8": SpecField(int, "channels", "channel multiple (INT8)"),
    "min_tensorrt": SpecField(str, None, "oldest TensorRT that supports this GPU"),
    "tegrastats_rails": SpecField(list, None, "tegrastats power rails"),
}

#: Defaults used when a profile leaves a setting out (the setting is still shown as defaulted).
DEFAULT_DLA_LOADABLES_PER_CORE = 16
DEFAULT_CHANNEL_MULTIPLE = 8


@dataclass(frozen=True)
class Sourced:
    """One value with where it comes from, and whether it is verified."""

    value: Any
    unit: Optional[str] = None
    source: Optional[str] = None
    uncertain: bool = False
    note: Optional[str] = None

    @property
    def known(self) -> bool:
        return self.value is not None

    def text(self, mark: str = "", unit: bool = True) -> str:
        """The value with its unit, e.g. ``102.4 GB/s``; ``-`` when unknown; ``mark`` appended if uncertain."""
        if self.value is None:
            return "-"
        if isinstance(self.value, (list, tuple)):
            body = ", ".join(str(v) for v in self.value)
        elif isinstance(self.value, float) and self.value.is_integer():
            body = str(int(self.value))
        else:
            body = str(self.value)
        if unit and self.unit and self.unit not in ("channels",):
            body += " " + self.unit
        return body + (mark if self.uncertain else "")


@dataclass(frozen=True)
class PowerMode:
    """One nvpmodel power mode (``sudo nvpmodel -m ID``)."""

    name: str
    id: Optional[int]
    watts: Optional[float]
    source: str
    clocks: Mapping[str, float] = field(default_factory=dict)
    default: bool = False
    conf: Optional[str] = None
    super_mode: bool = False
    min_jetpack: Optional[str] = None
    uncertain: bool = False
    note: Optional[str] = None


@dataclass(frozen=True)
class JetPackRelease:
    """One JetPack release and the versions it ships."""

    jetpack: str
    l4t: str
    tensorrt: Optional[str]
    cuda: Optional[str]
    source: str
    uncertain: bool = False
    note: Optional[str] = None


def version_key(text: str) -> Tuple[int, ...]:
    """``"10.3.0"`` -> ``(10, 3, 0)`` for sorting; non-numeric parts sort as 0."""
    out = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        out.append(int(digits.group(0)) if digits else 0)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Target:
    """A validated device profile. Build it with :func:`jetforge.targets.get_target`, not by hand."""

    name: str
    display_name: str
    kind: str
    module: Optional[str]
    soc: Optional[str]
    specs: Mapping[str, Sourced]
    power_modes: Tuple[PowerMode, ...]
    jetpack_releases: Tuple[JetPackRelease, ...]
    jetpack_source: Optional[Sourced]
    tensorrt_any: Optional[Sourced]
    gpu_precisions: Mapping[str, Sourced]
    dla_precisions: Sourced
    aliases: Tuple[str, ...] = ()
    module_ids: Tuple[str, ...] = ()
    model_patterns: Tuple[str, ...] = ()
    gpu_name_patterns: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()
    path: Optional[str] = None

    # ---- generic access -------------------------------------------------------------------------
    def value(self, key: str) -> Sourced:
        """The :class:`Sourced` record of spec ``key`` (value None if the profile does not know it)."""
        if key not in SPEC_FIELDS:
            raise UnknownNameError("target spec key", key, SPEC_FIELDS)
        found = self.specs.get(key)
        if found is not None:
            return found
        return Sourced(None, SPEC_FIELDS[key].unit, None, False, "not recorded in this profile")

    def _get(self, key: str) -> Any:
        return self.value(key).value

    # ---- the properties other packages use --------------------------------------------------------
    @property
    def compute_capability(self) -> Tuple[int, int]:
        match = CC_PATTERN.match(str(self._get("compute_capability")))
        assert match is not None  # validated on load
        return int(match.group(1)), int(match.group(2))

    @property
    def gpu_architecture(self) -> str:
        return str(self._get("gpu_architecture"))

    @property
    def sm_count(self) -> Optional[int]:
        return self._get("sm_count")

    @property
    def memory_gb(self) -> Optional[float]:
        value = self._get("memory_gb")
        return None if value is None else float(value)

    @property
    def dla_cores(self) -> int:
        return int(self._get("dla_cores"))

    @property
    def has_dla(self) -> bool:
        return self.dla_cores > 0

    @property
    def dla_version(self) -> Optional[str]:
        return self._get("dla_version") if self.has_dla else None

    @property
    def dla_loadables_per_core(self) -> int:
        value = self._get("dla_loadables_per_core")
        return DEFAULT_DLA_LOADABLES_PER_CORE if value is None else int(value)

    @property
    def dla_sram_bytes_per_core(self) -> Optional[int]:
        return self._get("dla_sram_bytes_per_core")

    @property
    def channel_multiple(self) -> int:
        value = self._get("channel_multiple")
        return DEFAULT_CHANNEL_MULTIPLE if value is None else int(value)

    def channel_multiple_for(self, precision: str) -> int:
        """Channel alignment for ``precision``: the INT8 value where the profile has one, else ``channel_multiple``."""
        _check_precision(precision)
        if precision == "int8":
            value = self._get("channel_multiple_int8")
            if value is not None:
                return int(value)
        return self.channel_multiple

    @property
    def tensorrt_versions(self) -> List[str]:
        """TensorRT versions shipped by the JetPack releases of this board, oldest first ([] on desktop)."""
        versions = {r.tensorrt for r in self.jetpack_releases if r.tensorrt}
        return sorted(versions, key=version_key)

    @property
    def default_tensorrt(self) -> str:
        """The newest TensorRT of this board's JetPack releases; ``"any"`` for a desktop/server GPU."""
        versions = self.tensorrt_versions
        if versions:
            return versions[-1]
        return "any"

    def accepts_tensorrt(self, version: str) -> bool:
        """Whether TensorRT ``version`` ("8.5.2", "8.5.2.2", "10.3") ships for this target."""
        if self.tensorrt_any is not None:
            return True
        want = version_key(version)
        for have in self.tensorrt_versions:
            have_key = version_key(have)
            n = min(len(want), len(have_key))
            if want[:n] == have_key[:n]:
                return True
        return False

    def jetpack_for_tensorrt(self, version: str) -> List[JetPackRelease]:
        """The JetPack releases of this board that ship TensorRT ``version``."""
        want = version_key(version)
        out = []
        for release in self.jetpack_releases:
            if release.tensorrt:
                have = version_key(release.tensorrt)
                n = min(len(want), len(have))
                if want[:n] == have[:n]:
                    out.append(release)
        return out

    def supports_precision(self, precision: str, device: str = "gpu") -> bool:
        """Whether the GPU (``device="gpu"``) or the DLA (``device="dla"``) runs ``precision``."""
        _check_precision(precision)
        if device == "gpu":
            record = self.gpu_precisions.get(precision)
            return bool(record is not None and record.value)
        if device == "dla":
            return self.has_dla and precision in (self.dla_precisions.value or ())
        raise UnknownNameError("device", device, ["gpu", "dla"])

    @property
    def default_power_mode(self) -> Optional[PowerMode]:
        for mode in self.power_modes:
            if mode.default:
                return mode
        return None

    def power_mode(self, name_or_id: Any) -> PowerMode:
        """A power mode by nvpmodel name (case-insensitive) or numeric id (non-Super conf first)."""
        for mode in self.power_modes:
            if isinstance(name_or_id, int) and not isinstance(name_or_id, bool):
                if mode.id == name_or_id and not mode.super_mode:
                    return mode
            elif str(name_or_id).lower() == mode.name.lower():
                return mode
        raise UnknownNameError("power mode of %s" % self.name, str(name_or_id), [m.name for m in self.power_modes])

    @property
    def uncertain_keys(self) -> List[str]:
        """Spec keys whose value is marked uncertain."""
        return [k for k, v in self.specs.items() if v.uncertain and v.value is not None]

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-friendly view with every source."""
        def sourced(s: Optional[Sourced]) -> Optional[Dict[str, Any]]:
            if s is None:
                return None
            return {"value": s.value, "unit": s.unit, "source": s.source, "uncertain": s.uncertain, "note": s.note}

        return {
            "name": self.name,
            "display_name": self.display_name,
            "kind": self.kind,
            "module": self.module,
            "soc": self.soc,
            "aliases": list(self.aliases),
            "compute_capability": list(self.compute_capability),
            "dla_cores": self.dla_cores,
            "dla_version": self.dla_version,
            "tensorrt_versions": self.tensorrt_versions,
            "default_tensorrt": self.default_tensorrt,
            "specs": {k: sourced(self.value(k)) for k in SPEC_FIELDS if k in self.specs},
            "precisions": {
                "gpu": {k: sourced(v) for k, v in self.gpu_precisions.items()},
                "dla": sourced(self.dla_precisions),
            },
            "power_modes": [
                {"id": m.id, "name": m.name, "watts": m.watts, "clocks": dict(m.clocks), "default": m.default,
                 "conf": m.conf, "super": m.super_mode, "min_jetpack": m.min_jetpack, "source": m.source,
                 "uncertain": m.uncertain, "note": m.note}
                for m in self.power_modes
            ],
            "jetpack": {
                "support": sourced(self.jetpack_source),
                "releases": [
                    {"jetpack": r.jetpack, "l4t": r.l4t, "tensorrt": r.tensorrt, "cuda": r.cuda, "source": r.source,
                     "uncertain": r.uncertain, "note": r.note}
                    for r in self.jetpack_releases
                ],
            },
            "tensorrt_any": sourced(self.tensorrt_any),
            "detect": {"module_ids": list(self.module_ids), "model_patterns": list(self.model_patterns),
                       "gpu_name_patterns": list(self.gpu_name_patterns)},
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        return "Target(%r)" % self.name


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise UnknownNameError("precision", precision, PRECISIONS)


def parse_compute_capability(value: Any) -> Tuple[int, int]:
    """``"8.7"`` -> ``(8, 7)``; raises ValueError with the reason otherwise."""
    if not isinstance(value, str):
        raise ValueError("compute capability must be a quoted string like \"8.7\", got %r" % (value,))
    match = CC_PATTERN.match(value.strip())
    if not match:
        raise ValueError("compute capability %r is not of the form MAJOR.MINOR (e.g. \"8.7\")" % value)
    major, minor = int(match.group(1)), int(match.group(2))
    if not 1 <= major <= 20:
        raise ValueError("compute capability %r has an impossible major version %d" % (value, major))
    return major, minor
