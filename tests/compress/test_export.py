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
from jetforge.runtime.inputs import IMAGENET_TORCHVISION  # noqa: E402
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


# --- transformers: PyTorch's fused attention path must not reach the exporter ------------------------------------
def _small_vit():
    from tests.compress.test_prune_flops import small_vit

    torch.manual_seed(0)
    return small_vit().eval()


def _onnx_vs_torch(model, path, shape, batch=2):
    """Max |ONNX Runtime - PyTorch| over a seeded random batch, relative to the output's magnitude."""
    x = np.random.default_rng(0).standard_normal((batch,) + tuple(shape[1:])).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with open_session(path, threads=1) as s:
        got = s.infer({"input": x})["logits"]
    assert got.shape == expected.shape
    return float(np.abs(got - expected).max()) / max(1.0, float(np.abs(expected).max()))


def test_vit_exports_with_plain_attention_and_matches_pytorch(tmp_path):
    """Under no_grad in eval mode MultiheadAttention would take the fused op ONNX lacks; export turns that off.

    Tolerance: float32 dot products of length <= 64 summed in another order differ by ~1e-6 relative per
    layer; 1e-4 of the output scale leaves a wide margin over two blocks and the head.
    """
    model = _small_vit()
    path = tmp_path / "vit.onnx"
    export_onnx(model, path, (1, 3, 32, 32), task="classify")
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"MatMul", "Softmax", "LayerNormalization"} <= ops
    assert torch.backends.mha.get_fastpath_enabled()  # the global setting is restored
    assert _onnx_vs_torch(model, path, (1, 3, 32, 32)) < 1e-4


def test_pruned_vit_exports_and_matches_pytorch(tmp_path):
    from jetforge.compress.prune import prune

    model = _small_vit()
    result = prune(model, torch.randn(1, 3, 32, 32), ratio=0.5)
    assert result.report.after.params < result.report.before.params
    path = tmp_path / "vit_pruned.onnx"
    export_onnx(model, path, (1, 3, 32, 32))
    assert _onnx_vs_torch(model, path, (1, 3, 32, 32)) < 1e-4


@pytest.mark.slow
def test_real_vit_b_16_exports_and_matches_pytorch(tmp_path):
    """torchvision's vit_b_16 itself (random weights, a random head: torchvision zeroes it, which would make the
    comparison trivial).  Budget: about 40 s of CPU on 2 cores (86M parameters, export and two ORT runs)."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.vit_b_16().eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    path = tmp_path / "vit_b_16.onnx"
    export_onnx(model, path, (1, 3, 224, 224))
    # 12 blocks of dot products up to 3072 long: ~1e-5 relative float32 reordering noise; 1e-4 bound.
    assert _onnx_vs_torch(model, path, (1, 3, 224, 224), batch=1) < 1e-4


class _Histogram(torch.nn.Module):
    def forward(self, x):
        return torch.histc(x, bins=4)[None]


def test_an_operator_onnx_lacks_is_one_error_naming_it_without_the_ir_dump(tmp_path, capfd):
    out = tmp_path / "h.onnx"
    with pytest.raises(CompressError) as info:
        export_onnx(_Histogram(), out, (1, 3, 8, 8))
    message = str(info.value)
    assert "cannot translate operator aten::histc (opset 17)" in message and "fix:" in message
    assert len(message.splitlines()) == 1
    # the TorchScript exporter prints its whole IR graph to stdout on failure; jetforge keeps it for --debug
    assert "graph(" not in capfd.readouterr().out
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CompressError, match="operator aten::scaled_dot_product_attention \\(opset 13\\)"):
        export_onnx(_small_vit(), out, (1, 3, 32, 32), opset=13)
