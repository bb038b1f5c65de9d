"""`jetforge export`: a real pretrained model to ONNX + sidecar, checked against PyTorch in ONNX Runtime."""

import json

from jetforge.cli.main import main
from jetforge.runtime.sidecar import read_sidecar


def test_export_pretrained_mobilenet_writes_onnx_and_a_checked_sidecar(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["export", "--model", "mobilenet_v2", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    side = read_sidecar(out)  # verifies the content hash too
    assert side.task == "classify" and len(side.labels) == 1000 and side.labels[0] == "tench"
    assert side.inputs[0].shape == ["batch", 3, 224, 224] and side.preprocess.crop_fraction == 0.875
    assert result["onnxruntime_vs_torch"]["max_abs_diff"] < 1e-4
    assert result["sha256"] == side.content_sha256


def test_export_user_module_with_labels_file_and_static_batch(tmp_path, capsys):
    import torch

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(4, 3))
    model = tmp_path / "net.pt"
    torch.save(net, str(model))
    labels = tmp_path / "classes.txt"
    labels.write_text("# my classes\ncat\ndog\n\nbird\n")
    pre = tmp_path / "pre.yaml"
    pre.write_text("height: 32\nwidth: 32\nresize: stretch\ncolor: gray\nmean: [0.5]\nstd: [0.25]\n")
    out = tmp_path / "net.onnx"
    assert main(["export", "--model", str(model), "--trust-pickle", "--input-shape", "1x1x32x32",  # a whole module
                 "--preprocess", str(pre), "--labels", str(labels), "--task", "classify", "--static-batch",
                 "--out", str(out)]) == 0
    side = read_sidecar(out)
    assert side.labels == ["cat", "dog", "bird"] and side.inputs[0].shape == [1, 1, 32, 32]
    assert side.preprocess.color == "gray" and side.preprocess.resize == "stretch"
    assert "ONNX Runtime vs PyTorch" in capsys.readouterr().out


def test_export_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["export", "--model", "mobilenet_v2", "--out", str(tmp_path / "m.txt")]) == 1
    assert "--out must name an .onnx file" in capsys.readouterr().err
    assert main(["export", "--model", "mobilenet_v2", "--labels", str(tmp_path / "none.txt"), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "labels file" in err[0]
    pre = tmp_path / "pre.yaml"
    pre.write_text("height: 32\nwidht: 32\n")
    assert main(["export", "--model", "mobilenet_v2", "--preprocess", str(pre), "--out", str(out)]) == 1
    assert "did you mean 'width'" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "m.onnx.json").exists()


def test_export_failure_is_one_line_naming_the_operator_not_an_ir_dump(tmp_path, capfd):
    """An operator ONNX lacks used to end in the exporter's TorchScript IR dump on stdout and exit 2."""
    import torch

    from tests.compress.test_export import _Histogram  # a module whose forward calls torch.histc

    model = tmp_path / "histogram.pt"
    torch.save(_Histogram(), str(model))
    out = tmp_path / "histogram.onnx"
    code = main(["export", "--model", str(model), "--trust-pickle", "--input-shape", "1x3x8x8", "--out", str(out)])
    captured = capfd.readouterr()
    errors = [ln for ln in captured.err.splitlines() if ln.startswith("jetforge: error:")]
    assert code == 1 and len(errors) == 1
    assert "cannot translate operator aten::histc (opset 17)" in errors[0] and "(fix:" in errors[0]
    assert "graph(" not in captured.out + captured.err
    assert not out.exists() and not (tmp_path / "histogram.onnx.json").exists()


def _export_without_torch(tmp_path, *argv):
    """`jetforge export ARGV` in a process where importing torch or torchvision fails: what it refuses there, it
    refuses before the 8-13 s import (issue 25)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # torchvision imports torch first: it fails too
            "from jetforge.cli.main import main\nsys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "export", "--out", str(tmp_path / "m.onnx")] + list(argv),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("jetforge: error: "), proc.stderr
    assert not (tmp_path / "m.onnx").exists()
    return lines[0]


def test_a_mistyped_model_name_fails_before_torch_is_imported(tmp_path):
    line = _export_without_torch(tmp_path, "--model", "mobilenet_v3_smal")
    assert "unknown model 'mobilenet_v3_smal'; did you mean 'mobilenet_v3_small'" in line
    assert "a torchvision architecture" in line


def test_an_opset_outside_the_supported_range_names_the_range_before_torch_is_imported(tmp_path):
    for opset in ("9", "21"):
        line = _export_without_torch(tmp_path, "--model", "mobilenet_v2", "--opset", opset)
        assert "opset %s is outside the supported range 13 to 20" % opset in line and "(fix: --opset 17" in line


def test_the_fast_checks_agree_with_torch_and_torchvision():
    """The names and the opset range read without importing torch are the ones the real builders take."""
    import torch
    import torchvision
    from torch.onnx import _constants

    from jetforge.compress.export import MAX_OPSET, MIN_OPSET
    from jetforge.compress.models import RECIPE_ARCHS, torchvision_model_names
    from jetforge.compress.models.fashion import ARCHS
    from jetforge.cli.main import build_parser

    assert torchvision_model_names() == sorted(torchvision.models.list_models())
    assert tuple(ARCHS) == RECIPE_ARCHS
    assert MAX_OPSET == _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET and MIN_OPSET == 13, torch.__version__
    opset = [a for a in build_parser("export")._subparsers._group_actions[0].choices["export"]._actions
             if "--opset" in a.option_strings][0]
    assert opset.help == "ONNX opset, %d to %d (default 17)" % (MIN_OPSET, MAX_OPSET)
