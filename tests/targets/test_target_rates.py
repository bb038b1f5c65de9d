"""The rate fields of the target profiles (what `jetforge estimate` reads) and their power-mode scaling.

The independent reference for the scaling is NVIDIA's own per-mode table for Jetson AGX Orin 64GB
(NVIDIA/Deep-Learning-Accelerator-SW README: GPU sparse INT8 171/109/41/14 TOPS and 2x DLA 105/92/90/40
TOPS at MAXN/50W/30W/15W), against the profile's MAXN rates scaled by the nvpmodel clock caps.
"""

import pytest

from jetforge.errors import TargetError
from jetforge.runtime.estimate.rates import default_power_mode, target_rates
from jetforge.targets import get_target, list_targets

RATE_KEYS = ("gpu_int8_tops_dense", "gpu_fp16_tflops_dense", "gpu_fp32_tflops", "memory_bandwidth_gbs")
ESTIMATED = ("agx-orin-64gb", "agx-orin-32gb", "orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb",
             "agx-xavier", "xavier-nx", "server-hopper-h200")


@pytest.mark.parametrize("name", ESTIMATED)
def test_profiles_carry_rates_with_sources(name):
    target = get_target(name)
    for key in RATE_KEYS:
        record = target.value(key)
        assert record.value is not None and record.value > 0, (name, key)
        assert record.source and len(record.source) > 20, (name, key)


@pytest.mark.parametrize("name", ["orin-nx-16gb", "agx-orin-64gb", "xavier-nx", "agx-xavier"])
def test_dla_targets_carry_dla_rates(name):
    target = get_target(name)
    for key in ("dla_int8_tops_dense", "dla_fp16_tflops_dense", "dla_max_clock_mhz"):
        assert target.value(key).value, (name, key)
        assert target.value(key).source, (name, key)


def test_derived_numbers_say_they_are_derived():
    for target in list_targets():
        for key in ("gpu_int8_tops_dense", "gpu_tf32_tflops_dense", "gpu_fp16_tflops_cuda_cores",
                    "dla_fp16_tflops_dense"):   # the fields the estimator added to the schema
            record = target.value(key)
            if record.value is not None:
                text = record.source.lower()
                assert "derived" in text or "assumed" in text or "data sheet" in text, (target.name, key)
                assert "researched" not in record.source      # new fields cite primary sources only


def test_orin_nx_16gb_rates_add_up():
    t = get_target("orin-nx-16gb")
    # the GPU's dense INT8 (8 SMs x 918 MHz x 4096) plus the 2 DLAs' is the module's dense total (100 sparse / 2)
    gpu, dla, total = (t.value(k).value for k in ("gpu_int8_tops_dense", "dla_int8_tops_dense", "int8_tops_dense"))
    assert gpu == pytest.approx(8 * 918e6 * 4096 / 1e12, rel=0.01)
    assert gpu + dla == pytest.approx(total, rel=0.01)
    assert t.value("gpu_fp16_tflops_dense").value == pytest.approx(gpu / 2, rel=0.01)


def test_agx_orin_gpu_rate_matches_nvidias_figure():
    t = get_target("agx-orin-64gb")
    assert 2 * t.value("gpu_int8_tops_dense").value == pytest.approx(t.value("gpu_int8_tops_sparse").value, rel=0.01)


# NVIDIA's per-mode peaks (sparse TOPS) for AGX Orin 64GB; 5 % covers the rounding of NVIDIA's figures and the
# 1300 MHz clock the profile uses. GPU 15W is left out: 3 TPCs x 408 MHz gives 20 TOPS, NVIDIA says 14 (the mode
# caps more than the nvpmodel clock and TPC mask the profile records).
@pytest.mark.parametrize("mode,gpu,dla", [("MAXN", 171, 105), ("50W", 109, 92), ("30W", 41, 90), ("15W", None, 40)])
def test_power_mode_scaling_matches_nvidias_table(mode, gpu, dla):
    rates = target_rates(get_target("agx-orin-64gb"), "int8", mode, dla=True)
    if gpu is not None:
        assert 2 * rates.gpu_tensor / 1e12 == pytest.approx(gpu, rel=0.05)
    assert 2 * rates.dla_per_core * rates.dla_cores / 1e12 == pytest.approx(dla, rel=0.05)


def test_memory_clock_cap_scales_bandwidth():
    # 15W caps EMC at 2133 MHz; 204.8 GB/s on a 256-bit bus is 3200 MHz (2 transfers per clock)
    rates = target_rates(get_target("agx-orin-64gb"), "fp16", "15W")
    assert rates.bandwidth == pytest.approx(204.8e9 * 2133 / 3200, rel=1e-9)


def test_default_power_mode_is_maxn_where_there_is_one():
    assert default_power_mode(get_target("orin-nx-16gb")).name == "MAXN"
    assert target_rates(get_target("orin-nx-16gb"), "fp16").power_mode == "MAXN"
    assert default_power_mode(get_target("server-hopper-h200")) is None


def test_precision_rates_and_uses_are_recorded():
    t = get_target("orin-nx-16gb")
    int8, fp16, fp32 = (target_rates(t, p) for p in ("int8", "fp16", "fp32"))
    assert int8.gpu_tensor == pytest.approx(2 * fp16.gpu_tensor)
    assert fp32.gpu_tensor == pytest.approx(t.value("gpu_tf32_tflops_dense").value * 1e12)   # TensorRT's TF32
    assert {u.key for u in int8.used} >= {"gpu_int8_tops_dense", "memory_bandwidth_gbs"}
    assert "gpu_int8_tops_dense" in int8.uncertain


def test_missing_rates_are_an_error_naming_the_field():
    with pytest.raises(TargetError, match="gpu_fp16_tflops_dense"):
        target_rates(get_target("jetson-thor"), "fp16")
    with pytest.raises(TargetError, match="does not run int8"):
        target_rates(get_target("jetson-nano"), "int8")
