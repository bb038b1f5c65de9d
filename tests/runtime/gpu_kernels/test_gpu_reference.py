"""The float64 reference of the GPU preprocessing kernel, held to OpenCV and to the input contract's CPU path.

Runs on any CPU: the reference is what the kernel is tested against on a GPU
(test_kernels_gpu.py), so here it is tied to independent implementations: OpenCV's own NV12
conversion and cv2.resize (fixed-point uint8 arithmetic), and ``Preprocess.apply`` on real frames
of the bundled clips converted to NV12.
"""

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.kernels.color import BT601_LIMITED, BT709_LIMITED, ColorSpec
from jetforge.runtime.cuda.kernels.plan import check_input_format, check_out_dtype, plan_for
from jetforge.runtime.cuda.kernels.reference import (bgr_to_nv12, nv12_to_rgb, reference_nv12, reference_packed,
                                                     resize_reference)
from jetforge.runtime.inputs import ClipContract, Preprocess

cv2 = pytest.importorskip("cv2")

# OpenCV's COLOR_YUV2RGB_NV12 (modules/imgproc/src/color_yuv.simd.hpp): BT.601 limited range in 20-bit
# fixed point, R = (CY*(Y-16) + CVR*(V-128) + 2^19) >> 20, saturated; likewise G (CUG, CVG) and B (CUB).
CV_SHIFT = 20
CV_COEFFS = {"cy": 1220542, "cbu": 2116026, "cgu": -409993, "cgv": -852492, "crv": 1673527}

CONTRACTS = {
    "crop224_rgb": Preprocess(),
    "stretch300_bgr": Preprocess(height=300, width=300, resize="stretch", color="bgr", scale=1.0,
                                 mean=(127.5,), std=(127.5,)),
    "letterbox320_rgb": Preprocess(height=320, width=320, resize="letterbox", mean=(0.0,), std=(1.0,)),
    "crop_gray": Preprocess(height=96, width=128, color="gray", mean=(0.5,), std=(0.25,)),
}


def opencv_colour_bound() -> float:
    """Largest |OpenCV - exact| per channel in grey levels: 0.5 for OpenCV's rounding plus, per term, the
    error of its rounded coefficient times the largest operand (|Y - 16| <= 239, |U - 128|, |V - 128| <= 128)."""
    k = BT601_LIMITED.coefficients()
    d = {name: abs(v / 2.0 ** CV_SHIFT - getattr(k, name)) for name, v in CV_COEFFS.items()}
    y = d["cy"] * 239
    return 0.5 + max(y + d["crv"] * 128, y + (d["cgu"] + d["cgv"]) * 128, y + d["cbu"] * 128)


# cv2.resize INTER_LINEAR on uint8: 0.5 for the final rounding, <= 0.25 for the 11-bit weights (two passes, two
# weights each rounded by <= 1/4096, on values <= 255), and <= 0.25 for the SIMD vertical pass, which shifts
# rows right by 4 bits and keeps the high half of 16-bit products (truncations); seen: 0.75.
RESIZE_BOUND = 1.0
# cv2.COLOR_BGR2GRAY rounds to uint8 once more (weights in 14-bit fixed point: < 0.05 extra).
GRAY_BOUND = 0.55


def nv12_frames(frames, count=2):
    return [bgr_to_nv12(frames[i]) for i in sorted(frames)[:count]]


def test_colour_matrices_are_the_standards():
    """Derived from Kr/Kb, the coefficients equal the standards' published 3-decimal matrices."""
    published = {
        ("bt601", "limited"): (1.164, 1.596, -0.392, -0.813, 2.017),
        ("bt709", "limited"): (1.164, 1.793, -0.213, -0.533, 2.112),
        ("bt601", "full"): (1.0, 1.402, -0.344, -0.714, 1.772),
        ("bt709", "full"): (1.0, 1.5748, -0.1873, -0.4681, 1.8556),
    }
    for (matrix, rng), want in published.items():
        k = ColorSpec(matrix, rng).coefficients()
        assert np.allclose((k.cy, k.crv, k.cgu, k.cgv, k.cbu), want, atol=6e-4), (matrix, rng)
        assert k.y_offset == (16.0 if rng == "limited" else 0.0)


def test_grey_maps_to_grey_in_every_matrix():
    """U = V = 128 is colourless: R = G = B, and limited-range white (235) is 255."""
    y = np.array([[16, 235], [126, 80]], np.uint8)
    uv = np.full((1, 2), 128, np.uint8)
    for spec in (BT601_LIMITED, BT709_LIMITED, ColorSpec("bt709", "full")):
        rgb = nv12_to_rgb(y, uv, spec)
        assert np.allclose(rgb[..., 0], rgb[..., 1]) and np.allclose(rgb[..., 1], rgb[..., 2])
    assert nv12_to_rgb(y, uv, BT601_LIMITED)[0, 1, 0] == pytest.approx(255.0)
    assert nv12_to_rgb(y, uv, ColorSpec("bt601", "full"))[1, 0, 0] == pytest.approx(126.0)


def test_reference_nv12_equals_opencv_conversion(bikes_frames):
    bound = opencv_colour_bound()
    assert 0.6 < bound < 0.7  # the bound itself: OpenCV's coefficients are the standard's to ~1e-3
    for y, uv in nv12_frames(bikes_frames, 3):
        opencv = cv2.cvtColor(np.concatenate([y, uv]), cv2.COLOR_YUV2RGB_NV12).astype(np.float64)
        ours = nv12_to_rgb(y, uv, BT601_LIMITED)
        assert np.abs(ours - opencv).max() <= bound


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_reference_resize_equals_cv2_resize_and_the_contract_geometry(bikes_frames, name):
    """The reference's bilinear samples, crop and letterbox equal Preprocess.resize_crop (cv2.resize) to 1 level."""
    contract = CONTRACTS[name]
    for index in sorted(bikes_frames)[:2]:
        rgb = cv2.cvtColor(bikes_frames[index], cv2.COLOR_BGR2RGB)
        for frame in (rgb, rgb[:200, 101:501]):  # the clip's 640x272 and an odd-sized crop of it
            frame = np.ascontiguousarray(frame)
            plan = plan_for(contract, frame.shape[:2])
            ours = resize_reference(frame.astype(np.float64), plan)
            assert np.abs(ours - contract.resize_crop(frame).astype(np.float64)).max() <= RESIZE_BOUND


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_reference_end_to_end_equals_the_cpu_path(bikes_frames, name):
    """NV12 -> tensor by the reference == OpenCV NV12 -> BGR, then the contract's own apply(), within the bounds."""
    contract = CONTRACTS[name]
    frames = nv12_frames(bikes_frames, 2)
    ours = reference_nv12(frames, contract, BT601_LIMITED)
    cpu = np.stack([contract.apply(cv2.cvtColor(np.concatenate([y, uv]), cv2.COLOR_YUV2BGR_NV12)) for y, uv in frames])
    assert ours.shape == cpu.shape == (2,) + contract.input_shape
    levels = opencv_colour_bound() + RESIZE_BOUND + (GRAY_BOUND if contract.color == "gray" else 0.0)
    gain = max(abs(contract.scale / s) for s in contract.std)  # output units per grey level
    assert np.abs(ours - cpu).max() <= levels * gain + 1e-5


def test_packed_reference_equals_the_cpu_path(bikes_frames):
    contract = CONTRACTS["crop224_rgb"]
    frames = [bikes_frames[i] for i in sorted(bikes_frames)[:2]]
    gain = contract.scale / min(contract.std)
    cpu = contract.batch(frames)
    assert np.abs(reference_packed(frames, contract, "bgr") - cpu).max() <= RESIZE_BOUND * gain + 1e-5
    rgb = [np.ascontiguousarray(f[:, :, ::-1]) for f in frames]
    assert np.abs(reference_packed(rgb, contract, "rgb") - cpu).max() <= RESIZE_BOUND * gain + 1e-5


def test_plan_of_each_geometry_by_hand():
    # 640x272 to 224 centre crop (0.875): short side 272 -> 256, s = 256/272, 640 * s = 602.35 -> 602
    crop = plan_for(Preprocess(), (272, 640))
    assert crop.region == (0, 0, 224, 224) and crop.shift == ((602 - 224) // 2, (256 - 224) // 2)
    assert crop.scale == pytest.approx((640 / 602, 272 / 256))
    # letterbox 320x320: s = 0.5, 320x136 pasted at y = (320 - 136) / 2 = 92
    box = plan_for(Preprocess(height=320, width=320, resize="letterbox"), (272, 640))
    assert box.region == (0, 92, 320, 228) and box.shift == (0, -92) and box.scale == (2.0, 2.0)
    inside, _ = box.sample_positions("y")
    assert inside.sum() == 136 and not inside[91] and inside[92] and inside[227] and not inside[228]
    stretch = plan_for(Preprocess(height=300, width=300, resize="stretch"), (720, 1280))
    assert stretch.region == (0, 0, 300, 300) and stretch.scale == pytest.approx((1280 / 300, 720 / 300))
    assert stretch.output_shape(4) == (4, 3, 300, 300)
    assert plan_for(Preprocess(layout="nhwc"), (720, 1280)).output_shape(2) == (2, 224, 224, 3)


def test_what_the_kernel_cannot_serve_is_one_clear_error():
    with pytest.raises(ConfigError, match="image input contract"):
        plan_for(ClipContract(), (272, 640))
    with pytest.raises(ConfigError, match="interpolation"):
        plan_for(Preprocess(interpolation="area"), (272, 640))
    with pytest.raises(ConfigError, match="colour matrix"):
        ColorSpec("bt2020")
    with pytest.raises(ConfigError, match="range"):
        ColorSpec("bt709", "studio")
    with pytest.raises(ConfigError, match="frame format"):
        check_input_format("yuyv")
    with pytest.raises(ConfigError, match="float32 or float16"):
        check_out_dtype("int8")
