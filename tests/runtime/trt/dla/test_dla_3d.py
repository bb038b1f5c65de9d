"""DLA truth for clip (3-D) models: the 2D-only rules on 5-D tensors, GPU<->DLA transitions, and time folding.

Small graphs are built with ``onnx.helper``; the (2+1)D network is a real PyTorch module exported by the
TorchScript exporter, run in ONNX Runtime before and after the rewrite.
"""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.errors import ModelError  # noqa: E402
from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx  # noqa: E402
from jetforge.runtime.tensorrt.dla.facts import time_fold_kind  # noqa: E402
from jetforge.runtime.tensorrt.dla.fold_time import check_foldable, fold_for_dla, fold_time  # noqa: E402
from jetforge.runtime.tensorrt.dla.graph import OnnxGraph  # noqa: E402
from jetforge.runtime.tensorrt.dla.rules import RULES_BY_ID, SRC_2D_ONLY  # noqa: E402

ORIN = {"dla_version": "2.0", "tensorrt_version": "10.3.0"}


def _model(nodes, inputs, outputs=("y",), inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _device(analysis, op):
    return [l for l in analysis.layers if l.onnx_op == op][0]


# ------------------------------------------------------------------ the 2D-only rules on 5-D tensors
@pytest.mark.parametrize("shape,ok", [([1, 8, 16, 16], True), ([1, 8, 4, 16, 16], False)])
def test_per_element_layers_run_on_dla_for_4d_and_not_for_5d(shape, ok):
    c = shape[1]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"])]
    inits = [(n, np.ones(c)) for n in ("s", "b", "m", "v")]
    analysis = analyze_onnx(_model(nodes, [("x", shape)], inits=inits), **ORIN)
    for op, rule in (("BatchNormalization", "scale.spatial_2d"), ("Relu", "act.spatial_2d"),
                     ("Add", "eltwise.spatial_2d")):
        layer = _device(analysis, op)
        assert layer.device == ("DLA" if ok else "GPU"), (op, layer.rule_ids)
        assert (rule in layer.rule_ids) is (not ok)
        assert layer.time_fold == (None if ok else "per-frame")
    for rule in ("scale.spatial_2d", "act.spatial_2d", "eltwise.spatial_2d", "prelu.spatial_2d"):
        assert RULES_BY_ID[rule].source == SRC_2D_ONLY and not RULES_BY_ID[rule].uncertain


def test_activation_on_a_2d_fc_output_is_not_flagged():
    """Rank <= 4 passes: a ReLU after a fully connected layer (N, C) keeps its old verdict."""
    analysis = analyze_onnx(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 64])]), **ORIN)
    assert _device(analysis, "Relu").device == "DLA"


@pytest.mark.parametrize("kernel,strides,pads,kind", [
    ([1, 3, 3], [1, 1, 1], [0, 1, 1, 0, 1, 1], "spatial"),
    ([1, 1, 1], [1, 2, 2], [0, 0, 0, 0, 0, 0], "spatial"),
    ([1, 3, 3], [2, 1, 1], [0, 1, 1, 0, 1, 1], "time-strided"),
    ([3, 1, 1], [1, 1, 1], [1, 0, 0, 1, 0, 0], "temporal"),
    ([3, 3, 3], [1, 1, 1], [1, 1, 1, 1, 1, 1], "spatiotemporal"),
    ([1, 3, 3], [1, 1, 1], [1, 1, 1, 1, 1, 1], "spatiotemporal"),   # time padding adds zero frames
    ([3, 3], [1, 1], [1, 1, 1, 1], None),
])
def test_time_fold_kind(kernel, strides, pads, kind):
    assert time_fold_kind(kernel, strides, pads) == kind


def test_3d_conv_suggestion_names_the_exact_fold_only_for_1xkxk():
    w1 = np.zeros((4, 4, 1, 3, 3), dtype=np.float32)
    w3 = np.zeros((4, 4, 3, 1, 1), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[1, 3, 3], pads=[0, 1, 1, 0, 1, 1]),
             helper.make_node("Conv", ["a", "w3"], ["y"], kernel_shape=[3, 1, 1], pads=[1, 0, 0, 1, 0, 0])]
    analysis = analyze_onnx(_model(nodes, [("x", [1, 4, 8, 16, 16])], inits=[("w1", w1), ("w3", w3)]), **ORIN)
    assert [l.time_fold for l in analysis.gpu_layers] == ["spatial", "temporal"]
    text = " ".join(analysis.suggestions)
    assert "exactly a 2-D k x k window over the N*T frames" in text and "no per-frame 2-D form" in text


# ------------------------------------------------------------------ transitions
def test_transitions_count_and_bytes_at_the_model_shapes():
    """conv (DLA) -> HardSwish (GPU) -> conv (DLA): input in, out, in, output out: 4 crossings."""
    w = np.zeros((6, 4, 1, 1), dtype=np.float32)
    w2 = np.zeros((5, 6, 1, 1), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("HardSwish", ["a"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["y"], kernel_shape=[1, 1])]
    model = _model(nodes, [("x", [2, 4, 8, 8])], inits=[("w", w), ("w2", w2)])
    for precision, bpe in (("fp16", 2), ("int8", 1)):
        analysis = analyze_onnx(model, precision=precision, **ORIN)
        moves = [(t.tensor, t.source, t.dest, t.bytes) for t in analysis.transitions]
        assert moves == [("x", "GPU", "DLA", 2 * 4 * 8 * 8 * bpe), ("a", "DLA", "GPU", 2 * 6 * 64 * bpe),
                         ("h", "GPU", "DLA", 2 * 6 * 64 * bpe), ("y", "DLA", "GPU", 2 * 5 * 64 * bpe)]
        summary = analysis.to_dict()["summary"]["transitions"]
        assert summary["count"] == 4 and summary["to_dla"] == 2 and summary["to_gpu"] == 2
        assert summary["bytes_total"] == (512 + 768 + 768 + 640) * bpe and summary["bytes_max"] == 768 * bpe


def test_an_all_gpu_model_has_no_transitions():
    analysis = analyze_onnx(_model([helper.make_node("HardSwish", ["x"], ["y"])], [("x", [1, 4, 8, 8])]), **ORIN)
    assert analysis.transitions == []


def test_identity_of_a_constant_is_a_constant_value():
    """Exporters alias shared constants through Identity; a rule or the rewrite must see the value."""
    nodes = [helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Add", ["x", "c2"], ["y"])]
    g = OnnxGraph(_model(nodes, [("x", [1, 2])], inits=[("c", [1.0, 2.0])]))
    assert "c2" in g.constant and g.value("c2").tolist() == [1.0, 2.0]


# ------------------------------------------------------------------ the time-fold rewrite
def _tiny_2plus1d():
    """A small (2+1)D network: 1xkxk spatial convs (foldable), kx1x1 temporal convs (not), ReLU6, HardSwish,
    a 1x2x2 max pool, a pointwise conv, a residual Add inside a folded region, global pool + linear head."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.spatial = nn.Sequential(nn.Conv3d(3, 8, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False),
                                         nn.BatchNorm3d(8), nn.ReLU6())
            self.temporal = nn.Sequential(nn.Conv3d(8, 8, (3, 1, 1), padding=(1, 0, 0)), nn.BatchNorm3d(8),
                                          nn.ReLU())
            self.spatial2 = nn.Sequential(nn.Conv3d(8, 8, (1, 3, 3), padding=(0, 1, 1), groups=8),
                                          nn.Hardswish())
            self.pool = nn.MaxPool3d((1, 2, 2))
            self.pointwise = nn.Conv3d(8, 16, 1)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            x = self.temporal(self.spatial(x))
            x = self.pointwise(self.pool(self.spatial2(x) + x))
            return self.head(x.mean(dim=(2, 3, 4)))

    torch.manual_seed(0)
    model = Tiny().eval()
    with torch.no_grad():   # non-trivial BatchNorm statistics
        for m in model.modules():
            if isinstance(m, nn.BatchNorm3d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return torch, model


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    torch, model = _tiny_2plus1d()
    path = tmp_path_factory.mktemp("fold") / "tiny2p1.onnx"
    torch.onnx.export(model, (torch.randn(1, 3, 4, 32, 32),), str(path), input_names=["clip"],
                      output_names=["logits"], dynamic_axes={"clip": {0: "n"}, "logits": {0: "n"}},
                      opset_version=17, dynamo=False)
    return path


def _run(model_or_path, x):
    ort = pytest.importorskip("onnxruntime")
    data = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"clip": x})[0]


def test_fold_time_is_exact_in_onnx_runtime(tiny_onnx):
    """Same outputs, batch 3 through the dynamic batch axis.

    Tolerance: the folded 2-D convolutions run the same products; only ONNX Runtime's summation order may
    differ between its 2-D and 3-D kernels.  Float32 re-association error is at most K * 2**-24 of the sum of
    |products| per convolution (K <= 8*3*3 = 72 here, ~4.3e-6), over 4 convolutions and the head: 2e-5
    relative to the output scale; 1e-4 leaves 5x margin and still fails on any real change (a wrong weight slice
    or pad moves the logits by O(1) of their scale).
    """
    model = onnx.load(str(tiny_onnx))
    result = fold_time(model)
    assert len(result.seeds) == 4        # two 1xkxk convs, the 1x2x2 pool, the pointwise conv
    assert result.skipped and all("temporal" in why for why in result.skipped.values())
    x = np.random.default_rng(1).standard_normal((3, 3, 4, 32, 32)).astype(np.float32)
    ref, got = _run(model, x), _run(result.model, x)
    assert got.shape == ref.shape == (3, 5)
    scale = float(np.abs(ref).max())
    assert float(np.abs(got - ref).max()) <= 1e-4 * scale + 1e-7
    convs = [n for n in result.model.graph.node if n.op_type == "Conv"]
    kernels = sorted(tuple(a.ints) for n in convs for a in n.attribute if a.name == "kernel_shape")
    assert kernels == sorted([(3, 3), (3, 1, 1), (3, 3), (1, 1)])


def test_folded_regions_move_the_convolutions_to_dla_with_counted_transitions(tiny_onnx):
    model = onnx.load(str(tiny_onnx))
    shapes = {"clip": [1, 3, 4, 32, 32]}
    before = analyze_onnx(model, input_shapes=shapes, **ORIN)
    fold, after = fold_for_dla(model, input_shapes=shapes, **ORIN)
    assert before.flops_dla < 0.01 * before.flops_total
    conv2d = [l for l in after.layers if l.onnx_op == "Conv" and len(l.output_shape) == 4]
    assert len(conv2d) == 3 and all(l.device == "DLA" for l in conv2d)
    assert all(l.output_shape[0] == 4 for l in conv2d)    # batch N*T = 1*4 frames
    assert after.flops_dla > 0.5 * after.flops_total
    # every region is entered and left once: 2 regions (spatial stem; spatial2+Add+pool+pointwise) -> 4 crossings
    # plus the head's Gemm on DLA (in, out)
    assert fold.regions == 2 and fold.folds + fold.unfolds >= 4
    summary = after.to_dict()["summary"]["transitions"]
    assert summary["to_dla"] == summary["to_gpu"] == after.num_subgraphs
    for move in after.transitions:
        assert move.bytes == int(np.prod(move.shape)) * 2


def test_max_regions_keeps_the_biggest_and_fold_for_dla_fits_the_loadables(tiny_onnx):
    model = onnx.load(str(tiny_onnx))
    one = fold_time(model, max_regions=1)
    assert one.regions == 1 and one.regions_dropped == 1
    # multiply-adds (outputs x weights per output): the stem 8x4x16x16 outputs x 3*1*3*3 = 221184; the other
    # region: depthwise 8x4x16x16 x 9 = 73728 + pool 8x4x8x8 x 4 = 8192 + pointwise 16x4x8x8 x 8 = 32768 = 114688
    assert len(one.seeds) == 1 and "spatial" in one.seeds[0] and "spatial2" not in one.seeds[0]
    fold, analysis = fold_for_dla(model, input_shapes={"clip": [1, 3, 4, 32, 32]}, loadables_per_core=2, **ORIN)
    assert analysis.num_subgraphs <= 2 and fold.regions_dropped >= 1


def test_fold_time_skips_a_qdq_weight_and_refuses_a_2d_model():
    w = np.ones((4, 4, 1, 3, 3), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]),
         helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3, 3], pads=[0, 1, 1, 0, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.float32(0.1), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = fold_time(model)
    assert result.seeds == [] and "not a constant initializer" in list(result.skipped.values())[0]
    with pytest.raises(ModelError, match="no 5-D"):
        check_foldable(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 3, 8, 8])]), "m")


def test_cli_fold_time_writes_the_model_and_its_sidecar(tiny_onnx, tmp_path, capsys):
    from jetforge.cli.main import main
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, read_sidecar, write_sidecar

    src = tmp_path / "m.onnx"
    src.write_bytes(tiny_onnx.read_bytes())
    write_sidecar(src, ModelSidecar(task="classify", model_name="tiny", inputs=[TensorSpec("clip", [-1, 3, 4, 32, 32])],
                                    outputs=[TensorSpec("logits", [-1, 5])], labels=list("abcde")))
    out = tmp_path / "m.folded.onnx"
    assert main(["dla-check", str(src), "--target", "orin-nx-16gb", "--fold-time", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fold_time"]["regions"] == 2 and data["fold_time"]["output"] == str(out)
    assert data["summary"]["transitions"]["count"] == len(data["transitions"]) > 0
    side = read_sidecar(out)                 # hash checked: the sidecar belongs to the written file
    assert side.labels == list("abcde") and side.extra["time_folded"]["source_model"] == "m.onnx"
    assert main(["dla-check", str(src), "--target", "orin-nx-16gb", "--fold-time", str(src)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1


def test_cli_fold_time_on_a_2d_model_is_one_error_line(tmp_path, capsys):
    from jetforge.cli.main import main

    path = tmp_path / "image.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 3, 8, 8])]), str(path))
    out = tmp_path / "folded.onnx"
    assert main(["dla-check", str(path), "--target", "orin-nx-16gb", "--fold-time", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no 5-D" in err and not out.exists()
    assert main(["dla-check", str(path), "--target", "orin-nx-16gb", "--fold-time", str(out), "--fold-regions",
                 "-1"]) == 1
    assert "--fold-regions" in capsys.readouterr().err
