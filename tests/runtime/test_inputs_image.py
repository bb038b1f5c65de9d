"""The image input kind (Preprocess) against a hand-computed numpy reference, on a real video frame."""

import numpy as np
import pytest

from jetforge.runtime.inputs import IMAGENET_TFLITE, IMAGENET_TORCHVISION, Preprocess

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float64)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float64)


def reference(image_bgr: np.ndarray, top: int, left: int) -> np.ndarray:
    """Centre crop 224x224 at (top, left), BGR->RGB, /255, (x-mean)/std, HWC->CHW: numpy only."""
    crop = image_bgr[top:top + 224, left:left + 224, ::-1].astype(np.float64) / 255.0
    return ((crop - MEAN) / STD).transpose(2, 0, 1)


def test_imagenet_preprocess_matches_numpy_when_no_resize_is_needed():
    # Short side 256 = 224 / 0.875: the resize is the identity, so the reference needs no interpolation.
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, size=(256, 320, 3), dtype=np.uint8)
    out = IMAGENET_TORCHVISION.apply(image)
    assert out.shape == (3, 224, 224) and out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(out, reference(image, top=16, left=48), atol=1e-5)


def test_imagenet_preprocess_on_a_real_frame(bikes_frames):
    import cv2

    frame = bikes_frames[5]  # 640x272: short side 272 -> 256, long side 640 -> 602
    assert frame.shape == (272, 640, 3)
    resized = cv2.resize(frame, (602, 256), interpolation=cv2.INTER_LINEAR)
    out = IMAGENET_TORCHVISION.apply(frame)
    np.testing.assert_allclose(out, reference(resized, top=16, left=189), atol=1e-5)
    plan = IMAGENET_TORCHVISION.geometry(frame.shape[:2])
    # The network's top-left pixel comes from the frame's centre square.
    x, y = plan.to_image(0, 0)
    assert x == pytest.approx(189 * 640 / 602) and y == pytest.approx(16 * 272 / 256)


def test_tflite_style_constants_and_nhwc():
    pre = Preprocess(scale=1.0, mean=(127.0,), std=(128.0,), layout="nhwc", crop_fraction=1.0)
    image = np.full((224, 224, 3), (0, 127, 255), dtype=np.uint8)  # B, G, R
    out = pre.apply(image)
    assert out.shape == (224, 224, 3)
    np.testing.assert_allclose(out[0, 0], [(255 - 127) / 128.0, 0.0, (0 - 127) / 128.0], atol=1e-6)  # R, G, B


def test_fused_opencv_path_matches_the_numpy_path(bikes_frames):
    """Two OpenCV calls (resize, blobFromImageWithParams) = apply() to float32 rounding (x*a+b vs (x-m)*k)."""
    modes = [IMAGENET_TORCHVISION, IMAGENET_TFLITE, Preprocess(height=300, width=300, resize="stretch", color="bgr",
                                                              scale=2.0 / 255.0, mean=(1.0,), std=(1.0,))]
    for p in modes:
        fused = p.fused()
        assert fused.fused
        for frame in bikes_frames.values():
            np.testing.assert_allclose(fused(frame), p.apply(frame), atol=1e-5)
    for p in (Preprocess(resize="letterbox"), Preprocess(color="gray", mean=(0.5,), std=(0.25,)),
              Preprocess(layout="nhwc"), Preprocess(dtype="float16")):  # not expressible: falls back to apply
        fused = p.fused()
        assert not fused.fused
        frame = bikes_frames[5]
        np.testing.assert_array_equal(fused(frame), p.apply(frame))
