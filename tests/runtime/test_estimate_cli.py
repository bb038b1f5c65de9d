"""`jetforge estimate` through the real CLI entry point: table, JSON, plot, warnings and its one-line errors."""

import json

import pytest

pytest.importorskip("onnx")

from estimate_graphs import save_tiny_net  # noqa: E402

from jetforge.cli.main import main  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_net(tmp_path_factory.mktemp("estimate") / "tiny.onnx")


def run(capsys, *argv):
    code = main(["estimate"] + [str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_with_dla_and_two_batches(tiny, capsys, tmp_path):
    plot = tmp_path / "est.png"
    code, out, err = run(capsys, tiny, "--target", "orin-nx-16gb", "--precision", "int8", "--dla-core", "0",
                         "--batch", "1,4", "--plot", plot)
    assert code == 0, err
    assert "on orin-nx-16gb (MAXN), INT8, DLA core 0" in out
    assert "conv1" in out and "gap" in out                         # per-layer rows
    assert "GPU<->DLA transitions" in out and "DLA   GPU" in out   # the transition table
    rows = [line.split() for line in out.splitlines() if line[:1] in "14" and len(line.split()) == 11]
    assert [r[0] for r in rows] == ["1", "4"]                      # one summary row per batch size
    assert "workspace is a computed lower bound" in out
    assert "warning: rates the profile marks uncertain" in out
    assert "GPU fallback layers (dla-check): gap (GlobalAveragePool)" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_has_batches_layers_memory_and_sources(tiny, capsys):
    code, out, _ = run(capsys, tiny, "--target", "agx-orin-64gb", "--precision", "fp16", "--batch", "1,8",
                       "--power-mode", "30W", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["power_mode"] == "30W" and data["precision"] == "fp16" and data["dla_core"] is None
    one, eight = data["batches"]
    assert (one["batch"], eight["batch"]) == (1, 8)
    assert eight["throughput_per_s"] == pytest.approx(8 / (eight["latency_ms"] / 1e3), rel=1e-9)
    assert [l["name"] for l in one["layers"]] == ["conv1", "dw", "pw", "gap", "fc"]
    assert set(one["memory"]) >= {"weights_bytes", "activations_peak_bytes", "workspace_lower_bound_bytes"}
    assert "lower bound" in one["memory"]["labels"]["workspace_lower_bound_bytes"]
    used = {u["key"]: u for u in data["rates"]["used"]}
    assert used["gpu_fp16_tflops_dense"]["source"] and used["gpu_fp16_tflops_dense"]["power_mode_scale"] < 1
    assert data["model_kind"].startswith("roofline estimate")


def test_gpu_only_server_target_and_all_layers(tiny, capsys):
    code, out, _ = run(capsys, tiny, "--target", "server-hopper-h200", "--fusion", "none", "--efficiency",
                       "pytorch_eager", "--all-layers")
    assert code == 0
    assert "bn1" in out and "relu6" in out                          # unfused: every layer is a row


@pytest.mark.parametrize("argv,message", [
    (["--target", "server-hopper-h200", "--dla-core", "0"], "has no DLA core"),
    (["--target", "orin-nx-16gb", "--dla-core", "2"], "DLA cores 0..1"),
    (["--target", "orin-nx-16gb", "--dla-core", "0", "--precision", "fp32"], "FP16 or INT8 only"),
    (["--target", "orin-nx-16gb", "--batch", "0"], "outside 1..4096"),
    (["--target", "orin-nx-16gb", "--batch", "two"], "not an integer"),
    (["--target", "jetson-thor"], "gpu_fp16_tflops_dense"),
    (["--target", "orin-nx-16gb", "--power-mode", "99W"], "99W"),
    (["--target", "orin-nx-16gb", "--efficiency", "tensort"], "tensorrt"),
    (["--target", "orin-nx-16gb", "--shape", "nope=1x3x16x16"], "nope"),
])
def test_errors_are_one_line_exit_1(tiny, capsys, argv, message):
    code, out, err = run(capsys, tiny, *argv)
    assert code == 1
    assert err.startswith("jetforge: error:") and message in err and len(err.strip().splitlines()) == 1


def test_missing_model_and_plot_over_input(tiny, capsys, tmp_path):
    code, _, err = run(capsys, tmp_path / "missing.onnx", "--target", "orin-nx-16gb")
    assert code == 1 and "missing.onnx" in err
    code, _, err = run(capsys, tiny, "--target", "orin-nx-16gb", "--plot", tiny)
    assert code == 1 and tiny.read_bytes()[:2] != b"\x89P"          # the input is never overwritten
