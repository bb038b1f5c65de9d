"""``jetforge info``: an ONNX model, an engine (its sidecar, no TensorRT here) and a bundle, on tiny real models.

Every number is checked against an independent computation: parameters against numpy's sizes of the initializers
the test made, MACs against the convolution/GEMM formula by hand, operator counts against the node list, hashes
against hashlib.  Hostile inputs (missing, not ONNX, truncated, a bundle path leaving the folder) are one line on
stderr and exit 1.
"""

import collections
import hashlib
import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.runtime.inputs import Preprocess  # noqa: E402
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, produced_by, write_sidecar  # noqa: E402

C_IN, C_OUT, K, H, W, CLASSES = 3, 8, 3, 16, 16, 4


def make_net(path, sidecar=True):
    """Conv(3->8, 3x3, pad 1, bias) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(8->4); returns the initializers."""
    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((C_OUT, C_IN, K, K)).astype(np.float32),
              "b": rng.standard_normal(C_OUT).astype(np.float32),
              "fc_w": rng.standard_normal((CLASSES, C_OUT)).astype(np.float32),
              "fc_b": rng.standard_normal(CLASSES).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C_IN, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", CLASSES])],
                              [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    if sidecar:
        write_sidecar(path, ModelSidecar(task="classify", model_name="tiny", inputs=[TensorSpec("x", [-1, 3, H, W])],
                                         outputs=[TensorSpec("y", [-1, CLASSES])],
                                         preprocess=Preprocess(height=H, width=W), labels=["a", "b", "c", "d"],
                                         produced_by=produced_by("export", recipe="test")))
    return model, arrays


def hand_macs(batch):
    """Conv: every output element takes C_in*K*K multiply-adds (pad 1 keeps HxW); Gemm: every output C_OUT."""
    return batch * (C_OUT * H * W * C_IN * K * K + CLASSES * C_OUT)


def run_json(capsys, *argv):
    rc = main(["info", *argv, "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out)


def test_onnx_facts_match_independent_counts(tmp_path, capsys):
    path = tmp_path / "net.onnx"
    model, arrays = make_net(path)
    info = run_json(capsys, str(path))
    assert info["kind"] == "onnx" and info["opset"] == 17
    assert info["inputs"] == [{"name": "x", "shape": ["N", 3, H, W], "dtype": "float32"}]
    assert info["outputs"] == [{"name": "y", "shape": ["N", CLASSES], "dtype": "float32"}]
    assert info["ops"] == dict(collections.Counter(n.op_type for n in model.graph.node))
    assert info["parameters"]["total"] == sum(a.size for a in arrays.values()) == 260
    assert info["parameters"]["tensors"] == len(arrays)
    assert info["macs"]["available"] and info["macs"]["total"] == hand_macs(1) == 55328
    assert info["macs"]["by_op"] == {"Conv": 55296, "Gemm": 32}
    assert info["precision"] == "float32"
    side = info["sidecar"]
    assert side["task"] == "classify" and side["labels"] == 4 and side["hash_matches"] is True
    assert side["input_contract"]["kind"] == "image" and side["layout"] == "nchw"
    assert side["produced_by"]["recipe"] == "test" and side["produced_by"]["stage"] == "export"
    sha = {f["role"]: f["sha256"] for f in info["files"]}
    assert sha["onnx"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha["sidecar"] == hashlib.sha256((tmp_path / "net.onnx.json").read_bytes()).hexdigest()


def test_macs_at_a_batch_and_text_output(tmp_path, capsys):
    path = tmp_path / "net.onnx"
    make_net(path)
    assert run_json(capsys, str(path), "--batch", "3")["macs"]["total"] == hand_macs(3)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "parameters  260 in 4 initializers" in out and "MACs        55,328 at batch 1" in out
    assert "input       image:" in out and "recorded model hash matches the file" in out


def test_stale_sidecar_is_reported_not_fatal(tmp_path, capsys):
    path = tmp_path / "net.onnx"
    make_net(path)
    data = json.loads((tmp_path / "net.onnx.json").read_text())
    data["content_sha256"] = "0" * 64
    (tmp_path / "net.onnx.json").write_text(json.dumps(data))
    assert run_json(capsys, str(path))["sidecar"]["hash_matches"] is False


def test_engine_sidecar_without_tensorrt(tmp_path, capsys):
    from jetforge.runtime.tensorrt.engine_sidecar import engine_sidecar_from_plan, write_engine_sidecar
    from jetforge.runtime.tensorrt.library import installed_version
    from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan
    from jetforge.targets import get_target

    onnx_path = tmp_path / "net.onnx"
    make_net(onnx_path)
    plan = make_plan(onnx_path, get_target("orin-nx-16gb"), BuildOptions(precision="fp16", tensorrt_version="10.3",
                                                                         input_shapes={"x": [1, 3, H, W]}))
    engine = tmp_path / "net.engine"
    engine.write_bytes(b"stand-in plan bytes: no TensorRT on this machine")
    sidecar = engine_sidecar_from_plan(plan, [TensorSpec("x", [1, 3, H, W])], [TensorSpec("y", [1, CLASSES])],
                                       "10.3.0")
    write_engine_sidecar(engine, sidecar)
    info = run_json(capsys, str(engine))
    assert info["kind"] == "engine" and info["tensorrt_version"] == "10.3.0" and info["target"] == "orin-nx-16gb"
    assert info["precision"] == "fp16" and info["builder_flags"] == ["FP16"] and info["engine_hash_matches"] is True
    assert info["source_onnx"]["sha256"] == hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    assert info["sidecar"]["task"] == "classify" and info["sidecar"]["input_contract"]["kind"] == "image"
    if installed_version() is None:
        assert info["plan"]["available"] is False and "not installed" in info["plan"]["reason"]
    assert main(["info", str(engine)]) == 0
    out = capsys.readouterr().out
    assert "built       TensorRT 10.3.0 (tensorrt) for orin-nx-16gb: fp16 on gpu" in out and "input       image:" in out


def test_bundle_manifest_files_and_model(tmp_path, capsys):
    from jetforge.deploy.bundle import Manifest, create_bundle
    from jetforge.runtime.tensorrt.plan import BuildOptions

    src = tmp_path / "src"
    src.mkdir()
    make_net(src / "model.onnx")
    bundle = create_bundle(src / "model.onnx", tmp_path / "cam", ["orin-nx-16gb"],
                           options=BuildOptions(precision="fp16")).path
    info = run_json(capsys, str(bundle))
    assert info["kind"] == "bundle" and info["name"] == "cam" and info["targets"] == ["orin-nx-16gb"]
    for f in info["files"]:
        assert f["verified"] and f["sha256"] == hashlib.sha256((bundle / f["path"]).read_bytes()).hexdigest()
    assert info["model"]["parameters"]["total"] == 260 and info["model"]["macs"]["total"] == hand_macs(1)
    assert main(["info", str(bundle), "--no-macs"]) == 0
    assert "verified    %d files, every size and SHA-256" % len(info["files"]) in capsys.readouterr().out
    # a manifest naming a path outside the bundle is refused before anything is read
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][0]["path"] = "../outside.onnx"
    manifest["bundle_hash"] = Manifest.from_dict(manifest).compute_hash()  # only the path is wrong
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(bundle)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "jetforge: error:" in err and "outside.onnx" in err


def test_shipped_model_by_name(capsys):
    from jetforge.workflow.shipped_models import shipped_models

    model = shipped_models()[0]
    info = run_json(capsys, model.name, "--no-macs")
    assert info["path"] == str(model.onnx) and info["macs"]["available"] is False
    if model.card.get("macs"):  # the card's number came from the torch-side counter at export: same network
        assert run_json(capsys, model.name)["macs"]["total"] == model.card["macs"]


@pytest.mark.parametrize("case", ["missing", "text", "truncated", "suffix"])
def test_hostile_inputs_are_one_line_exit_1(tmp_path, capsys, case):
    path = tmp_path / "net.onnx"
    if case == "text":
        path.write_text("this is not a model\n" * 10)
    elif case == "truncated":
        make_net(path, sidecar=False)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif case == "suffix":
        path = tmp_path / "net.txt"
        path.write_bytes(b"\x08\x01")
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jetforge: error:") and "Traceback" not in err
    assert str(path.name) in err
