"""Automatic mixed precision: the search, its outputs for TensorRT, the CLI flags, and --retarget's output path."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from jetforge.apps.cli.main import main  # noqa: E402
from jetforge.calibrate import algorithms, evaluate as ev, mixed, stats  # noqa: E402
from jetforge.calibrate.cache import CalibrationCache  # noqa: E402
from jetforge.calibrate.qdq import insert_qdq  # noqa: E402
from jetforge.errors import CalibrationError  # noqa: E402


def _diverse_net(path, x):
    """A small conv net whose logits are standardised over real frames ``x``, so its top-1 varies by image.

    (The shared tiny test net predicts one class for every frame, which makes agreement trivially 1.)
    """
    torch = pytest.importorskip("torch")
    import warnings
    from torch import nn

    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                        nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(32, 10)).eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(x))
        mean, std = logits.mean(0), logits.std(0) + 1e-6
        net[-1].weight.div_(std[:, None])
        net[-1].bias.sub_(mean).div_(std)
        net[-1].weight.mul_(4.0)
        net[-1].bias.mul_(4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.from_numpy(x[:1]), str(path), input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=13, dynamo=False)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, real_frames):
    from jetforge.runtime.preprocess import Preprocess
    from tests.calibrate.conftest import MODEL_SIZE

    pre = Preprocess(height=MODEL_SIZE, width=MODEL_SIZE)
    x = np.stack([pre.apply(f) for f in real_frames])
    batches = [x[i:i + 8] for i in range(0, len(x), 8)]
    m = onnx.load(str(_diverse_net(tmp_path_factory.mktemp("mixed") / "net.onnx", x)))
    st = stats.collect_from_batches(m, batches, tensors="qdq")
    # ranges cut to a third clip hard, so that the search has INT8 error to remove
    amax = algorithms.compute_all(st.histograms, "entropy")
    q = insert_qdq(m, {k: v / 3 for k, v in amax.items()})
    evaluator = ev.Evaluator(m, batches)
    assert len(set(evaluator.reference.argmax(axis=1))) >= 4
    return m, q, evaluator


def test_bound_already_met_keeps_everything_int8(setup):
    m, q, evaluator = setup
    res = mixed.search(m, q, evaluator, 0.05, "agreement")
    assert res.met and res.fp16_layers == [] and res.layer_precisions == ""
    assert res.int8_layers == [layer.name for layer in ev.quantized_layers(q)]
    assert res.trials == [{"fp16_layers": 0, "value": round(res.result.agreement, 4), "met": True}]


def test_exact_bound_needs_fp16_layers_in_sensitivity_order(setup, tmp_path):
    m, q, evaluator = setup
    res = mixed.search(m, q, evaluator, 1.0, "agreement", method="sqnr")
    assert res.met and res.result.agreement == 1.0
    order = [s.name for s in res.sensitivity]
    assert res.fp16_layers == order[:len(res.fp16_layers)] and res.fp16_layers
    # the smallest such prefix: one layer fewer does not meet the bound (it was measured)
    k = len(res.fp16_layers)
    if k > 0:
        fewer = evaluator.evaluate(ev.dequantize_layers(q, order[:k - 1]) if k > 1 else q)
        assert fewer.agreement < 1.0
    # the mixed model has no Q/DQ on the FP16 layers, and every other layer keeps them
    left = {layer.name for layer in ev.quantized_layers(res.model)}
    assert left == set(res.int8_layers) and not left & set(res.fp16_layers)
    written = mixed.write_outputs(res, tmp_path / "m.precisions.json", tmp_path / "m.mixed.qdq.onnx",
                                  tmp_path / "m.precisions.txt")
    data = json.loads(written["json"].read_text())
    assert data["fp16_layers"] == res.fp16_layers and data["met"] and data["metric"] == "agreement"
    assert data["trtexec"]["layerPrecisions"] == ",".join(n + ":fp16" for n in res.fp16_layers)
    assert "--precisionConstraints=obey" in data["trtexec"]["flags"]
    assert written["layers"].read_text().splitlines() == [n + ":fp16" for n in res.fp16_layers]
    reloaded = onnx.load(str(written["qdq"]))
    onnx.checker.check_model(reloaded)
    assert evaluator.evaluate(reloaded).agreement == 1.0


def test_forced_layers_and_errors(setup):
    m, q, evaluator = setup
    gemm = [layer.name for layer in ev.quantized_layers(q) if layer.op == "Gemm"][-1]
    res = mixed.search(m, q, evaluator, 0.05, "agreement", always_fp16=[gemm])
    assert res.fp16_layers == [gemm]
    with pytest.raises(CalibrationError, match="needs labelled"):
        mixed.search(m, q, evaluator, 0.01, "accuracy_drop")
    with pytest.raises(CalibrationError, match=r"in \(0, 1\]"):
        mixed.search(m, q, evaluator, 98.0, "agreement")
    with pytest.raises(CalibrationError, match="not a quantized layer"):
        mixed.search(m, q, evaluator, 0.5, "agreement", always_fp16=["nope"])


def test_accuracy_drop_bound_with_labels(setup):
    m, q, evaluator = setup
    labelled = ev.Evaluator(m, evaluator.batches, labels=evaluator.reference.argmax(axis=1))
    res = mixed.search(m, q, labelled, 0.0, "accuracy_drop")
    assert res.met and res.result.accuracy_drop <= 0.0 and res.result.accuracy_fp32 == 1.0


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_eval_and_mixed_precision(tiny_model, image_dir, bikes_video, capsys):
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(bikes_video),
                                   "--eval-samples", "24", "--samples", "24", "--no-plots",
                                   "--mixed-precision", "1.0", "--mixed-metric", "agreement", "--json"])
    assert code == 0, err
    data = json.loads(out)
    base = tiny_model.parent
    ev_block = data["evaluation"]
    assert ev_block["held_out"] and ev_block["int8"]["samples"] == 24
    assert 0.0 <= ev_block["int8"]["agreement"] <= 1.0
    mp = ev_block["mixed_precision"]
    assert mp["met"] and mp["achieved"]["agreement"] == 1.0
    assert data["mixed_qdq_onnx"] == str(base / "tiny.mixed.qdq.onnx") and (base / "tiny.mixed.qdq.onnx").is_file()
    precisions = json.loads((base / "tiny.precisions.json").read_text())
    assert precisions["fp16_layers"] == mp["fp16_layers"]
    report = json.loads((base / "tiny.calib.json").read_text())
    assert report["evaluation"]["mixed_precision"]["fp16_layers"] == mp["fp16_layers"]
    assert report["evaluation"]["sensitivity"] and "sqnr_db" in report["evaluation"]["sensitivity"][0]
    from jetforge.runtime.sidecar import read_sidecar

    assert read_sidecar(base / "tiny.mixed.qdq.onnx").extra["fp16_layers"] == mp["fp16_layers"]


def test_cli_eval_text_and_labels(tiny_model, image_dir, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join("img_%03d.jpg\tc%d\n" % (i, i % 10) for i in range(40)))
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(image_dir),
                                   "--labels", str(labels), "--samples", "16", "--no-plots"])
    assert code == 0, err
    assert "INT8 vs FP32 on 40 samples: top-1 agreement" in out and "accuracy on 40 labelled: FP32" in out
    report = json.loads((tiny_model.parent / "tiny.calib.json").read_text())
    assert not report["evaluation"]["held_out"] and report["evaluation"]["int8"]["labelled"] == 40


@pytest.mark.parametrize("argv, message", [
    (["--labels", "x.txt"], "--labels needs --eval"),
    (["--eval", "{data}", "--mixed-precision", "0.01", "--mixed-metric", "accuracy_drop"], "needs labelled"),
    (["--eval", "{data}", "--no-qdq"], "--no-qdq"),
    (["--mixed-precision", "98"], "agreement in (0, 1]"),
])
def test_cli_bad_evaluation_options_one_line(tiny_model, image_dir, capsys, argv, message):
    argv = [a.replace("{data}", str(image_dir)) for a in argv]
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--samples", "16"] + argv)
    assert code == 1 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tiny_model.parent / "tiny.calib").exists()  # refused before any slow step


def test_retarget_without_out_never_overwrites_the_input(tmp_path, capsys):
    original = CalibrationCache.from_amax({"input": 2.5, "conv": 1.0}, "10.3")
    path = original.write(tmp_path / "model.calib")
    before = path.read_bytes()
    code, out, err = _run(capsys, ["calibrate", "--check-cache", str(path), "--trt", "8.6.2", "--retarget"])
    assert code == 0, err
    assert path.read_bytes() == before
    target = tmp_path / "model.trt8.6.2.calib"
    retargeted = CalibrationCache.read(target)
    assert retargeted.header == "TRT-8602-EntropyCalibration2" and retargeted.scales == original.scales
    assert str(target) in out
    # and an explicit --out naming the input is refused
    code, out, err = _run(capsys, ["calibrate", "--check-cache", str(path), "--trt", "8.5.2", "--retarget",
                                   "--out", str(path)])
    assert code == 1 and "also an input" in err and path.read_bytes() == before
