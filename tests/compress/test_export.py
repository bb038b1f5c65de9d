"""ONNX export: the exported MobileNetV2 computes what PyTorch computes, and carries a complete sidecar."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from jetforge.compress.export import export_onnx  # noqa: E402
from jetforge.compress.models import load_pretrained  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402
from jetforge.fileio import sha256_file  # noqa: E402
from jetforge.runtime.preprocess import IMAGENET_TORCHVISION  # noqa: E402
from jetforge.runtime.session import open_session  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar, sidecar_path  # noqa: E402

torch.set_num_threads(1)


def test_onnx_matches_pytorch_on_real_frames(mobilenet_onnx, mobilenet_weights, bikes_frames):
    model = load_pretrained("mobilenet_v2", mobilenet_weights)
    batch = IMAGENET_TORCHVISION.batch([bikes_frames[i] for i in (5, 30, 140)])
    with torch.no_grad():
        expected = model(torch.from_numpy(batch)).numpy()
    with open_session(mobilenet_onnx, threads=1) as s:
        got = s.infer({"input": batch})["logits"]
    assert np.abs(got - expected).max() < 1e-4
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_onnx_file_is_opset_17_with_a_named_dynamic_batch(mobilenet_onnx):
    m = onnx.load(str(mobilenet_onnx))
    onnx.checker.check_model(m)
    assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
    dims = m.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 224, 224]
    assert m.graph.output[0].name == "logits"


def test_sidecar_records_task_labels_preprocessing_and_provenance(mobilenet_onnx):
    sc = read_sidecar(mobilenet_onnx)
    assert sc.task == "classify" and sc.model_name == "mobilenet_v2"
    assert sc.content_sha256 == sha256_file(mobilenet_onnx)
    assert sc.preprocess == IMAGENET_TORCHVISION
    assert len(sc.labels) == 1000 and sc.labels[671] == "mountain bike"
    assert sc.inputs[0].shape == ["batch", 3, 224, 224] and sc.outputs[0].shape == ["batch", 1000]
    made = sc.produced_by
    assert made["stage"] == "export" and made["opset"] == 17 and made["tool"] == "jetforge"
    assert made["weights_sha256"].startswith("b0353104")


class _Broken(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("boom")


def test_failed_export_leaves_no_file(tmp_path):
    out = tmp_path / "broken.onnx"
    with pytest.raises(CompressError, match="does not run on an input of shape"):
        export_onnx(_Broken(), out, (1, 3, 8, 8))
    assert list(tmp_path.iterdir()) == []


def test_small_model_export_static_batch_and_label_check(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    with pytest.raises(CompressError, match="4 classes but 3 labels"):
        export_onnx(model, tmp_path / "tiny.onnx", (1, 3, 16, 16), labels=["a", "b", "c"])
    assert not (tmp_path / "tiny.onnx").exists()
    sc = export_onnx(model, tmp_path / "tiny.onnx", (2, 3, 16, 16), labels=list("abcd"), dynamic_batch=False)
    assert sc.inputs[0].shape == [2, 3, 16, 16]
    assert json.loads(sidecar_path(tmp_path / "tiny.onnx").read_text())["labels"] == list("abcd")
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    with open_session(tmp_path / "tiny.onnx", threads=1) as s:
        got = s.infer({"input": x})["logits"]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(torch.from_numpy(x)).numpy(), atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.onnx", "tiny.onnx.json"]  # no temp files left
