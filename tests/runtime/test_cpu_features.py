"""CPU flag detection for labelling ONNX Runtime's INT8 kernel numbers: real /proc/cpuinfo layouts."""

from jetforge.runtime.cpu_features import (CpuFeatures, cpu_features, int8_kernel_summary, int8_kernels_can_saturate,
                                           ort_kernel_label, parse_cpuinfo)

# trimmed from real /proc/cpuinfo files: an AVX2-only Xeon, a Sapphire Rapids Xeon, an Alder Lake (AVX-VNNI
# without AVX-512), a Jetson Orin (Cortex-A78AE)
AVX2 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz
flags\t\t: fpu vme de pse tsc msr sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
"""
SPR = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
ADL = """model name\t: 12th Gen Intel(R) Core(TM) i7-12700
flags\t\t: fpu sse2 avx avx2 fma avx_vnni
"""
ORIN = """processor\t: 0
BogoMIPS\t: 62.50
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
"""


def test_x86_flags_and_vnni():
    avx2 = parse_cpuinfo(AVX2, "x86_64")
    assert avx2.model.startswith("Intel(R) Xeon(R) CPU E5") and avx2.has("avx2") and not avx2.has("avx512bw")
    assert int8_kernel_summary(avx2) == "x86-64 AVX2 without VNNI" and int8_kernels_can_saturate(avx2) is True
    assert ort_kernel_label(avx2) == "ORT INT8 kernels on this CPU: x86-64 AVX2 without VNNI"
    spr = parse_cpuinfo(SPR, "x86_64")
    assert int8_kernel_summary(spr) == "x86-64 AVX-512 with AVX-512 VNNI, AMX-INT8"
    assert int8_kernels_can_saturate(spr) is False
    adl = parse_cpuinfo(ADL, "x86_64")
    assert int8_kernel_summary(adl) == "x86-64 AVX2 with AVX-VNNI" and int8_kernels_can_saturate(adl) is False
    d = avx2.to_dict()
    assert d["int8_kernels"] == "x86-64 AVX2 without VNNI" and "avx2" in d["flags"] and "fpu" not in d["flags"]


def test_arm_and_unknown():
    orin = parse_cpuinfo(ORIN, "aarch64")
    assert int8_kernel_summary(orin) == "ARM64 with dot product" and int8_kernels_can_saturate(orin) is False
    unknown = CpuFeatures(arch="x86_64")
    assert int8_kernel_summary(unknown) == "unknown" and int8_kernels_can_saturate(unknown) is None
    assert int8_kernel_summary(cpu_features("/nonexistent/cpuinfo")) == "unknown"


def test_this_machine_is_described():
    here = cpu_features()
    summary = int8_kernel_summary(here)
    assert summary  # whatever this CPU is, it has a one-line description
    if here.known and here.is_x86:
        assert summary.startswith("x86-64 ") and ("VNNI" in summary)
