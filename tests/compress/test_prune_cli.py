"""``jetforge prune`` end to end on the real pretrained MobileNetV2: files written, ONNX runs, plan replays."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from jetforge.cli.main import main  # noqa: E402

torch.set_num_threads(1)


def test_cli_prune_mobilenet_writes_everything(tmp_path, capsys, mobilenet_weights):
    out = tmp_path / "pruned"
    code = main(["prune", "--model", "mobilenet_v2", "--flops-reduction", "2.0", "--target", "xavier-nx",
                 "--input-shape", "1,3,96,96", "--out", str(out), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["flops_reduction"] >= 2.0 and data["settings"]["round_to"] == 8
    for name in ("model.prune.json", "pruned.pt", "prune_report.json", "prune_report.txt", "prune_report.png",
                 "model.onnx", "model.onnx.json"):
        assert (out / name).is_file(), name
    sidecar = json.loads((out / "model.onnx.json").read_text())
    assert sidecar["task"] == "classify" and len(sidecar["labels"]) == 1000

    from jetforge.compress.models import build
    from jetforge.compress.prune import PrunePlan, load_pruned
    from jetforge.runtime.session import open_session

    model = load_pruned(build("mobilenet_v2").eval(), PrunePlan.load(out / "model.prune.json"),
                        torch.load(out / "pruned.pt", weights_only=True))
    x = np.random.default_rng(0).standard_normal((1, 3, 96, 96)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with open_session(out / "model.onnx", threads=1) as s:
        got = s.infer({"input": x})["logits"]
    assert np.abs(got - expected).max() < 1e-4


def test_cli_prune_rejects_two_goals(tmp_path, capsys):
    code = main(["prune", "--model", "mobilenet_v2", "--ratio", "0.5", "--flops-reduction", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "not allowed with" in err


def test_cli_prune_unknown_model_is_one_line_error(tmp_path, capsys):
    code = main(["prune", "--model", "resnet5O", "--ratio", "0.5", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "unknown model 'resnet5O'" in err and "resnet50" in err


def test_cli_latency_aware_needs_a_reduction_goal(tmp_path, capsys):
    code = main(["prune", "--model", "resnet18", "--ratio", "0.5", "--latency-aware", "--out", str(tmp_path)])
    assert code == 1 and "not a ratio" in capsys.readouterr().err


def test_cli_latency_goal_out_of_reach_keeps_the_best_model_and_strict_exits_1(tmp_path, capsys):
    """A 1000x speed-up of ResNet-18 on a 32x32 input is out of reach in ONNX Runtime (its per-call overhead alone
    forbids it): the fastest model found is saved with a warning; --strict saves it too, then exits 1."""
    args = ["prune", "--model", "resnet18", "--input-shape", "1,3,32,32", "--latency-reduction", "1000", "--no-plot",
            "--no-onnx"]
    relaxed = tmp_path / "relaxed"
    assert main(args + ["--out", str(relaxed)]) == 0
    out = capsys.readouterr().out
    assert "WARNING  latency goal 1000.00x not reached" in out
    strict = tmp_path / "strict"
    code = main(args + ["--strict", "--json", "--out", str(strict)])
    captured = capsys.readouterr()
    errors = [ln for ln in captured.err.splitlines() if ln.startswith("jetforge: error:")]
    assert code == 1 and len(errors) == 1 and "latency goal 1000.00x not reached (--strict)" in errors[0]
    goal = json.loads(captured.out)["goal"]
    assert goal["met"] is False and 1.0 < goal["achieved"] < 1000.0
    for folder in (relaxed, strict):
        for name in ("model.prune.json", "pruned.pt", "prune_report.json"):
            assert (folder / name).is_file(), (folder, name)
