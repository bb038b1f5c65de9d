"""The model-input contract: kinds from the registry, built from sidecars of both formats, numpy and fused paths.

References are independent numpy computations written out here (crop boxes, pyramid sizes and the
(x - 127.5) / 128 normalisation by hand).  Tolerances: the fused OpenCV paths compute the same affine map
in another order ((x - m) * k instead of x * a + b, or (x / 255 - m) / s), so they differ from the numpy
path by float32 rounding only: a few units in the last place of values below 4 in magnitude, well under 1e-5.
"""

import json

import numpy as np
import pytest

from jetforge.errors import ConfigError, ModelError, UnknownNameError
from jetforge.runtime.inputs import (INPUT_KINDS, ClipContract, ImagePyramid, InputContract, Preprocess,
                                     contract_from_dict, contract_to_dict, input_contract)
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, read_sidecar, write_sidecar

FUSED_ATOL = 1e-5


def _sidecar(**kwargs):
    base = dict(task="other", model_name="m", inputs=[TensorSpec("x", [1, 3, 8, 8])], outputs=[TensorSpec("y", [1])])
    base.update(kwargs)
    return ModelSidecar(**base)


def test_the_three_kinds_are_registered_and_round_trip():
    assert INPUT_KINDS.names()[:3] == ["image", "clip", "image_pyramid"]
    for contract in (Preprocess(height=32, width=48, resize="letterbox"), ClipContract(window=4, crop_height=16),
                     ImagePyramid(min_size=40.0, factor=0.5)):
        block = contract_to_dict(contract)
        assert block["kind"] == contract.kind and INPUT_KINDS.get(contract.kind) is type(contract)
        assert contract_from_dict(json.loads(json.dumps(block))) == contract
    with pytest.raises(UnknownNameError, match="image_pyramid"):
        contract_from_dict({"kind": "image_pyramd"})  # did-you-mean
    with pytest.raises(ConfigError, match="min_sise"):
        contract_from_dict({"kind": "image_pyramid", "min_sise": 20})  # unknown fields are refused


def test_input_contract_picks_the_kind_and_names_what_is_missing():
    pre = Preprocess(height=8, width=8)
    assert input_contract(_sidecar(preprocess=pre), "image") is pre
    with pytest.raises(ModelError, match="the action app needs a model with clip input.*image input"):
        input_contract(_sidecar(preprocess=pre), "clip", purpose="the action app")
    with pytest.raises(ModelError, match="calibration cannot prepare its inputs"):
        input_contract(_sidecar(), purpose="calibration")
    with pytest.raises(ModelError, match="two different input contracts"):
        _sidecar(preprocess=pre, input=Preprocess(height=16, width=16))


def test_format_1_sidecars_still_load_and_are_written_as_format_2(tmp_path):
    """The three format-1 places of the contract (preprocess, extra.clip, MTCNN's nominal PNet block)."""
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not checked here")
    common = {"format": 1, "model_name": "m", "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}],
              "outputs": [{"name": "y", "shape": [1]}], "labels": [], "content_sha256": "", "produced_by": {}}
    pre = {"height": 12, "width": 12, "resize": "stretch", "color": "rgb", "scale": 1.0, "mean": [127.5],
           "std": [128.0], "interpolation": "area"}
    clip = {"window": 6, "crop_height": 32, "crop_width": 16, "margin": 1.5, "gray_mean": 0.4, "gray_std": 0.2,
            "fps_trained": 12.5, "stride_trained": 2, "color": "gray", "region": "a description, not a field"}
    cases = [
        (dict(common, task="classify", preprocess=pre, extra={}), Preprocess(height=12, width=12, resize="stretch",
                                                                            scale=1.0, mean=(127.5,), std=(128.0,),
                                                                            interpolation="area")),
        (dict(common, task="action", preprocess=None, extra={"clip": clip, "label_rule": {}}),
         ClipContract(window=6, crop_height=32, crop_width=16, margin=1.5, gray_mean=0.4, gray_std=0.2,
                      fps_trained=12.5, stride_trained=2)),
        (dict(common, task="detect", preprocess=pre, extra={"family": "mtcnn", "stage": "pnet"}),
         ImagePyramid(window=12, min_size=20.0, factor=0.709, mean=(127.5,), std=(128.0,))),
    ]
    for data, expected in cases:
        (tmp_path / "m.onnx.json").write_text(json.dumps(data))
        sc = read_sidecar(model)
        assert sc.input == expected and input_contract(sc, expected.kind) == expected
        assert (sc.preprocess is not None) == (expected.kind == "image")
        assert "clip" not in sc.extra  # moved into the contract, other extra keys kept
        write_sidecar(model, sc)
        written = json.loads((tmp_path / "m.onnx.json").read_text())
        assert written["format"] == 2 and "preprocess" not in written
        assert written["input"] == contract_to_dict(expected)
        assert read_sidecar(model).input == expected
    with pytest.raises(ModelError, match="reads formats 1, 2"):
        (tmp_path / "m.onnx.json").write_text(json.dumps(dict(common, task="other", format=3)))
        read_sidecar(model)


def test_clip_numpy_path_against_hand_computed_crops():
    rng = np.random.default_rng(3)
    grays = [rng.integers(0, 256, (120, 160), dtype=np.uint8) for _ in range(4)]
    c = ClipContract(window=4, crop_height=20, crop_width=10, margin=1.0, gray_mean=0.5, gray_std=0.25)
    # boxes whose union is 20x40 at (30, 40): already at the 1:2 aspect, margin 1 -> that region exactly
    boxes = np.array([[30, 40, 45, 80], [35, 40, 50, 70], [30, 50, 50, 80], [32, 45, 48, 75]], float)
    assert c.region(boxes) == (30, 40, 50, 80)
    out = c.clip(grays, boxes)
    # a 2x area downscale of 40x20 -> 20x10 is the mean of each 2x2 block (cv2.INTER_AREA at an integer factor)
    blocks = np.stack([g[40:80, 30:50].astype(np.float64).reshape(20, 2, 10, 2).mean(axis=(1, 3)) for g in grays])
    expected = (np.floor(blocks + 0.5) / 255.0 - 0.5) / 0.25  # INTER_AREA on uint8: (sum + 2) >> 2, half up
    assert out.shape == (4, 20, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_clip_fused_path_matches_the_numpy_path(bikes_frames):
    import cv2

    c = ClipContract()
    grays = [cv2.cvtColor(f, cv2.COLOR_BGR2GRAY) for f in bikes_frames.values()] * 2
    boxes = np.array([[-20 + 3 * i, 150 + i, 30 + 3 * i, 290 + i] for i in range(8)], float)  # leaves the frame
    np.testing.assert_allclose(c.fused()(grays[:8], boxes), c.clip(grays[:8], boxes), atol=FUSED_ATOL)


def test_pyramid_levels_against_hand_computed_scales_and_normalisation():
    p = ImagePyramid()  # MTCNN: window 12, min 20 px, factor 0.709
    h, w = 72, 96
    scales, s, side = [], 12.0 / 20.0, min(h, w) * 12.0 / 20.0
    while side >= 12:
        scales.append(s)
        s, side = s * 0.709, side * 0.709
    assert p.scales(h, w) == scales and len(scales) == 4
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    levels = p.levels(image)
    first = levels[0][1]
    assert first.shape == (1, 3, int(h * 0.6 + 1), int(w * 0.6 + 1)) and first.dtype == np.float32
    # level 0 of an RGB copy of a BGR frame: area resampling is exact (tests/apps/test_faces.py checks it
    # against torch); here the colour order and (x - 127.5) / 128 are checked by hand at one output pixel
    from jetforge.runtime.inputs import area_resize

    rgb = area_resize(image[:, :, ::-1], first.shape[2], first.shape[3])
    np.testing.assert_array_equal(first[0], ((rgb - np.float32(127.5)) / np.float32(128.0)).transpose(2, 0, 1))
    assert ImagePyramid().with_min_size(40.0).scales(h, w)[0] == pytest.approx(0.3)


def test_pyramid_fused_path_has_the_numpy_paths_levels_and_normalisation(bikes_frames):
    import cv2

    p = ImagePyramid(min_size=60.0)
    frame = bikes_frames[30]
    fused, numpy_path = p.fused()(frame), p.levels(frame)
    assert [s for s, _ in fused] == [s for s, _ in numpy_path]
    assert [x.shape for _, x in fused] == [x.shape for _, x in numpy_path]
    rgb = frame[:, :, ::-1]
    for _, x in fused:  # OpenCV's own area resize, normalised by hand: the blob parameters are right
        level = cv2.resize(np.ascontiguousarray(rgb), (x.shape[3], x.shape[2]), interpolation=cv2.INTER_AREA)
        np.testing.assert_allclose(x[0], ((level - 127.5) / 128.0).transpose(2, 0, 1), atol=FUSED_ATOL)


def test_a_new_kind_is_one_class_and_one_registration():
    """Where to add an input kind (docs/architecture.md): a dummy kind, registered, read from a sidecar."""
    from dataclasses import dataclass

    @INPUT_KINDS.register("test_spectrogram", summary="audio -> mel spectrogram (a test dummy)")
    @dataclass(frozen=True)
    class Spectrogram(InputContract):
        bins: int = 64
        kind = "test_spectrogram"

        def to_dict(self):
            return {"bins": self.bins}

    try:
        sc = ModelSidecar.from_dict({"format": 2, "task": "other", "model_name": "a", "outputs": [],
                                     "inputs": [{"name": "x", "shape": [1, 64]}],
                                     "input": {"kind": "test_spectrogram", "bins": 80}})
        assert input_contract(sc, "test_spectrogram") == Spectrogram(bins=80)
        assert ("test_spectrogram", "audio -> mel spectrogram (a test dummy)") in INPUT_KINDS.summaries()
    finally:
        INPUT_KINDS.remove("test_spectrogram")
