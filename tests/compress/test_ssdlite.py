"""The SSDLite-MobileNetV2 port: weights, structure and configuration read from the real frozen graph, and its
outputs against TensorFlow's own, recorded by benchmarks/detector_students/ssdlite_tf_check.py (TensorFlow 2.21 executing the
graph on three vtest.avi frames) in ssdlite_tf_reference.npz beside this file."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.models.ssdlite_mobilenet_v2 import (SSDLiteMobileNetV2, graph_state_dict,  # noqa: E402
                                                           load_from_graphdef)
from jetforge.compress.models.tf_graphdef import load_graphdef  # noqa: E402
from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec  # noqa: E402
from jetforge.errors import ModelError  # noqa: E402
from jetforge.vision.boxes import iou_matrix  # noqa: E402
from jetforge.vision.ssd import postprocess, ssd_anchor_layers  # noqa: E402

torch.set_num_threads(1)
REFERENCE = Path(__file__).with_name("ssdlite_tf_reference.npz")


@pytest.fixture(scope="module")
def graph():
    from jetforge.assets import asset_path

    return load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))


@pytest.fixture(scope="module")
def model(graph):
    return load_from_graphdef(None, graph=graph)


@pytest.fixture(scope="module")
def reference():
    import cv2

    with np.load(REFERENCE) as data:
        ref = {k: data[k] for k in data.files}
    pngs = sorted(k for k in ref if k.startswith("png_"))
    # the exact 300x300 RGB inputs TensorFlow got, stored losslessly
    ref["images"] = np.stack([cv2.cvtColor(cv2.imdecode(ref[k], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB) for k in pngs])
    return ref


def test_configuration_read_from_the_graph_matches_the_documented_one(graph):
    spec = read_spec(SSDGraph(graph))
    # TF Object Detection API's ssdlite_mobilenet_v2 config: 6 maps, scales 0.2..0.95, ratios 1, 2, 0.5, 3, 0.3333
    # (+ the interpolated square box), 3 boxes on the lowest map; faster-rcnn coder 10, 10, 5, 5; sigmoid;
    # NMS IoU 0.6, score 1e-8, 100 per class and in all
    documented = ssd_anchor_layers([(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)])
    assert [(l.rows, l.cols) for l in spec.layers] == [(l.rows, l.cols) for l in documented]
    for got, want in zip(spec.layers, documented):
        np.testing.assert_allclose(got.scales, want.scales, rtol=1e-6)  # the graph holds float32 copies
        np.testing.assert_allclose(got.aspect_ratios, want.aspect_ratios, rtol=1e-6)
    assert spec.num_anchors == 1917 and spec.image_size == (300, 300) and spec.base_anchor_size == (1.0, 1.0)
    assert spec.scale_factors == (10.0, 10.0, 5.0, 5.0) and spec.score_converter == "sigmoid"
    assert spec.logit_scale == 1.0 and spec.iou_threshold == pytest.approx(0.6)
    assert spec.score_threshold == pytest.approx(1e-8) and (spec.max_per_class, spec.max_total) == (100, 100)
    pre = read_preprocess(SSDGraph(graph))
    assert (pre.height, pre.width, pre.resize, pre.color) == (300, 300, "stretch", "rgb")
    assert pre.scale == pytest.approx(2 / 255) and pre.mean == (1.0,) and pre.std == (1.0,)


def test_weights_come_from_the_graph(graph, model):
    g = SSDGraph(graph)
    assert model.num_anchors == 1917 and model.grid_sizes == ((19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1))
    stem = g.const("FeatureExtractor/MobilenetV2/Conv/weights")  # HWIO
    np.testing.assert_array_equal(model.conv.conv.weight.detach().numpy(), stem.transpose(3, 2, 0, 1))
    dw = g.const("BoxPredictor_0/ClassPredictor_depthwise/depthwise_weights")  # H W in multiplier
    assert dw.shape == (3, 3, 576, 1)
    np.testing.assert_array_equal(model.class_heads[0].depthwise.conv.weight.detach().numpy()[:, 0],
                                  dw[:, :, :, 0].transpose(2, 0, 1))
    bias = g.const("BoxPredictor_5/ClassPredictor/biases")
    np.testing.assert_array_equal(model.class_heads[5].pointwise.bias.detach().numpy(), bias)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 76 and all(m.eps == pytest.approx(1e-3) for m in bns)  # 76 FusedBatchNorm, eps from the graph
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert sum(m.groups > 1 for m in convs) == 33 and sum(m.groups == 1 for m in convs) == 55
    assert sum(isinstance(m, torch.nn.ReLU6) for m in model.modules()) == 59


def test_a_graph_that_does_not_fit_is_refused(graph):
    small = SSDLiteMobileNetV2(num_classes=3)  # a three-class head: the graph's class predictors have 2 per anchor
    state, problems = graph_state_dict(small, graph)
    expected = small.state_dict()
    assert any(tuple(state[k].shape) != tuple(expected[k].shape) for k in state)
    assert problems == []  # structure (strides, padding, ReLU6) agrees; only the shapes differ
    with pytest.raises(ModelError, match="not a TF Object Detection API"):
        load_from_graphdef(None, graph=type(graph)(graph.nodes[:1000]))


def test_port_equals_tensorflow_on_real_frames(model, graph, reference):
    """Same 300x300 inputs as TensorFlow got: raw outputs, then every detection TF returned."""
    pre = read_preprocess(SSDGraph(graph))
    spec = read_spec(SSDGraph(graph))
    images = reference["images"]  # RGB uint8, already 300x300: TF's in-graph resize is the identity on them
    x = pre.normalize(images)  # (N, 3, 300, 300) float32: the port's input layout
    with torch.no_grad():
        boxes, logits = (t.numpy() for t in model(torch.from_numpy(x)))
    # float32 through ~70 layers in a different convolution library: observed 1e-5 at output scale 15;
    # the bound is 1e-4 of the output scale (1.5e-3), leaving room for any CPU's kernels
    scale = np.abs(reference["raw_logits"]).max()
    assert np.abs(boxes - reference["raw_boxes"]).max() <= 1e-4 * scale
    assert np.abs(logits - reference["raw_logits"]).max() <= 1e-4 * scale
    for i, det in enumerate(postprocess(boxes, logits, spec)):
        n = int(reference["num"][i])
        tf_scores, tf_boxes = reference["scores"][i][:n], reference["boxes"][i][:n]
        strong = tf_scores >= 0.3  # the goal on the detections that matter; the 1e-8 tail is near-tied
        assert strong.sum() >= 2
        k = int(strong.sum())
        np.testing.assert_allclose(det.scores[:k], tf_scores[:k], atol=1e-3)
        ious = np.diag(iou_matrix(det.boxes[:k], tf_boxes[:k]))
        assert ious.min() >= 0.99, ious
        assert len(det) == k or det.scores[k] < 0.3 + 1e-3  # nothing extra above the threshold
