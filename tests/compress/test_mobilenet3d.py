"""The 3D MobileNetV2: inflation from the real ImageNet weights, time strides, pruning and rebuilding from a state dict."""

import cv2
import numpy as np
import pytest
import torch

from jetforge.compress.models.mobilenet3d import (MobileNet3D, inflate_from_2d, mobilenet3d_from_state,
                                                  mobilenet3d_inflated)
from jetforge.compress.models.mobilenet_v2 import mobilenet_v2


@pytest.fixture(scope="module")
def imagenet_state(mobilenet_weights):
    return torch.load(str(mobilenet_weights), map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def vtest_image():
    from jetforge.assets import asset_path

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    ok, frame = cap.read()
    cap.release()
    rgb = cv2.resize(frame[100:400, 200:500], (64, 64), interpolation=cv2.INTER_AREA)[:, :, ::-1] / 255.0
    x = (rgb - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32))[None]


def test_inflated_net_on_a_still_clip_is_the_imagenet_net(mobilenet_weights, imagenet_state, vtest_image):
    """Centre-frame inflation: a clip of one repeated real frame gives the 2D network's ImageNet logits."""
    net2d = mobilenet_v2()
    net2d.load_state_dict(imagenet_state)
    net3d = mobilenet3d_inflated(1000, weights=str(mobilenet_weights))
    clip = vtest_image[:, :, None].repeat(1, 1, 4, 1, 1)
    with torch.no_grad():
        ref, got = net2d.eval()(vtest_image), net3d.eval()(clip)
    # the same products summed in another order (plus exact zeros from the off-centre taps): float32 rounding over
    # ~50 layers, relative 1e-6 of the logits' scale (|logits| ~ 10-20) -> 1e-4 absolute is ample and still catches
    # any kernel put at the wrong tap or a missed BatchNorm (those change logits by >> 0.1)
    assert float(ref.abs().max()) > 5
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)
    assert int(got.argmax()) == int(ref.argmax())


def test_inflation_puts_each_2d_kernel_at_the_centre_tap(imagenet_state):
    net = MobileNet3D(4)
    counts = inflate_from_2d(net, imagenet_state)
    assert counts["conv_inflated"] == 52 and counts["classifier"] == 0  # 52 convs in MobileNetV2; a new 4-class head
    dw = net.features[2].conv[1][0].weight  # the first 3x3x3 depthwise conv with a time kernel of 3
    assert tuple(dw.shape) == (96, 1, 3, 3, 3)
    torch.testing.assert_close(dw[:, :, 1], imagenet_state["features.2.conv.1.0.weight"], atol=0, rtol=0)
    assert not dw[:, :, 0].detach().any() and not dw[:, :, 2].detach().any()


def test_time_is_halved_three_times():
    net = MobileNet3D(4, width_mult=0.25).eval()  # a narrow copy: the strides do not depend on the width
    with torch.no_grad():
        for frames, t_out in ((8, 1), (16, 2), (4, 1)):
            assert tuple(net.features(torch.zeros(1, 3, frames, 32, 32)).shape) == (1, 1280, t_out, 1, 1)
        assert tuple(net(torch.zeros(2, 3, 8, 32, 32)).shape) == (2, 4)


@pytest.mark.slow
def test_a_pruned_student_rebuilds_from_its_state_dict():
    from jetforge.compress.prune import prune

    torch.manual_seed(0)
    teacher = MobileNet3D(4, width_mult=0.5).eval()  # narrow and small: the rebuild does not depend on the size
    example = torch.randn(1, 3, 4, 32, 32)
    teacher_stem = teacher.features[0][0].out_channels
    result = prune(teacher, example, flops_reduction=2.5, protect_stem=False)
    student = result.model.eval()
    totals = result.report.to_dict()["totals"]
    assert totals["macs_before"] / totals["macs_after"] >= 2.5
    assert student.features[0][0].out_channels < teacher_stem  # the stem was pruned too
    rebuilt = mobilenet3d_from_state(student.state_dict()).eval()
    x = torch.randn(2, 3, 4, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), student(x), atol=0, rtol=0)  # same modules, same weights: bit-exact


def test_state_dict_of_another_model_is_refused():
    from jetforge.errors import ModelError

    with pytest.raises(ModelError, match="not a MobileNet3D"):
        mobilenet3d_from_state({"fc.weight": torch.zeros(2, 2)})
