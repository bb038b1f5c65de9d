"""What this CPU's integer kernels can do: flags from /proc/cpuinfo, summarised for INT8 reports.

ONNX Runtime's INT8 kernels (QLinearConv, QGemm, ...) multiply u8 x s8 pairs.  On x86 CPUs without
VNNI the kernels use ``vpmaddubsw``, which adds each pair of products into a *saturating 16-bit*
sum (two products of 255 x 127 already overflow it), so their results depend on the CPU: with VNNI
(``vpdpbusd``, AVX-512 VNNI or AVX-VNNI) or AMX the products are summed in 32 bits, and ARM's
``sdot``/``udot`` and widening multiply-adds do not saturate either.  TensorRT accumulates in 32
bits.  :func:`int8_kernel_summary` names what this CPU has (``"x86-64 AVX2 without VNNI"``) and
:func:`int8_kernels_can_saturate` says whether ORT's INT8 numbers here may be off for that reason.

Linux only reads /proc/cpuinfo; elsewhere the answer is ``"unknown"`` (no guess).  No torch, no
third-party import.
"""

import platform
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional

CPUINFO = "/proc/cpuinfo"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's architecture, model name and feature flags (lower case, as /proc/cpuinfo spells them)."""

    arch: str
    model: str = ""
    flags: FrozenSet[str] = field(default_factory=frozenset)
    source: str = CPUINFO

    @property
    def known(self) -> bool:
        return bool(self.flags)

    @property
    def is_x86(self) -> bool:
        return self.arch in ("x86_64", "amd64", "i686", "i386")

    @property
    def is_arm(self) -> bool:
        return self.arch in ("aarch64", "arm64") or self.arch.startswith("arm")

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def to_dict(self) -> Dict[str, object]:
        interesting = sorted(f for f in self.flags if f.startswith(("avx", "amx", "fma", "f16c", "sse4", "asimd",
                                                                      "i8mm", "sve", "bf16")))
        return {"arch": self.arch, "model": self.model, "int8_kernels": int8_kernel_summary(self),
                "int8_kernels_can_saturate": int8_kernels_can_saturate(self), "flags": interesting}


def parse_cpuinfo(text: str, arch: str = "") -> CpuFeatures:
    """The first processor's flags (x86 ``flags``, ARM ``Features``) and model name from /proc/cpuinfo text."""
    flags: FrozenSet[str] = frozenset()
    model = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("flags", "features") and not flags:
            flags = frozenset(value.lower().split())
        elif key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
    return CpuFeatures(arch=arch or platform.machine().lower(), model=model, flags=flags)


def cpu_features(path: str = CPUINFO) -> CpuFeatures:
    """This machine's CPU (flags empty where /proc/cpuinfo cannot be read: not Linux, or a sandbox)."""
    arch = platform.machine().lower()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_cpuinfo(f.read(), arch)
    except OSError:
        return CpuFeatures(arch=arch or "unknown", source="unavailable")


def int8_kernel_summary(cpu: Optional[CpuFeatures] = None) -> str:
    """E.g. ``"x86-64 AVX2 without VNNI"``, ``"x86-64 AVX-512 with VNNI"``, ``"ARM64 with dot product"``, ``"unknown"``."""
    cpu = cpu if cpu is not None else cpu_features()
    if not cpu.known:
        return "unknown"
    if cpu.is_x86:
        if cpu.has("avx512bw"):
            base = "AVX-512"
        elif cpu.has("avx2"):
            base = "AVX2"
        elif cpu.has("avx"):
            base = "AVX"
        else:
            base = "SSE"
        vnni = [name for flag, name in (("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"),
                                        ("amx_int8", "AMX-INT8")) if cpu.has(flag)]
        return "x86-64 %s %s" % (base, ("with " + ", ".join(vnni)) if vnni else "without VNNI")
    if cpu.is_arm:
        extras = [name for flag, name in (("asimddp", "dot product"), ("i8mm", "I8MM")) if cpu.has(flag)]
        return "ARM64 %s" % (("with " + ", ".join(extras)) if extras else "without dot product")
    return "%s (flags not interpreted)" % cpu.arch


def int8_kernels_can_saturate(cpu: Optional[CpuFeatures] = None) -> Optional[bool]:
    """True on x86 without VNNI/AMX (16-bit saturating pair sums); False with them or on ARM; None if unknown."""
    cpu = cpu if cpu is not None else cpu_features()
    if not cpu.known:
        return None
    if cpu.is_x86:
        return not any(cpu.has(f) for f in VNNI_FLAGS)
    if cpu.is_arm:
        return False
    return None


def ort_kernel_label(cpu: Optional[CpuFeatures] = None) -> str:
    """The label of a measurement made with ONNX Runtime's INT8 kernels on this CPU."""
    return "ORT INT8 kernels on this CPU: %s" % int8_kernel_summary(cpu)


SATURATION_WARNING = ("this CPU has no VNNI: ONNX Runtime's INT8 kernels sum u8 x s8 product pairs in saturating "
                      "16-bit registers, so their accuracy can be far below TensorRT's (32-bit accumulation); "
                      "trust the simulated INT8 numbers")


__all__ = ["CpuFeatures", "SATURATION_WARNING", "VNNI_FLAGS", "cpu_features", "int8_kernel_summary",
           "int8_kernels_can_saturate", "ort_kernel_label", "parse_cpuinfo"]
