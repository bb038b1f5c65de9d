"""`jetforge targets list|show|detect` through the real entry point: exit codes and what the user reads."""

import json

from jetforge.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_table(capsys):
    code, out, err = run(capsys, "targets", "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "MODULE", "GPU", "/"]
    row = next(line for line in lines if line.startswith("orin-nx-16gb "))
    assert "p3767-0000" in row and "Ampere 8.7" in row and "2 x v2.0" in row and "8.5.2, 8.6.2, 10.3.0" in row
    assert "100* sparse" in row  # the [M] TOPS value carries the uncertain mark
    nano = next(line for line in lines if line.startswith("orin-nano-4gb "))
    assert "20 sparse" in nano and "20*" not in nano  # confirmed by a primary source: no mark
    assert "jetforge targets show NAME" in out
    assert "* = uncertain" in out
    for name in ("agx-orin-64gb", "agx-orin-32gb", "orin-nx-8gb", "orin-nano-8gb", "agx-xavier", "xavier-nx",
                 "jetson-nano", "jetson-thor", "desktop-ampere", "desktop-ada", "desktop-blackwell",
                 "server-hopper-h100", "server-hopper-h200"):
        assert any(line.startswith(name + " ") for line in lines), name


def test_list_dla_only_and_kind(capsys):
    code, out, _ = run(capsys, "targets", "list", "--dla-only")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()[2:] if line and not line.startswith(("*", "Run"))]
    assert names == ["agx-orin-64gb", "agx-orin-32gb", "orin-nx-16gb", "orin-nx-8gb", "agx-xavier", "xavier-nx"]
    code, out, _ = run(capsys, "targets", "list", "--kind", "server", "--json")
    assert code == 0 and [t["name"] for t in json.loads(out)] == ["server-hopper-h100", "server-hopper-h200"]


def test_list_json(capsys):
    code, out, _ = run(capsys, "targets", "list", "--json")
    assert code == 0
    data = {t["name"]: t for t in json.loads(out)}
    assert data["orin-nano-8gb"]["specs"]["memory_bandwidth_gbs"]["uncertain"] is True
    assert data["agx-orin-64gb"]["dla_cores"] == 2


def test_default_action_is_list(capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0 and "orin-nx-16gb" in out


def test_show_prints_sources_and_marks(capsys):
    code, out, err = run(capsys, "targets", "show", "orin-nano-8gb")
    assert code == 0 and err == ""
    assert out.startswith("orin-nano-8gb: NVIDIA Jetson Orin Nano 8GB (jetson, module p3767-0003, SoC tegra234)")
    lines = out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("memory bandwidth "))
    assert "68 GB/s" in lines[i] and "[UNCERTAIN]" in lines[i]
    assert lines[i + 1].strip().startswith("source: third-party")
    assert "POWER MODES" in out and "JETPACK -> TENSORRT (default TensorRT for builds: 10.3.0)" in out
    assert "DLA: none (no DLA)" in out
    assert out.count("source:") >= 15


def test_show_alias_and_json(capsys):
    code, out, _ = run(capsys, "targets", "show", "agx-orin", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "agx-orin-64gb"
    assert data["specs"]["int8_tops_sparse"] == {
        "value": 275.0, "unit": "TOPS", "uncertain": False, "note": None,
        "source": data["specs"]["int8_tops_sparse"]["source"]}
    assert "Deep-Learning-Accelerator-SW" in data["specs"]["int8_tops_sparse"]["source"]
    assert [m["name"] for m in data["power_modes"]] == ["MAXN", "15W", "30W", "50W"]


def test_show_desktop(capsys):
    code, out, _ = run(capsys, "targets", "show", "desktop-ada")
    assert code == 0
    assert "TENSORRT: any desktop release" in out and "fp8 yes" in out


def test_unknown_name_is_one_line_exit_1(capsys):
    code, out, err = run(capsys, "targets", "show", "orin-nx-16")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("jetforge: error: unknown target 'orin-nx-16'; did you mean 'orin-nx-16gb'")
    assert "jetforge targets list" in err


def test_show_without_a_name_is_one_line_usage_error_exit_1(capsys):
    code = main(["targets", "show"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "jetforge targets show: the following arguments are required: NAME" in err


def test_detect_recorded_board(tmp_path, capsys):
    (tmp_path / "proc/device-tree").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc/device-tree/model").write_bytes(b"NVIDIA Orin NX Developer Kit\x00")
    (tmp_path / "proc/device-tree/compatible").write_bytes(
        b"nvidia,p3768-0000+p3767-0001\x00nvidia,p3767-0001\x00nvidia,tegra234\x00")
    (tmp_path / "etc/nv_tegra_release").write_text(
        "# R35 (release), REVISION: 3.1, GCID: 32827747, BOARD: t186ref, EABI: aarch64, DATE: Sun Mar 19 15:19:21 UTC 2023\n")
    code, out, err = run(capsys, "targets", "detect", "--root", str(tmp_path))
    assert code == 0, err
    assert out.startswith("orin-nx-8gb: NVIDIA Jetson Orin NX 8GB")
    assert "L4T 35.3.1 -> JetPack 5.1.1 -> TensorRT 8.5.2, CUDA 11.4" in out
    code, out, _ = run(capsys, "targets", "detect", "--root", str(tmp_path), "--json")
    data = json.loads(out)
    assert code == 0 and data["target"] == "orin-nx-8gb" and data["jetpack"] == "5.1.1" and data["tensorrt"] == "8.5.2"


def test_detect_gpu_name(tmp_path, capsys):
    code, out, _ = run(capsys, "targets", "detect", "--root", str(tmp_path), "--gpu-name", "NVIDIA H200")
    assert code == 0 and out.startswith("server-hopper-h200: NVIDIA H200")


def test_detect_nothing_exit_1(tmp_path, capsys):
    code, out, err = run(capsys, "targets", "detect", "--root", str(tmp_path))
    assert code == 1 and out == ""
    assert err.startswith("jetforge: error: no target profile matches this machine") and "--target NAME" in err
    code, out, _ = run(capsys, "targets", "detect", "--root", str(tmp_path), "--json")
    assert code == 1 and json.loads(out)["target"] is None
