"""Board and GPU detection from recorded device files and GPU names (no Jetson here: files are written
into a temporary root exactly as the kernel exposes them, NUL bytes included)."""

import pytest

import jetforge.targets.detect as det
from jetforge.targets import detect_target, parse_nv_tegra_release
from jetforge.targets.detect import (detect, jetpack_for_l4t, match_gpu_name, module_ids_from_compatible,
                                     split_device_tree_strings)

# /etc/nv_tegra_release lines as shipped (first line of the file)
R35_3_1 = ("# R35 (release), REVISION: 3.1, GCID: 32827747, BOARD: t186ref, EABI: aarch64, "
           "DATE: Sun Mar 19 15:19:21 UTC 2023\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\n")
R36_4_3 = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025\n"
R32_7_1 = "# R32 (release), REVISION: 7.1, GCID: 29818004, BOARD: t210ref, EABI: aarch64, DATE: Sat Feb 19 17:05:08 UTC 2022\n"

MEMINFO_AGX64 = "MemTotal:       64287408 kB\nMemFree:        60000000 kB\n"   # tegrastats: RAM .../62780MB
MEMINFO_AGX32 = "MemTotal:       31433728 kB\nMemFree:        30000000 kB\n"   # tegrastats: RAM .../30697MB
MEMINFO_NX16 = "MemTotal:       15757312 kB\n"                                 # tegrastats: RAM .../15388MB


def board(tmp_path, model=None, compatible=None, release=None, meminfo=None):
    files = {"proc/device-tree/model": model, "proc/device-tree/compatible": compatible,
             "etc/nv_tegra_release": release, "proc/meminfo": meminfo}
    for rel, text in files.items():
        if text is None:
            continue
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return tmp_path


def test_parse_nv_tegra_release():
    assert parse_nv_tegra_release(R35_3_1) == "35.3.1"
    assert parse_nv_tegra_release(R36_4_3) == "36.4.3"
    assert parse_nv_tegra_release(R32_7_1) == "32.7.1"
    assert parse_nv_tegra_release("Ubuntu 22.04.4 LTS") is None
    assert parse_nv_tegra_release("") is None


def test_l4t_to_jetpack_to_tensorrt(tmp_path):
    assert jetpack_for_l4t(parse_nv_tegra_release(R35_3_1)) == "5.1.1"
    found = detect(board(tmp_path, model="NVIDIA Orin NX Developer Kit\x00",
                         compatible="nvidia,p3768-0000+p3767-0000\x00nvidia,p3767-0000\x00nvidia,tegra234\x00",
                         release=R35_3_1), gpu_names=[])
    data = found.to_dict()
    assert (data["target"], data["l4t"], data["jetpack"], data["tensorrt"], data["cuda"]) == (
        "orin-nx-16gb", "35.3.1", "5.1.1", "8.5.2", "11.4")
    assert data["module_ids"] == ["p3768-0000", "p3767-0000"] and data["soc"] == "tegra234"
    assert "p3767-0000" in found.how


def test_compatible_splitting():
    raw = "nvidia,p3768-0000+p3767-0005\x00nvidia,p3767-0005\x00nvidia,tegra234\x00"
    assert split_device_tree_strings(raw) == ["nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"]
    assert module_ids_from_compatible(split_device_tree_strings(raw)) == ["p3768-0000", "p3767-0005"]


@pytest.mark.parametrize("module,expected", [
    ("p3767-0000", "orin-nx-16gb"),
    ("p3767-0001", "orin-nx-8gb"),
    ("p3767-0003", "orin-nano-8gb"),
    ("p3767-0004", "orin-nano-4gb"),
    ("p3767-0005", "orin-nano-8gb"),   # the Orin Nano developer-kit module
    ("p3701-0005", "agx-orin-64gb"),
    ("p3701-0004", "agx-orin-32gb"),
])
def test_module_id_decides_the_p3767_family(tmp_path, module, expected):
    # the same model string for every p3768 carrier: only the module id tells them apart
    compatible = "nvidia,p3768-0000+%s\x00nvidia,%s\x00nvidia,tegra234\x00" % (module, module)
    root = board(tmp_path, model="NVIDIA Orin NX Developer Kit\x00", compatible=compatible, release=R36_4_3)
    t = detect_target(root, gpu_names=[])
    assert t is not None and t.name == expected


@pytest.mark.parametrize("model,expected", [
    ("NVIDIA Jetson AGX Orin Developer Kit", "agx-orin-64gb"),
    ("NVIDIA Orin NX Developer Kit", "orin-nx-16gb"),
    ("NVIDIA Jetson Orin NX Engineering Reference Developer Kit", "orin-nx-16gb"),
    ("NVIDIA Jetson Orin Nano Developer Kit", "orin-nano-8gb"),
    ("NVIDIA Jetson Xavier NX Developer Kit", "xavier-nx"),
    ("Jetson-AGX", "agx-xavier"),
    ("NVIDIA Jetson Nano Developer Kit", "jetson-nano"),
    ("NVIDIA Jetson AGX Thor Developer Kit", "jetson-thor"),
])
def test_model_string_alone(tmp_path, model, expected):
    root = board(tmp_path, model=model + "\x00")
    found = detect(root, gpu_names=[])
    assert found.target is not None and found.target.name == expected
    assert found.model == model


def test_jetson_nano_is_not_orin_nano(tmp_path):
    root = board(tmp_path, model="NVIDIA Jetson Nano Developer Kit\x00",
                 compatible="nvidia,p3449-0000-b00+p3448-0000-b00\x00nvidia,jetson-nano\x00nvidia,tegra210\x00",
                 release=R32_7_1)
    found = detect(root, gpu_names=[])
    assert found.target.name == "jetson-nano"
    assert found.jetpack.jetpack == "4.6.1" and found.jetpack.tensorrt == "8.2.1"


def test_agx_xavier_devkit_compatible_has_only_the_carrier(tmp_path):
    root = board(tmp_path, model="Jetson-AGX\x00", compatible="nvidia,p2972-0000\x00nvidia,galen\x00nvidia,tegra194\x00")
    assert detect_target(root, gpu_names=[]).name == "agx-xavier"


@pytest.mark.parametrize("meminfo,expected", [(MEMINFO_AGX64, "agx-orin-64gb"), (MEMINFO_AGX32, "agx-orin-32gb")])
def test_agx_orin_devkit_module_id_is_split_by_memory(tmp_path, meminfo, expected):
    root = board(tmp_path, model="NVIDIA Jetson AGX Orin Developer Kit\x00",
                 compatible="nvidia,p3737-0000+p3701-0000\x00nvidia,p3701-0000\x00nvidia,tegra234\x00",
                 meminfo=meminfo)
    found = detect(root, gpu_names=[])
    assert found.target.name == expected and found.warnings == ()


def test_ambiguous_without_meminfo_warns(tmp_path):
    root = board(tmp_path, model="NVIDIA Jetson AGX Orin Developer Kit\x00",
                 compatible="nvidia,p3737-0000+p3701-0000\x00nvidia,p3701-0000\x00nvidia,tegra234\x00")
    found = detect(root, gpu_names=[])
    assert found.target.name == "agx-orin-64gb"
    assert any("cannot tell agx-orin-64gb / agx-orin-32gb apart" in w for w in found.warnings)


def test_orin_nx_model_without_module_uses_memory(tmp_path):
    root = board(tmp_path, model="NVIDIA Orin NX Developer Kit\x00", meminfo="MemTotal:        7628108 kB\n")
    assert detect_target(root, gpu_names=[]).name == "orin-nx-8gb"
    root2 = board(tmp_path / "b", model="NVIDIA Orin NX Developer Kit\x00", meminfo=MEMINFO_NX16)
    assert detect_target(root2, gpu_names=[]).name == "orin-nx-16gb"


def test_unknown_module_falls_back_to_soc_with_a_warning(tmp_path):
    root = board(tmp_path, model="Custom carrier\x00", compatible="acme,board-1\x00nvidia,tegra194\x00",
                 meminfo="MemTotal:        7800000 kB\n")
    found = detect(root, gpu_names=[])
    assert found.target.name == "xavier-nx"  # tegra194 with ~8 GB
    assert any("guessed xavier-nx from SoC tegra194" in w for w in found.warnings)


def test_unknown_l4t_is_reported(tmp_path):
    root = board(tmp_path, model="NVIDIA Orin NX Developer Kit\x00",
                 release="# R99 (release), REVISION: 1.0, GCID: 1, BOARD: generic\n", meminfo=MEMINFO_NX16)
    found = detect(root, gpu_names=[])
    assert found.l4t == "99.1.0" and found.jetpack is None
    assert any("99.1.0" in w for w in found.warnings)


def test_tx2_is_not_a_profile(tmp_path):
    root = board(tmp_path, model="quill\x00", compatible="nvidia,p2771-0000\x00nvidia,tegra186\x00",
                 release="# R32 (release), REVISION: 7.3, GCID: 1, BOARD: t186ref\n")
    found = detect(root, gpu_names=["NVIDIA H200"])
    assert found.target is None  # a Jetson never falls back to a GPU name
    assert found.jetpack.jetpack == "4.6.3"


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H200", "server-hopper-h200"),          # recorded: nvidia-smi --query-gpu=name on the lent H200
    ("NVIDIA H200 NVL", "server-hopper-h200"),
    ("NVIDIA GeForce RTX 4090", "desktop-ada"),
    ("NVIDIA RTX 6000 Ada Generation", "desktop-ada"),
    ("NVIDIA GeForce RTX 3080 Ti", "desktop-ampere"),
    ("NVIDIA RTX A6000", "desktop-ampere"),
    ("NVIDIA GeForce RTX 5090", "desktop-blackwell"),
    ("NVIDIA A100-SXM4-80GB", None),
    ("Tesla T4", None),
    ("NVIDIA H100 80GB HBM3", "server-hopper-h100"),  # the lent H100 (SXM5)
    ("NVIDIA H100 PCIe", None),  # another board: fewer SMs, lower clocks
    ("NVIDIA H100 NVL", None),
])
def test_gpu_names(tmp_path, name, expected):
    t = match_gpu_name(name)
    assert (t.name if t else None) == expected
    found = detect(tmp_path, gpu_names=[name])
    assert (found.target.name if found.target else None) == expected
    assert found.gpu_names == (name,)


def test_desktop_takes_the_first_gpu_that_matches(tmp_path):
    assert detect_target(tmp_path, gpu_names=["Tesla T4", "NVIDIA GeForce RTX 4090"]).name == "desktop-ada"


def test_recorded_root_never_asks_this_machines_gpu(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("queried the live GPU for a recorded root")

    monkeypatch.setattr(det, "query_gpu_names", boom)
    found = det.detect(tmp_path)  # no gpu_names: a real caller's default
    assert found.target is None and "no Jetson files and no NVIDIA GPU" in found.how


def test_live_query_without_nvidia_smi_or_pynvml(monkeypatch):
    monkeypatch.setattr(det.shutil, "which", lambda _: None)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    assert det.query_gpu_names() == []


def test_detect_target_on_a_thor_device_tree(tmp_path):
    root = board(tmp_path, model="NVIDIA Jetson AGX Thor Developer Kit\x00")
    assert detect_target(root=str(root)).name == "jetson-thor"
