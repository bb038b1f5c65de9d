"""QAT: TensorRT's fake-quantization rules, BN folding, placement, real-data calibration, Q/DQ export whose
simulated TensorRT INT8 arithmetic matches an int32 reference (and ONNX Runtime fuses into INT8 kernels) and
TensorRT(-RTX) builds, translation to a DLA cache, the recipe and CLI.  No assertion reads a value that only
one CPU's INT8 kernels produce."""

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from torch import nn  # noqa: E402

from jetforge.compress.qat import (QatSummary, QuantAdd, calibrate_qat, export_qdq_onnx,  # noqa: E402
                                   fake_quantize, onnx_accuracy, ort_kernels, prepare_qat, qdq_for_ort, quantizers,
                                   set_quantization)
from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL, simulation_model  # noqa: E402
from jetforge.calibrate.ortrun import executed_ops, integer_kernels, run  # noqa: E402
from jetforge.compress.qat.export import onnx_logits  # noqa: E402
from jetforge.compress.train import build_model  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402
from tests.calibrate import int8_reference  # noqa: E402


@pytest.fixture(scope="module")
def fmnist_root():
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    except AssetError as err:
        pytest.skip("Fashion-MNIST not available: %s" % err)


@pytest.fixture(scope="module")
def real_batches(fmnist_root):
    from jetforge.compress.data import fashion_mnist

    ds = fashion_mnist(fmnist_root, "train", limit=1024, seed=3)
    return ds, [ds.__getitems__(list(range(i, i + 128)))[0] for i in range(0, 1024, 128)]


@pytest.fixture(scope="module")
def trained_cnn(real_batches):
    """A FashionCNN (width 0.25) trained for 8 steps on real images: non-trivial weights and BN statistics."""
    ds, _ = real_batches
    torch.manual_seed(0)
    model = build_model("fashion_cnn", 0.25)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    for i in range(8):
        x, y = ds.__getitems__(list(range(i * 128, (i + 1) * 128)))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def test_fake_quantize_is_symmetric_int8_with_round_half_even_and_clipped_ste():
    amax = torch.tensor(127.0)  # scale 1
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 126.6, 200.0, -200.0], requires_grad=True)
    y = fake_quantize(x, amax)
    assert y.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 127.0, 127.0, -128.0]  # ONNX QuantizeLinear semantics
    y.sum().backward()
    assert x.grad.tolist() == [1, 1, 1, 1, 1, 1, 0, 0]  # straight-through inside the range, 0 outside
    w = torch.tensor([[1.0, -2.0], [0.1, 0.05]])
    wq = fake_quantize(w, w.abs().amax(1), axis=0)  # per output channel: scale max|w|/127
    np.testing.assert_allclose(wq.numpy(), (torch.round(w / (w.abs().amax(1, keepdim=True) / 127))
                                            * (w.abs().amax(1, keepdim=True) / 127)).numpy(), rtol=1e-6)


def test_prepare_folds_batchnorm_and_quantizes_inputs_of_conv_linear_and_residual_add(trained_cnn):
    summary = QatSummary()
    q = prepare_qat(trained_cnn, summary=summary)
    assert len(summary.folded_batchnorms) == 5 and not summary.frozen_batchnorms
    assert not [m for m in q.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(summary.quantized_convs) == 5 and len(summary.quantized_linears) == 1
    assert len(summary.quantized_adds) == 1
    add = next(m for m in q.modules() if isinstance(m, QuantAdd))
    # the block input feeds conv1 and the residual add: one shared quantizer = one range for the tensor
    assert q.block.conv1.input_quantizer is add.input_quantizer_b
    x = torch.randn(4, 1, 28, 28)
    set_quantization(q, False)
    with torch.no_grad():  # folding is exact: quantizers off, the folded model computes the original
        np.testing.assert_allclose(q(x).numpy(), trained_cnn(x).numpy(), rtol=1e-4, atol=1e-5)
    set_quantization(q, True)
    assert all(p.requires_grad for p in q.parameters())


def test_uncalibrated_model_refuses_to_run(trained_cnn):
    q = prepare_qat(trained_cnn)
    with pytest.raises(CompressError, match="no range"):
        q(torch.zeros(1, 1, 28, 28))


class _WithLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.up = nn.ConvTranspose2d(4, 4, 2)
        self.rnn = nn.LSTM(4, 4)

    def forward(self, x):
        return self.up(self.conv(x))


class _Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 1, 3, 3))

    def forward(self, x):
        return nn.functional.conv2d(x, self.w)


def test_unsupported_layers_give_a_clear_error():
    with pytest.raises(CompressError) as err:
        prepare_qat(_WithLSTM())
    text = str(err.value)
    assert "up (ConvTranspose2d)" in text and "rnn (LSTM)" in text and "jetforge calibrate" in text
    with pytest.raises(CompressError, match="F.conv2d"):
        prepare_qat(_Functional())


@pytest.fixture(scope="module")
def exported(trained_cnn, real_batches, tmp_path_factory):
    _, batches = real_batches
    q = prepare_qat(trained_cnn)
    amax = calibrate_qat(q, batches[:4], "entropy")
    path = tmp_path_factory.mktemp("qat") / "cnn.qdq.onnx"
    info = export_qdq_onnx(q, path, (1, 1, 28, 28))
    return q, amax, path, info, batches


def test_calibration_uses_the_calibrate_algorithms(trained_cnn, real_batches):
    from jetforge.calibrate.algorithms import compute_amax
    from jetforge.calibrate.histogram import StreamingHistogram

    _, batches = real_batches
    q = prepare_qat(trained_cnn)
    got = calibrate_qat(q, batches[:2], "percentile", percentile=99.9)
    h = StreamingHistogram()
    for b in batches[:2]:
        h.update(b.numpy())
    assert got["stem.0.input_quantizer"] == pytest.approx(compute_amax(h, "percentile", percentile=99.9))
    assert len(got) == len(quantizers(q)) == 7


def test_qdq_export_follows_tensorrt_rules_and_matches_torch_in_onnx_runtime(exported, tmp_path):
    from onnx import numpy_helper

    q, amax, path, info, batches = exported
    m = onnx.load(str(path))
    assert info.opset >= 13 and info.per_channel_weights == 6 and info.per_tensor_activations == 7
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            scale, zp = inits[n.input[1]], inits[n.input[2]]  # constants, positive, int8 zero points
            assert scale.dtype == np.float32 and (scale > 0).all() and zp.dtype == np.int8 and not zp.any()
    # activation scales are the calibrated amax / 127 (float32)
    stem = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    assert float(inits[stem.input[1]]) == float(np.float32(amax["stem.0.input_quantizer"]) / np.float32(127))
    x = torch.cat(batches[4:6])
    with torch.no_grad():
        ref = q(x).numpy()
    # What TensorRT computes, by two independent implementations: the simulated evaluator (float kernels on
    # exact integers, INT32 bias) and the numpy int32 reference.  Both are exact integer arithmetic with the
    # same rescale, so they agree to float32 rounding of the float64 pooling (1e-6 of the output scale).
    int8 = onnx_logits(m, x.numpy())
    scale = np.abs(ref).max()
    integer = int8_reference.run(m, x.numpy())[0]
    assert np.abs(int8 - integer).max() <= 1e-6 * scale
    # torch's fake quantization is the same arithmetic with a float bias and float32 sums in oneDNN's order:
    # against the simulation with a float bias only the sum order differs, which moves a value across a
    # rounding boundary (1 LSB) at a few quantize points; measured max |diff| 0.005 of the output scale on
    # this AVX2 machine, with INT32 bias 0.010.  0.02 bounds a handful of 1-LSB flips reaching the logits,
    # whatever the CPU's sum order, and the top-1 answers must stay the same on >= 99%.
    float_bias = run(simulation_model(m, quantize_bias=False), [x.numpy()], "simulated", prepared=True)[0]
    for got in (float_bias, int8):
        assert np.abs(got - ref).max() < 0.02 * scale and (got.argmax(1) == ref.argmax(1)).mean() >= 0.99
    # the simulated session runs no integer kernel; the ORT-kernel rewrite fuses into QLinearConv/QLinearAdd
    assert not integer_kernels(executed_ops(m, "simulated"))
    kernels = ort_kernels(qdq_for_ort(m), tmp_path)
    assert kernels.get("QLinearConv", 0) >= 4 and kernels.get("QLinearAdd", 0) == 1  # INT8 kernels, not float


def test_qdq_model_parses_and_builds_with_tensorrt(exported):
    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX (pip install tensorrt-rtx-cu13) is not installed")
    from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

    _, _, path, _, _ = exported
    build = check_onnx_builds(str(path))
    assert build.num_layers > 0 and build.serialized_bytes > 0


def test_dla_cache_holds_the_trained_scales(exported, tmp_path):
    from jetforge.calibrate.cache.format import CalibrationCache
    from jetforge.calibrate.qdq.translate import tensor_names, translate_file

    q, amax, path, _, _ = exported
    res, paths = translate_file(path, tmp_path, trt_version="10.3")
    cache = CalibrationCache.read(paths["cache"])
    plain = onnx.load(str(paths["plain_onnx"]))
    assert cache.validate_against(tensor_names(plain)).ok
    assert cache.scales["input"] == float(np.float32(amax["stem.0.input_quantizer"]) / np.float32(127))
    by_tensor = {}
    m = onnx.load(str(path))
    for n in m.graph.node:  # which quantizer (module path in the node name) quantizes which tensor
        if n.op_type == "QuantizeLinear" and "input_quantizer" in n.name:
            by_tensor[n.input[0]] = n.name
    assert len(res.trained) == 7
    for tensor, scale in res.trained.items():
        assert cache.scales[tensor] == scale
    assert not res.weight_scale_mismatch  # weight scales are max|w|/127 per channel, as TensorRT recomputes


def test_qat_recipe_end_to_end_from_yaml_through_the_cli(fmnist_root, trained_cnn, tmp_path, capsys):
    from jetforge.cli.main import main
    from jetforge.compress.train import save_checkpoint

    ckpt = tmp_path / "fp32.pt"
    save_checkpoint(ckpt, copy.deepcopy(trained_cnn).state_dict())
    recipe = tmp_path / "qat.yaml"
    recipe.write_text(
        "name: t\nout_dir: %s\ndata: {root: %s, train_limit: 512, val_limit: 500, calib_samples: 256}\n"
        "model: {arch: fashion_cnn, width: 0.25, checkpoint: %s}\n"
        "train: {epochs: 1, lr: 0.002, batch_size: 64, max_steps_per_epoch: 4, progress: false}\n"
        % (tmp_path / "run", fmnist_root, ckpt))
    assert main(["qat", "--config", str(recipe), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    run = tmp_path / "run"
    for name in ("config.yaml", "metrics.jsonl", "last.pt", "model.qdq.onnx", "model.plain.onnx", "model.calib",
                 "model.fp16_layers.txt", "model.dla.json", "result.json"):
        assert (run / name).is_file(), name
    # the Q/DQ ONNX in simulated TensorRT arithmetic against torch's fake quantization of the same model: the
    # same arithmetic up to the INT32 bias and float sum order, which flip under 1% of top-1 answers (0.4%
    # measured on the export test above), so 0.01 of 500 validation images
    assert out["onnx_int8_arithmetic"] == SIMULATED_LABEL
    assert out["onnx_int8_accuracy"] == pytest.approx(out["qat_accuracy"], abs=0.01)
    # ONNX Runtime's INT8 kernels are reported beside it, labelled with this CPU's flags, never asserted on
    assert out["ort_int8_kernels"]["QLinearConv"] >= 4 and out["ort_kernels_label"].startswith("ORT INT8 kernels")
    assert 0.0 <= out["ort_kernels_accuracy"] <= 1.0
    assert 0.0 < out["fp32_accuracy"] <= 1.0 and out["dla"]["trained_scales"] == 7
    # a missing checkpoint is a clear error, not a traceback
    assert main(["qat", "--config", str(recipe), "--set", "model.checkpoint=null"]) == 1
    assert "model.checkpoint" in capsys.readouterr().err


def test_onnx_accuracy_on_real_labels(exported, fmnist_root):
    from jetforge.compress.data import fashion_mnist, normalize

    q, _, path, _, _ = exported
    test = fashion_mnist(fmnist_root, "test", limit=300)
    x, y = normalize(test.images.numpy()), test.labels.numpy()
    m = onnx.load(str(path))
    simulated = onnx_accuracy(m, x, y)
    # TensorRT's arithmetic computed independently in int32 numpy gives the very same answers on every image
    integer = int8_reference.run(m, x)[0]
    assert simulated == float((integer.argmax(1) == y).mean())
    # and torch's fake quantization is within the rounding flips bounded in the recipe test (1% of images)
    with torch.no_grad():
        torch_acc = float((q(torch.from_numpy(x)).argmax(1).numpy() == y).mean())
    assert simulated == pytest.approx(torch_acc, abs=0.01)

