"""The ``clip`` input kind in RGB (the 3D action model's): real vtest.avi frames against an independent computation."""

import json

import cv2
import numpy as np
import pytest

from jetforge.runtime.inputs import input_contract
from jetforge.runtime.inputs.base import contract_from_dict, contract_to_dict
from jetforge.runtime.inputs.clip import IMAGENET_MEAN, IMAGENET_STD, ClipContract


@pytest.fixture(scope="module")
def vtest_bgr():
    from jetforge.assets import asset_path

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    frames = [cap.read()[1] for _ in range(4)]
    cap.release()
    return frames


def _reference(frames, region, size):
    """Crop by hand (pad with grey 128 where the region leaves the frame), area-resize, BGR->RGB, ImageNet stats."""
    x0, y0, x1, y1 = region
    out = []
    for f in frames:
        h, w = f.shape[:2]
        canvas = np.full((y1 - y0, x1 - x0, 3), 128, np.uint8)
        sx0, sy0, sx1, sy1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
        canvas[sy0 - y0:sy1 - y0, sx0 - x0:sx1 - x0] = f[sy0:sy1, sx0:sx1]
        crop = cv2.resize(canvas, (size, size), interpolation=cv2.INTER_AREA)[:, :, ::-1].astype(np.float64) / 255.0
        out.append((crop - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD))
    return np.stack(out).transpose(3, 0, 1, 2)  # (T, H, W, 3) -> (3, T, H, W)


@pytest.mark.parametrize("box", [(300.0, 200.0, 340.0, 300.0), (740.0, 480.0, 790.0, 590.0)])  # inside / off the edge
def test_rgb_clip_matches_an_independent_crop(vtest_bgr, box):
    contract = ClipContract(window=4, crop_height=48, crop_width=48, color="rgb")
    boxes = np.array([box] * 4)
    x = contract.clip(vtest_bgr, boxes)
    assert x.shape == (3, 4, 48, 48) and x.dtype == np.float32 and contract.input_shape == (3, 4, 48, 48)
    ref = _reference(vtest_bgr, contract.region(boxes), 48)
    # float32 normalisation of uint8 values against float64: |x| < 3, so a few float32 ulps (< 1e-5)
    np.testing.assert_allclose(x, ref, atol=1e-5)
    # the OpenCV path (blobFromImages + one multiply per channel): float32 rounding of the same values
    np.testing.assert_allclose(contract.fused()(vtest_bgr, boxes), x, atol=1e-5)


def test_rgb_sidecar_block_round_trips_and_grey_blocks_stay_as_they_were():
    rgb = ClipContract(window=8, crop_height=112, crop_width=112, color="rgb", fps_trained=10.0)
    block = json.loads(json.dumps(contract_to_dict(rgb)))
    assert block["channel_mean"] == list(IMAGENET_MEAN) and block["color"] == "rgb"
    assert contract_from_dict(block) == rgb
    grey = contract_to_dict(ClipContract())
    assert "channel_mean" not in grey and "channel_std" not in grey and grey["color"] == "gray"


def test_rgb_contract_refuses_grey_frames_and_bad_statistics(vtest_bgr):
    from jetforge.errors import JetforgeError

    contract = ClipContract(window=2, crop_height=16, crop_width=16, color="rgb")
    grey = [cv2.cvtColor(f, cv2.COLOR_BGR2GRAY) for f in vtest_bgr[:2]]
    with pytest.raises(JetforgeError, match="BGR frames"):
        contract.clip(grey, np.array([[10.0, 10.0, 50.0, 90.0]] * 2))
    with pytest.raises(ValueError, match="3 values"):
        ClipContract(color="rgb", channel_mean=(0.5, 0.5))
    with pytest.raises(ValueError, match="color"):
        ClipContract(color="hsv")


def test_input_contract_of_an_rgb_sidecar():
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec

    contract = ClipContract(window=8, crop_height=112, crop_width=112, color="rgb")
    sc = ModelSidecar(task="action", model_name="m", inputs=[TensorSpec("clip", ["batch", 3, 8, 112, 112], "float32")],
                      outputs=[TensorSpec("logits", ["batch", 4], "float32")], labels=list("abcd"), input=contract)
    again = ModelSidecar.from_dict(json.loads(json.dumps(sc.to_dict())))
    assert input_contract(again, "clip") == contract
