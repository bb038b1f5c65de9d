"""The pure-torch MobileNetV2 against torchvision's own, with torchvision's real ImageNet weights."""

import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.models import PRETRAINED, build, load_pretrained  # noqa: E402
from jetforge.compress.models.mobilenet_v2 import MobileNetV2, make_divisible  # noqa: E402
from jetforge.errors import CompressError, InputFileError, ModelError, UnknownNameError  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pretrained(mobilenet_weights):
    return load_pretrained("mobilenet_v2", mobilenet_weights)


def test_architecture_matches_the_paper():
    model = MobileNetV2()
    assert sum(p.numel() for p in model.parameters()) == 3_504_872
    assert len(model.features) == 19 and model.last_channel == 1280
    assert make_divisible(32 * 0.75) == 24 and make_divisible(1280 * 1.4) == 1792


def test_weights_load_strictly_and_model_is_in_eval_mode(pretrained, mobilenet_weights):
    assert not pretrained.training
    state = torch.load(str(mobilenet_weights), map_location="cpu", weights_only=True)
    assert list(state) == list(pretrained.state_dict())  # same keys, same order
    assert "features.18.0.weight" in state and "classifier.1.bias" in state


def test_same_output_as_torchvision(pretrained, mobilenet_weights):
    tv = pytest.importorskip("torchvision")
    reference = tv.models.mobilenet_v2()
    reference.load_state_dict(torch.load(str(mobilenet_weights), map_location="cpu", weights_only=True))
    reference.eval()
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(pretrained(x), reference(x))


def test_real_frame_top1(pretrained, bikes_frames):
    from jetforge.runtime.inputs import IMAGENET_TORCHVISION
    from jetforge.apps.labels import load_labels

    x = torch.from_numpy(IMAGENET_TORCHVISION.apply(bikes_frames[5])[None])
    with torch.no_grad():
        probs = torch.softmax(pretrained(x), dim=1)[0]
    assert load_labels("imagenet")[int(probs.argmax())] == "switch" and float(probs.max()) > 0.8


def test_wrong_weights_are_refused(tmp_path, mobilenet_weights):
    with pytest.raises(InputFileError, match="does not exist"):
        load_pretrained("mobilenet_v2", tmp_path / "missing.pth")
    other = tmp_path / "other.pth"
    torch.save(build("mobilenet_v2", num_classes=10).state_dict(), str(other))
    with pytest.raises(ModelError, match="not the expected mobilenet_v2 weights"):
        load_pretrained("mobilenet_v2", other)
    with pytest.raises(CompressError, match="do not fit the mobilenet_v2 architecture"):
        load_pretrained("mobilenet_v2", other, verify_hash=False)
    with pytest.raises(UnknownNameError, match="did you mean 'mobilenet_v2'"):
        load_pretrained("mobilenetv2", mobilenet_weights)
    assert PRETRAINED["mobilenet_v2"].asset == "mobilenet_v2_imagenet"
