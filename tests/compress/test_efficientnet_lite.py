"""The pure-torch EfficientNet-Lite0 with Google's real weights: strict loading, real photos, ONNX export."""

import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.models import PRETRAINED, load_pretrained  # noqa: E402
from jetforge.compress.models.efficientnet_lite import EfficientNetLite, same_padding  # noqa: E402
from jetforge.runtime.inputs import IMAGENET_TFLITE  # noqa: E402

torch.set_num_threads(1)

# hand-labelled opencv-doc photos (the smoke set of benchmarks/int8/int8_accuracy.py)
SMOKE = {"squirrel_cls.jpg": "fox squirrel", "baboon.jpg": "baboon", "orange.jpg": "orange",
         "messi5.jpg": "soccer ball"}


@pytest.fixture(scope="module")
def weights():
    from jetforge.assets import asset_path

    spec = PRETRAINED["efficientnet_lite0"]
    return asset_path(spec.asset, spec.filename)


@pytest.fixture(scope="module")
def pretrained(weights):
    return load_pretrained("efficientnet_lite0", weights)


def test_architecture_and_tf_same_padding():
    model = EfficientNetLite()
    assert sum(p.numel() for p in model.parameters()) == 4_652_008
    assert len(model._blocks) == 16
    assert not any("_se_" in name for name in model.state_dict())  # Lite: no squeeze-and-excitation
    assert same_padding(224, 3, 2) == (0, 1) and same_padding(112, 5, 2) == (1, 2) and same_padding(56, 3, 1) == (1, 1)
    assert isinstance(model._conv_stem.static_padding, torch.nn.ZeroPad2d)


def test_weights_load_strictly(pretrained, weights):
    state = torch.load(str(weights), map_location="cpu", weights_only=True)
    assert len(state) == 296 and set(state) == set(pretrained.state_dict())
    assert not pretrained.training
    assert PRETRAINED["efficientnet_lite0"].preprocess == IMAGENET_TFLITE


def test_smoke_set_top1(pretrained):
    import cv2
    from jetforge.assets import asset_path
    from jetforge.apps.labels import load_labels

    labels = load_labels("imagenet")
    x = torch.from_numpy(IMAGENET_TFLITE.batch([cv2.imread(str(asset_path("opencv_samples", f))) for f in SMOKE]))
    with torch.no_grad():
        probs = torch.softmax(pretrained(x), dim=1)
    assert [labels[int(i)] for i in probs.argmax(dim=1)] == list(SMOKE.values())
    assert float(probs[0].max()) > 0.85  # fox squirrel 0.92 (measured when the test was written)


def test_export_matches_torch(pretrained, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import numpy as np
    from jetforge.compress.export import export_onnx

    path = tmp_path / "lite0.onnx"
    sidecar = export_onnx(pretrained, path, (1, 3, 224, 224), model_name="efficientnet_lite0",
                          preprocess=IMAGENET_TFLITE)
    assert sidecar.preprocess == IMAGENET_TFLITE
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = pretrained(x).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": x.numpy()})[0]
    assert np.abs(got - ref).max() < 1e-3
