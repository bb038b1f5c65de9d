"""Every shipped profile loads, every number has a source, and the researched facts survive intact.

The expected values below were researched independently of the profiles (NVIDIA data sheets and developer
guides, nvpmodel configurations, deviceQuery output, MLPerf submissions: each profile names its source): if a
profile drifts from them, or drops an `uncertain` mark on a value that no primary source confirms, these
tests fail.
"""

import json

import pytest

from jetforge.errors import UnknownNameError
from jetforge.targets import (PRECISIONS, SPEC_FIELDS, get_target, jetpack_release, jetpack_table, list_targets,
                              target_names)
from jetforge.targets.detect import jetpack_for_l4t

REQUIRED = ["agx-orin-64gb", "agx-orin-32gb", "orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb",
            "agx-xavier", "xavier-nx", "jetson-nano", "jetson-thor",
            "desktop-ampere", "desktop-ada", "desktop-blackwell", "server-hopper-h100", "server-hopper-h200"]


def test_every_required_profile_loads():
    names = target_names()
    assert sorted(names) == sorted(REQUIRED)
    for name in REQUIRED:
        t = get_target(name)
        assert t.name == name
        assert t.kind in ("jetson", "desktop", "server")
        assert all(isinstance(x, int) for x in t.compute_capability)


@pytest.mark.parametrize("name", REQUIRED)
def test_every_number_has_a_source(name):
    t = get_target(name)
    for key, rec in t.specs.items():
        assert key in SPEC_FIELDS
        if rec.value is not None:
            assert rec.source and len(rec.source) > 10, "%s.%s has no source" % (name, key)
        else:
            assert rec.note, "%s.%s is null without saying why" % (name, key)
    for mode in t.power_modes:
        assert mode.source, "%s power mode %s has no source" % (name, mode.name)
    for p in PRECISIONS:
        assert t.gpu_precisions[p].source, "%s precision %s has no source" % (name, p)
    for release in t.jetpack_releases:
        assert release.source
    if t.kind == "jetson":
        assert t.jetpack_source is not None and t.jetpack_source.source
        assert t.power_modes, "a Jetson profile lists its nvpmodel modes"
    else:
        assert t.tensorrt_any is not None and t.tensorrt_any.source
        assert t.tensorrt_versions == [] and t.default_tensorrt == "any"


# (target, spec key): values from general knowledge, third-party reports or uncertain sources
UNCERTAIN = [
    ("orin-nano-8gb", "memory_bandwidth_gbs"),
    ("orin-nano-8gb", "memory_bandwidth_gbs_super"),
    ("orin-nano-8gb", "max_gpu_clock_mhz_super"),
    ("orin-nano-8gb", "int8_tops_sparse"),
    ("orin-nano-4gb", "memory_bandwidth_gbs"),
    ("agx-orin-64gb", "memory_bandwidth_gbs"),
    ("agx-orin-64gb", "int8_tops_dense"),
    ("agx-orin-32gb", "max_gpu_clock_mhz"),
    ("agx-orin-32gb", "int8_tops_sparse"),
    ("agx-orin-32gb", "memory_bandwidth_gbs"),
    ("orin-nx-16gb", "memory_bandwidth_gbs"),
    ("orin-nx-16gb", "int8_tops_sparse"),
    ("orin-nx-8gb", "max_gpu_clock_mhz"),
    ("orin-nx-8gb", "cuda_cores"),
    ("agx-xavier", "sm_count"),
    ("agx-xavier", "int8_tops_dense"),
    ("xavier-nx", "memory_bandwidth_gbs"),
    ("jetson-nano", "memory_bandwidth_gbs"),
    ("jetson-thor", "compute_capability"),
    ("jetson-thor", "memory_gb"),
    ("jetson-thor", "cuda_cores"),
]

# values confirmed by a primary source: they must not be marked uncertain, and must keep the confirmed number
VERIFIED = [
    ("agx-orin-64gb", "int8_tops_sparse", 275),
    ("agx-orin-64gb", "gpu_int8_tops_sparse", 171),
    ("agx-orin-64gb", "dla_int8_tops_sparse", 105),
    ("agx-orin-64gb", "sm_count", 16),
    ("agx-orin-64gb", "max_gpu_clock_mhz", 1300),
    ("agx-orin-64gb", "dla_max_clock_mhz", 1600),
    ("agx-orin-32gb", "sm_count", 14),
    ("orin-nx-16gb", "sm_count", 8),
    ("orin-nx-16gb", "max_gpu_clock_mhz", 918),
    ("orin-nx-16gb", "max_gpu_clock_mhz_super", 1173),
    ("orin-nx-16gb", "memory_gb", 16),
    ("orin-nano-8gb", "max_gpu_clock_mhz", 625),
    ("orin-nano-4gb", "int8_tops_sparse", 20),
    ("orin-nano-4gb", "int8_tops_dense", 10),
    ("orin-nano-4gb", "sm_count", 4),
    ("agx-xavier", "memory_bandwidth_gbs", 137),
    ("agx-xavier", "dla_int8_tops_dense", 11.4),
    ("agx-xavier", "max_gpu_clock_mhz", 1377),
    ("xavier-nx", "max_gpu_clock_mhz", 1109.25),
    ("xavier-nx", "dla_max_clock_mhz", 1100.8),
    ("jetson-nano", "max_gpu_clock_mhz", 921.6),
    ("server-hopper-h200", "sm_count", 132),
    ("server-hopper-h100", "sm_count", 132),  # torch.cuda.get_device_properties on the lent H100, 2026-12-07
    ("server-hopper-h200", "max_gpu_clock_mhz", 1980),
]


@pytest.mark.parametrize("name,key", UNCERTAIN)
def test_unconfirmed_values_stay_uncertain(name, key):
    rec = get_target(name).value(key)
    assert rec.value is not None
    assert rec.uncertain is True, "%s.%s has no primary source: it must stay uncertain" % (name, key)


@pytest.mark.parametrize("name,key,expected", VERIFIED)
def test_confirmed_values(name, key, expected):
    rec = get_target(name).value(key)
    assert rec.value == pytest.approx(expected)
    assert rec.uncertain is False


def test_dla_cores_and_versions():
    expected = {"agx-orin-64gb": (2, "2.0"), "agx-orin-32gb": (2, "2.0"), "orin-nx-16gb": (2, "2.0"),
                "orin-nx-8gb": (1, "2.0"), "agx-xavier": (2, "1.0"), "xavier-nx": (2, "1.0"),
                "orin-nano-8gb": (0, None), "orin-nano-4gb": (0, None), "jetson-nano": (0, None),
                "jetson-thor": (0, None)}
    for name, (cores, version) in expected.items():
        t = get_target(name)
        assert (t.dla_cores, t.dla_version, t.has_dla) == (cores, version, cores > 0), name
    for t in list_targets(kind="desktop") + list_targets(kind="server"):
        assert t.dla_cores == 0 and not t.has_dla
    assert [t.name for t in list_targets(dla_only=True)] == [
        "agx-orin-64gb", "agx-orin-32gb", "orin-nx-16gb", "orin-nx-8gb", "agx-xavier", "xavier-nx"]


def test_dla_sram_and_loadables():
    orin = get_target("orin-nx-16gb")
    assert orin.dla_sram_bytes_per_core == 1024 * 1024
    xavier = get_target("agx-xavier")
    assert xavier.dla_sram_bytes_per_core is None
    assert xavier.value("dla_sram_bytes_shared").value == 4 * 1024 * 1024
    for t in list_targets(dla_only=True):
        assert t.dla_loadables_per_core == 16
        rec = t.value("dla_loadables_per_core")
        assert rec.uncertain and "4" in rec.note  # 16 (latest docs) vs 4 (8.4 guide) is UNCERTAIN
    assert get_target("orin-nano-8gb").dla_loadables_per_core == 16  # the setting's default


def test_compute_capabilities():
    cc = {"agx-orin-64gb": (8, 7), "orin-nano-4gb": (8, 7), "agx-xavier": (7, 2), "jetson-nano": (5, 3),
          "jetson-thor": (11, 0), "desktop-ampere": (8, 6), "desktop-ada": (8, 9), "server-hopper-h200": (9, 0), "server-hopper-h100": (9, 0),
          "desktop-blackwell": (12, 0)}
    for name, want in cc.items():
        assert get_target(name).compute_capability == want


def test_tensorrt_versions_from_the_jetpack_table():
    orin = get_target("orin-nx-16gb")
    assert orin.tensorrt_versions == ["8.5.2", "8.6.2", "10.3.0"]
    assert orin.default_tensorrt == "10.3.0"
    by_jp = {r.jetpack: r for r in orin.jetpack_releases}
    assert (by_jp["5.1.1"].l4t, by_jp["5.1.1"].tensorrt, by_jp["5.1.1"].cuda) == ("35.3.1", "8.5.2", "11.4")
    assert by_jp["6.0"].tensorrt == "8.6.2" and by_jp["6.1"].tensorrt == "10.3.0"
    assert by_jp["6.2"].uncertain is True  # third-party reports only
    assert by_jp["5.1.1"].uncertain is False
    assert orin.accepts_tensorrt("8.5.2.2") and orin.accepts_tensorrt("10.3") and not orin.accepts_tensorrt("10.7")
    assert [r.jetpack for r in orin.jetpack_for_tensorrt("8.6.2")] == ["6.0"]
    assert get_target("agx-xavier").default_tensorrt == "8.5.2"
    assert get_target("jetson-nano").default_tensorrt == "8.2.1"
    assert get_target("desktop-ada").accepts_tensorrt("10.13.3")


def test_jetpack_table():
    table = jetpack_table()
    assert len({r.l4t for r in table}) == len(table)
    assert jetpack_release("6.1").cuda == "12.6"
    assert jetpack_for_l4t("35.3.1") == "5.1.1"
    assert jetpack_for_l4t("36.4.3") == "6.2"
    assert jetpack_for_l4t("32.7.1") == "4.6.1"
    assert jetpack_for_l4t("99.1.0") is None
    with pytest.raises(UnknownNameError):
        jetpack_release("6.9")


def test_precision_support():
    orin, nano, thor = get_target("agx-orin-64gb"), get_target("jetson-nano"), get_target("jetson-thor")
    assert orin.supports_precision("int8") and orin.supports_precision("fp16") and orin.supports_precision("tf32")
    assert not orin.supports_precision("fp8") and not orin.supports_precision("fp4")
    assert orin.supports_precision("int8", device="dla") and orin.supports_precision("fp16", device="dla")
    assert not orin.supports_precision("fp32", device="dla")
    assert not nano.supports_precision("int8") and nano.supports_precision("fp16")
    assert thor.supports_precision("fp4") and thor.supports_precision("fp8")
    assert not get_target("orin-nano-8gb").supports_precision("int8", device="dla")
    assert get_target("desktop-ada").supports_precision("fp8") and not get_target("desktop-ada").supports_precision("fp4")
    assert get_target("desktop-blackwell").supports_precision("fp4")
    with pytest.raises(UnknownNameError, match="did you mean 'int8'"):
        orin.supports_precision("int9")
    with pytest.raises(UnknownNameError):
        orin.supports_precision("fp16", device="npu")


def test_channel_multiple():
    orin = get_target("orin-nx-16gb")
    assert orin.channel_multiple == 8
    assert orin.channel_multiple_for("fp16") == 8
    assert orin.channel_multiple_for("int8") == 16
    assert orin.value("channel_multiple_int8").uncertain  # no source retrieved for 16
    assert get_target("jetson-nano").channel_multiple_for("int8") == 8


def test_power_modes():
    t = get_target("agx-orin-64gb")
    assert [(m.id, m.name, m.watts) for m in t.power_modes] == [(0, "MAXN", None), (1, "15W", 15), (2, "30W", 30),
                                                               (3, "50W", 50)]
    assert t.default_power_mode.name == "30W"
    m15 = t.power_mode("15w")
    assert m15.clocks["gpu_max_mhz"] == 408 and m15.clocks["cpu_cores"] == 4 and m15.clocks["dla_core_mhz"] == 614.4
    assert t.power_mode(3).name == "50W"
    nx = get_target("orin-nx-16gb")
    supers = [m for m in nx.power_modes if m.super_mode]
    assert [m.name for m in supers] == ["MAXN_SUPER", "10W", "15W", "25W", "40W"]
    assert all(m.min_jetpack == "6.2" and m.uncertain for m in supers)
    assert nx.power_mode("40W").clocks["gpu_max_mhz"] == 1173
    with pytest.raises(UnknownNameError):
        t.power_mode("60W")


def test_unknown_target_name_suggests():
    with pytest.raises(UnknownNameError) as info:
        get_target("orin-nx-16")
    assert "did you mean 'orin-nx-16gb'" in str(info.value)
    assert "\n" not in info.value.one_line()
    with pytest.raises(UnknownNameError):
        get_target("rtx-9090")


def test_aliases_and_spelling():
    assert get_target("agx-orin").name == "agx-orin-64gb"
    assert get_target("ORIN_NX_16GB").name == "orin-nx-16gb"
    assert get_target("orin-nano-super").name == "orin-nano-8gb"
    assert get_target("h200").name == "server-hopper-h200"
    t = get_target("thor")
    assert get_target(t) is t


def test_value_access_and_json():
    t = get_target("orin-nano-8gb")
    rec = t.value("memory_bandwidth_gbs")
    assert (rec.value, rec.unit, rec.uncertain) == (68.0, "GB/s", True)
    assert rec.text("*") == "68 GB/s*"
    assert t.value("dla_max_clock_mhz").value is None  # not recorded: None, not an error
    with pytest.raises(UnknownNameError, match="did you mean 'memory_bandwidth_gbs'"):
        t.value("memory_bandwith_gbs")
    data = json.loads(json.dumps(t.to_dict()))
    assert data["specs"]["memory_bandwidth_gbs"]["uncertain"] is True
    assert data["compute_capability"] == [8, 7]
    assert data["tensorrt_versions"] == ["8.5.2", "8.6.2", "10.3.0"]


def test_tegrastats_rails_per_board():
    assert "VDD_IN" not in get_target("agx-orin-64gb").value("tegrastats_rails").value  # AGX Orin has no VDD_IN
    assert get_target("orin-nx-16gb").value("tegrastats_rails").value == ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
    assert "VIN" in get_target("jetson-thor").value("tegrastats_rails").value
