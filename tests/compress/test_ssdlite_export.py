"""Export of the SSDLite person detector: ONNX body + sidecar, run in ONNX Runtime with the numpy postprocess
against the PyTorch port on real frames; pad folding; TensorRT-RTX parse and build; the EfficientNMS variant;
the DLA placement prediction."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.compress.models.ssdlite_export import (center_size_anchors, fold_pads_into_convs,  # noqa: E402
                                                     write_efficient_nms_variant)
from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef  # noqa: E402
from jetforge.compress.models.tf_graphdef import load_graphdef  # noqa: E402
from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec  # noqa: E402
from jetforge.vision.boxes import iou_matrix  # noqa: E402
from jetforge.vision.ssd import postprocess, spec_from_sidecar  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # one CLI export of a 1917-anchor detector (~15-30 s on 2 shared cores)
VTEST_FRAMES = (40, 400, 760)


@pytest.fixture(scope="module")
def ported():
    from jetforge.assets import asset_path

    graph = load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    g = SSDGraph(graph)
    return load_from_graphdef(None, graph=graph), read_spec(g), read_preprocess(g)


@pytest.fixture(scope="module")
def cli_export(tmp_path_factory):
    """`jetforge export --model ssdlite_mobilenet_v2_person --efficient-nms --json`, once: (body path, printed JSON)."""
    import contextlib
    import io
    import json

    from jetforge.cli.main import main

    path = tmp_path_factory.mktemp("ssd") / "det.onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["export", "--model", "ssdlite_mobilenet_v2_person", "--out", str(path), "--efficient-nms",
                     "--json"])
    assert code == 0
    return path, json.loads(printed.getvalue())


@pytest.fixture(scope="module")
def exported(cli_export):
    return cli_export[0]


def test_cli_route(cli_export):
    path, result = cli_export
    assert result["task"] == "detect" and result["labels"] == ["person"] and result["anchors"] == 1917
    assert [o["name"] for o in result["outputs"]] == ["box_encodings", "class_logits"]
    # the CLI's own ONNX Runtime check on a random input: same float32 network, ~1e-5 at output scale ~30
    assert result["onnxruntime_vs_torch"]["max_abs_diff"] <= 1e-4 * result["onnxruntime_vs_torch"]["output_scale"]
    nms = path.with_name("det.nms.onnx")
    assert Path(result["efficient_nms_onnx"]) == nms and nms.is_file()


def test_cli_refuses_options_that_do_not_apply(tmp_path, capsys):
    from jetforge.cli.main import main

    code = main(["export", "--model", "ssdlite_mobilenet_v2_person", "--out", str(tmp_path / "d.onnx"),
                 "--input-shape", "1x3x320x320"])
    assert code == 1 and "--input-shape cannot be used with ssdlite_mobilenet_v2_person" in capsys.readouterr().err
    assert not (tmp_path / "d.onnx").exists()


@pytest.fixture(scope="module")
def frames():
    from jetforge.assets import asset_path
    from jetforge.apps.video import open_source

    with open_source(asset_path("opencv_samples", "vtest.avi")) as source:
        got = [f.image for f in source if f.index in VTEST_FRAMES]
    assert len(got) == len(VTEST_FRAMES)
    return got


def test_onnx_runtime_body_and_numpy_postprocess_equal_the_port(exported, ported, frames):
    model, spec, pre = ported
    sidecar = read_sidecar(exported)
    assert spec_from_sidecar(sidecar) == spec
    x = np.stack([sidecar.preprocess.apply(f) for f in frames])
    session = ort.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    boxes, logits = session.run(None, {"input": x})
    with torch.no_grad():
        ref_boxes, ref_logits = (t.numpy() for t in model(torch.from_numpy(x)))
    # same float32 network in two runtimes (ORT folds BN into the convs): observed ~1e-5 at output scale ~15;
    # 1e-4 of the output scale bounds any CPU's summation order
    scale = np.abs(ref_logits).max()
    assert np.abs(boxes - ref_boxes).max() <= 1e-4 * scale and np.abs(logits - ref_logits).max() <= 1e-4 * scale
    ours = postprocess(boxes, logits, spec, score_threshold=0.3)
    theirs = postprocess(ref_boxes, ref_logits, spec, score_threshold=0.3)
    people = 0
    for a, b in zip(ours, theirs):
        assert len(a) == len(b)
        people += len(a)
        if len(a):
            assert np.diag(iou_matrix(a.boxes, b.boxes)).min() >= 0.999
            assert np.abs(a.scores - b.scores).max() <= 1e-4
        # in frame pixels: people in vtest.avi are taller than wide
        xyxy = a.xyxy(sidecar.preprocess.geometry(frames[0].shape[:2]), (300, 300))
        assert ((xyxy[:, 3] - xyxy[:, 1]) > (xyxy[:, 2] - xyxy[:, 0])).all()
    assert people >= 4  # vtest.avi shows several pedestrians in each of these frames


def test_detector_wrapper_gives_frame_pixels(exported, ported, frames):
    """SSDDetector (session + sidecar preprocessing + postprocess) equals the same steps done by hand."""
    from jetforge.vision.ssd_detector import SSDDetector

    model, spec, pre = ported
    with SSDDetector(exported, backend="onnxruntime") as det:
        boxes, scores = det.detect(frames[1], score_threshold=0.5)
    with torch.no_grad():
        b, c = model(torch.from_numpy(pre.apply(frames[1])[None]))
    ref = postprocess(b.numpy(), c.numpy(), spec, score_threshold=0.5)[0]
    h, w = frames[1].shape[:2]
    expected = ref.boxes[:, [1, 0, 3, 2]] * np.array([w, h, w, h])  # stretched: normalised * frame size
    assert len(boxes) == len(ref) >= 2
    assert np.diag(iou_matrix(boxes, expected)).min() >= 0.999 and np.abs(scores - ref.scores).max() <= 1e-4
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()


def test_exported_graph_is_plain_convolutions_with_the_padding_folded(exported):
    proto = onnx.load(str(exported))
    ops = {n.op_type for n in proto.graph.node}
    assert "Pad" not in ops and "BatchNormalization" not in ops
    assert ops <= {"Conv", "Clip", "Add", "Transpose", "Reshape", "Concat", "Constant"}
    pads = [tuple(a.ints) for n in proto.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "pads"]
    # SAME on an even size with stride 2 pads one row/column at the bottom/right only (300, 150, 38, 10, 2)
    assert pads.count((0, 0, 1, 1)) == 5
    sidecar = read_sidecar(exported)
    assert sidecar.task == "detect" and sidecar.labels == ["person"]
    assert [t.name for t in sidecar.outputs] == ["box_encodings", "class_logits"]
    assert sidecar.outputs[0].shape == ["batch", 1917, 4] and sidecar.outputs[1].shape == ["batch", 1917, 2]
    assert sidecar.extra["pads_folded_into_convs"] == 5 and sidecar.extra["ssd"]["num_anchors"] == 1917
    assert sidecar.produced_by["weights_sha256"].startswith("7a23982e")


def _pad_conv_model(path: Path, pad_value: float) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([0, 0, 0, 1, 0, 0, 2, 1], dtype=np.int64), "pads"),
             numpy_helper.from_array(np.array(pad_value, dtype=np.float32), "value"),
             numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["p"], mode="constant"),
             helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2], pads=[1, 0, 0, 0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("pad_value, folded", [(0.0, 1), (0.5, 0)])
def test_fold_pads_into_convs_keeps_the_numbers(tmp_path, pad_value, folded):
    path = _pad_conv_model(tmp_path / "m.onnx", pad_value)
    x = np.random.default_rng(1).standard_normal((1, 3, 10, 9)).astype(np.float32)
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    proto = onnx.load(str(path))
    assert fold_pads_into_convs(proto) == folded
    onnx.checker.check_model(proto)
    if folded:
        conv = proto.graph.node[0]
        assert [n.op_type for n in proto.graph.node] == ["Conv"]
        # ONNX pads [top, left, bottom, right]: the conv's [1, 0, 0, 0] plus the Pad's H/W begins (0, 1), ends (2, 1)
        assert list(next(a.ints for a in conv.attribute if a.name == "pads")) == [1, 1, 2, 1]
    after = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(after, before, atol=1e-5)


def test_tensorrt_rtx_parses_and_builds_the_body(exported):
    pytest.importorskip("tensorrt_rtx", reason="tensorrt_rtx is not installed (pip install tensorrt-rtx-cu13)")
    from jetforge.runtime.tensorrt.onnx_check import check_onnx_builds

    result = check_onnx_builds(exported, prefer="tensorrt_rtx")
    assert result.library == "tensorrt_rtx" and result.outputs == ["box_encodings", "class_logits"]
    assert result.inputs == {"input": (1, 3, 300, 300)} and result.serialized_bytes > 1_000_000


def test_efficient_nms_variant(exported, ported, tmp_path):
    """The plugin variant is well formed; TensorRT-RTX parses it up to the plugin, which RTX does not ship."""
    _, spec, _ = ported
    out = tmp_path / "det.nms.onnx"
    sidecar = write_efficient_nms_variant(exported, out, spec)
    proto = onnx.load(str(out))
    nms = [n for n in proto.graph.node if n.op_type == "EfficientNMS_TRT"]
    assert len(nms) == 1 and nms[0].domain == "TRT"
    attrs = {a.name: helper.get_attribute_value(a) for a in nms[0].attribute}
    assert attrs["box_coding"] == 1 and attrs["background_class"] == 0 and attrs["score_activation"] == 1
    assert attrs["iou_threshold"] == pytest.approx(0.6) and attrs["max_output_boxes"] == 100
    assert attrs["plugin_version"] == b"1"
    anchors = numpy_helper.to_array(next(i for i in proto.graph.initializer if i.name == "nms_anchors"))
    corners = spec.anchors()
    np.testing.assert_allclose(anchors[0, :, 0] - anchors[0, :, 2] / 2, corners[:, 0], atol=1e-6)
    np.testing.assert_allclose(anchors[0, :, 3], corners[:, 3] - corners[:, 1], atol=1e-6)
    np.testing.assert_array_equal(anchors, center_size_anchors(spec))
    assert [t.name for t in sidecar.outputs] == ["num_detections", "detection_boxes", "detection_scores",
                                                 "detection_classes"]
    trt = pytest.importorskip("tensorrt_rtx", reason="tensorrt_rtx is not installed")
    network = trt.Builder(trt.Logger(trt.Logger.ERROR)).create_network(0)
    parser = trt.OnnxParser(network, trt.Logger(trt.Logger.ERROR))
    assert not parser.parse_from_file(str(out))
    errors = [parser.get_error(i) for i in range(parser.num_errors)]
    assert len(errors) == 1 and errors[0].node_name() == "efficient_nms"
    assert "Plugin not found" in errors[0].desc()  # the graph up to the plugin parsed; only the plugin is missing


def test_dla_check_places_the_body_on_the_dla(exported):
    """The documented DLA rules put every convolution, ReLU6 and residual add on the DLA (Orin NX, FP16)."""
    from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx
    from jetforge.targets import get_target

    data = analyze_onnx(exported, get_target("orin-nx-16gb"), input_shapes={"input": [1, 3, 300, 300]}).to_dict()
    # only the two concatenations of the per-map outputs along the anchor axis (not channels) fall back
    assert [(g["onnx_op"], g["rules"]) for g in data["gpu_fallback"]] == [("Concat", ["concat.channel_axis"])] * 2
    assert data["summary"]["dla_subgraphs"] == 1 and data["summary"]["dla_flops_share"] > 0.9999
    assert all(layer["device"] == "DLA" for layer in data["layers"] if layer["onnx_op"] in ("Conv", "Clip", "Add"))
