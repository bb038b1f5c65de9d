"""Bundles: what goes in, the manifest, verification naming each bad file, atomic writes, tars, the board's choice.

Models are small real ONNX graphs (onnx.helper) with real sidecars; targets are the real profiles; the
build plans are the real planner's.  ``jetforge build BUNDLE`` without TensorRT is run through the CLI.
"""

import json
import struct
import tarfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import create as bundle_create  # noqa: E402
from jetforge.deploy.bundle import (BundleError, BundleNotPreparedError, create_bundle, open_bundle,  # noqa: E402
                                    read_manifest, verify_bundle)
from jetforge.deploy.onboard import Board, build_bundle, select  # noqa: E402
from jetforge.errors import InputFileError  # noqa: E402
from jetforge.runtime.tensorrt.plan import BuildOptions  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

NX = "orin-nx-16gb"


def make_model(path, qdq=False, pad_bytes=0, seed=0):
    """A tiny real classifier (Conv-ReLU-pool, 8 classes) with its sidecar; ``pad_bytes`` adds an unused random
    initializer (a large file whose bytes rsync cannot guess), ``qdq`` a Q/DQ pair on the input."""
    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")]
    if pad_bytes:
        inits.append(numpy_helper.from_array(rng.standard_normal(pad_bytes // 4).astype(np.float32), "pad"))
    nodes, x = [], "x"
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["x", "s"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"])]
        inits.append(numpy_helper.from_array(np.asarray(0.02, dtype=np.float32), "s"))
        x = "xd"
    nodes += [helper.make_node("Conv", [x, "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    write_sidecar(path, ModelSidecar(task="classify", model_name="tiny", inputs=[TensorSpec("x", [-1, 3, 32, 32])],
                                     outputs=[TensorSpec("y", [-1, 8])], preprocess=Preprocess(height=32, width=32),
                                     labels=["c%d" % i for i in range(8)]))
    return path


def make_cache(path, number=100300):
    lines = ["TRT-%d-EntropyCalibration2" % number] + [
        "%s: %s" % (n, struct.pack(">f", s).hex()) for n, s in (("x", 1 / 127.0), ("c", 0.05), ("y", 0.01))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def inputs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model = make_model(src / "model.onnx")
    qdq = make_model(src / "model.qdq.onnx", qdq=True)
    cache = make_cache(src / "model.calib")
    precisions = src / "model.precisions.json"
    precisions.write_text(json.dumps({"format": 1, "fp16_layers": ["node_0"]}))
    app = src / "app.yaml"
    app.write_text("source: camera\nmodel: model.onnx\n")
    return {"model": model, "qdq": qdq, "cache": cache, "precisions": precisions, "app": app}


def test_create_writes_everything_with_a_manifest(inputs, tmp_path, capsys):
    rc = main(["bundle", "create", str(inputs["model"]), "--target", NX, "--target", "orin-nano-8gb",
               "--calib", str(inputs["cache"]), "--qdq", "--app-config", str(inputs["app"]), "--out",
               str(tmp_path / "b"), "--tar"])
    out = capsys.readouterr().out
    assert rc == 0 and "wrote bundle" in out and "wrote tar" in out
    m = read_manifest(tmp_path / "b")
    roles = {f.role: f.path for f in m.files}
    assert roles == {"onnx": "model.onnx", "onnx_sidecar": "model.onnx.json", "qdq": "model.qdq.onnx",
                     "qdq_sidecar": "model.qdq.onnx.json", "precisions": "model.precisions.json",
                     "app_config": "app.yaml", "calib": "calib/trt-10.3.0.calib"}
    assert m.target_names == [NX, "orin-nano-8gb"] and m.targets[0]["tensorrt_versions"] == ["8.5.2", "8.6.2", "10.3.0"]
    assert m.jetforge_version and m.model["task"] == "classify" and m.build_options["precision"] == "int8"
    assert m.build_options["input_shapes"] == {"x": [1, 3, 32, 32]}  # the dynamic batch became 1
    # every (target, TensorRT) was planned with the source the board will pick
    rows = {(p.target, p.tensorrt): p for p in m.prepared}
    assert rows[(NX, "10.3.0")].ok and rows[(NX, "10.3.0")].int8_source == "qdq"
    assert rows[(NX, "8.5.2")].ok and rows[(NX, "8.5.2")].int8_source == "qdq"  # no 8.5 cache: Q/DQ on the GPU
    assert m.bundle_hash == m.compute_hash() and len(m.bundle_hash) == 64
    assert verify_bundle(tmp_path / "b").ok
    with tarfile.open(str(tmp_path / "b.tar")) as tar:
        assert "b/manifest.json" in tar.getnames()
    assert main(["bundle", "verify", str(tmp_path / "b.tar")]) == 0


def test_verify_names_each_missing_and_corrupt_file(inputs, tmp_path, capsys):
    b = create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], qdq=inputs["qdq"]).path
    (b / "model.qdq.onnx").unlink()
    cache = b / "calib" / "trt-10.3.0.calib"
    cache.write_text(cache.read_text().replace("TRT-100300", "TRT-100301"))   # same size, other bytes
    (b / "model.onnx.json").write_text("{}")
    (b / "notes.txt").write_text("mine")
    rc = main(["bundle", "verify", str(b)])
    captured = capsys.readouterr()
    assert rc == 1
    assert "missing: model.qdq.onnx" in captured.out
    assert "corrupt: calib/trt-10.3.0.calib (SHA-256 differs from the manifest)" in captured.out
    assert "corrupt: model.onnx.json (2 bytes, the manifest says" in captured.out
    assert "unexpected: notes.txt" in captured.out
    err = [l for l in captured.err.splitlines() if l.strip()]
    assert len(err) == 1 and "1 missing (model.qdq.onnx)" in err[0] and "2 corrupt" in err[0]
    rc = main(["bundle", "verify", str(b), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["missing"] == ["model.qdq.onnx"] and len(data["corrupt"]) == 2


def test_an_edited_manifest_and_a_folder_without_one_are_refused(inputs, tmp_path):
    b = create_bundle(inputs["model"], tmp_path / "b", [NX], options=BuildOptions(precision="fp16")).path
    data = json.loads((b / "manifest.json").read_text())
    data["build_options"]["precision"] = "fp32"
    (b / "manifest.json").write_text(json.dumps(data))
    report = verify_bundle(b)
    assert not report.ok and "edited" in report.errors[0]
    (b / "manifest.json").unlink()
    report = verify_bundle(b)
    assert not report.ok and "no manifest.json" in report.errors[0]
    with pytest.raises(BundleError) as err:
        open_bundle(b)
    assert "not a complete bundle" in err.value.one_line()


def test_interrupted_create_leaves_nothing_that_looks_complete(inputs, tmp_path, monkeypatch):
    out = tmp_path / "b"
    real = bundle_create.write_json_atomic

    def interrupted(path, data):  # the process dies just before the manifest
        raise KeyboardInterrupt

    monkeypatch.setattr(bundle_create, "write_json_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        create_bundle(inputs["model"], out, [NX], calib=[inputs["cache"]])
    assert not out.exists() and list(tmp_path.glob(".b.*")) == []
    # --force over an existing bundle: an interrupted replacement keeps the old one
    monkeypatch.setattr(bundle_create, "write_json_atomic", real)
    first = create_bundle(inputs["model"], out, [NX], options=BuildOptions(precision="fp16"))
    monkeypatch.setattr(bundle_create, "write_json_atomic", interrupted)
    with pytest.raises(KeyboardInterrupt):
        create_bundle(inputs["model"], out, [NX], calib=[inputs["cache"]], force=True)
    assert read_manifest(out).bundle_hash == first.manifest.bundle_hash and verify_bundle(out).ok
    monkeypatch.setattr(bundle_create, "write_json_atomic", real)
    with pytest.raises(BundleError) as err:
        create_bundle(inputs["model"], out, [NX])
    assert "already exists" in err.value.one_line() and "--force" in err.value.one_line()
    second = create_bundle(inputs["model"], out, [NX], calib=[inputs["cache"]], force=True)
    assert second.manifest.bundle_hash != first.manifest.bundle_hash and list(tmp_path.glob(".b.*")) == []


def test_same_content_same_hash(inputs, tmp_path):
    a = create_bundle(inputs["model"], tmp_path / "a" / "cam", [NX], calib=[inputs["cache"]]).manifest
    b = create_bundle(inputs["model"], tmp_path / "b" / "cam", [NX], calib=[inputs["cache"]]).manifest
    c = create_bundle(inputs["model"], tmp_path / "c" / "cam", [NX], calib=[inputs["cache"]],
                      options=BuildOptions(precision="int8", workspace_mib=512)).manifest
    assert a.bundle_hash == b.bundle_hash != c.bundle_hash
    # the name is content too: it names the bundle's folder on the board
    d = create_bundle(inputs["model"], tmp_path / "d" / "door", [NX], calib=[inputs["cache"]]).manifest
    assert d.name == "door" and d.bundle_hash != a.bundle_hash


def test_tar_is_extracted_once_and_unsafe_tars_are_refused(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "cache"))
    res = create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], tar=tmp_path / "b.tar.gz")
    opened = open_bundle(res.tar)
    assert opened.manifest.bundle_hash == res.manifest.bundle_hash and opened.path.name == "b"
    assert str(opened.path).startswith(str(tmp_path / "cache" / "bundles"))
    assert open_bundle(res.tar).path == opened.path
    evil = tmp_path / "evil.tar"
    with tarfile.open(str(evil), "w") as tar:
        tar.add(str(inputs["app"]), arcname="../escape.yaml")
    with pytest.raises(BundleError) as err:
        open_bundle(evil)
    assert "escapes" in err.value.one_line() and not (tmp_path / "cache" / "escape.yaml").exists()


def test_dla_bundle_prepared_only_where_a_cache_exists(inputs, tmp_path):
    res = create_bundle(inputs["model"], tmp_path / "b", ["agx-orin-64gb"], calib=[inputs["cache"]], qdq=inputs["qdq"],
                        options=BuildOptions(precision="int8", dla_core=0))
    rows = {p.tensorrt: p for p in res.manifest.prepared}
    assert rows["10.3.0"].ok and rows["10.3.0"].int8_source == "cache" and rows["10.3.0"].device == "dla"
    assert not rows["8.6.2"].ok and "calibration cache for TensorRT 8.6.2" in rows["8.6.2"].reason
    assert any("8.6.2" in w for w in res.warnings)
    bundle = open_bundle(res.path)
    board = Board(target=get_target("agx-orin-64gb"), how="test", tensorrt_installed=None, tensorrt_version="8.6.2",
                  device_name="Jetson AGX Orin")
    with pytest.raises(BundleNotPreparedError) as err:
        build_bundle(res.path, board=board)
    text = err.value.one_line()
    assert "8.6.2" in text and "calibration cache for TensorRT 8.6.2" in text and "--calib" in text
    # the board's choice for 10.3: the 10.3 cache, DLA core 0, the per-layer list not given -> none applied
    sel = select(bundle, get_target("agx-orin-64gb"), "10.3.0")
    assert sel.int8_source == "cache" and sel.cache.name == "trt-10.3.0.calib" and sel.plan.device == "dla"
    assert sel.plan.calibration_header == "TRT-100300-EntropyCalibration2"


def test_retarget_calib_and_per_layer_precisions(inputs, tmp_path):
    res = create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], retarget_calib=True,
                        precisions=inputs["precisions"], options=BuildOptions(precision="int8"))
    headers = {c["tensorrt"]: c["header"] for c in res.manifest.calibration}
    assert headers == {"8.5.2": "TRT-8502-EntropyCalibration2", "8.6.2": "TRT-8602-EntropyCalibration2",
                       "10.3.0": "TRT-100300-EntropyCalibration2"}
    assert all(p.ok and p.int8_source == "cache" for p in res.manifest.prepared)
    text = (res.path / "calib" / "trt-8.6.2.calib").read_text().splitlines()
    assert text[0] == "TRT-8602-EntropyCalibration2" and text[1:] == inputs["cache"].read_text().splitlines()[1:]
    sel = select(open_bundle(res.path), get_target(NX), "8.6.2")
    assert sel.options.layer_precisions == {"node_0": "fp16"} and "PREFER_PRECISION_CONSTRAINTS" in sel.plan.flags


def test_create_refuses_bad_inputs_with_the_fix(inputs, tmp_path):
    bare = tmp_path / "bare.onnx"
    bare.write_bytes(inputs["model"].read_bytes())
    with pytest.raises(InputFileError) as err:
        create_bundle(bare, tmp_path / "b", [NX])
    assert "no sidecar" in err.value.one_line()
    other = make_cache(tmp_path / "other.calib", number=100300)
    with pytest.raises(BundleError) as err:
        create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"], other])
    assert "two calibration caches" in err.value.one_line()
    with pytest.raises(BundleError) as err:  # INT8 for TensorRT 8.5/8.6 only, no cache for them, no Q/DQ
        create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], tensorrt_versions=["8.6.2"],
                      options=BuildOptions(precision="int8"))
    assert "builds on none of its targets" in err.value.one_line()
    with pytest.raises(BundleError) as err:
        create_bundle(inputs["model"], tmp_path / "b", ["desktop-ada"])
    assert "--tensorrt" in err.value.one_line()
    assert not (tmp_path / "b").exists()


def test_build_bundle_without_tensorrt_says_so_and_exits_3(inputs, tmp_path, capsys, monkeypatch):
    from jetforge.optional import is_available

    if is_available("tensorrt"):
        pytest.skip("TensorRT is installed here: the bundle would build")
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "cache"))
    b = create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], qdq=inputs["qdq"]).path
    rc = main(["build", str(b), "--target", NX, "--json"])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert rc == 3 and data["tensorrt"] is False and data["engine"] is None
    assert data["plan"]["int8_source"] == "qdq" and data["plan"]["tensorrt_version"] == "10.3.0"
    assert data["fallback"]["backend"] == "onnxruntime" and data["fallback"]["model"].endswith("model.onnx")
    assert "TensorRT is not installed here" in captured.err and "ONNX Runtime" in captured.err
    assert not (tmp_path / "cache" / "engines").exists()
    # a board the bundle was not prepared for is a one-line error, not a fallback
    rc = main(["build", str(b), "--target", "agx-xavier"])
    assert rc == 1 and "not for this board (agx-xavier)" in capsys.readouterr().err
    # --plan-only validates for the board and exits 0
    rc = main(["build", str(b), "--target", NX, "--tensorrt", "8.6.2", "--plan-only", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["plan"]["tensorrt_version"] == "8.6.2"
    # build-time options of an ONNX build do not apply to a bundle
    rc = main(["build", str(b), "--calib", str(inputs["cache"])])
    assert rc == 1 and "does not apply to a bundle" in capsys.readouterr().err
    # an ONNX model still needs --target
    rc = main(["build", str(inputs["model"])])
    assert rc == 1 and "--target is required" in capsys.readouterr().err


def test_remote_board_prepared_check(inputs, tmp_path):
    from jetforge.deploy.remote import RemoteInfo, check_free_space, classify, SshTarget, RemoteDiskFullError
    from jetforge.deploy.workflow import check_board_prepared

    m = create_bundle(inputs["model"], tmp_path / "b", [NX], calib=[inputs["cache"]], tensorrt_versions=["10.3.0"],
                      options=BuildOptions(precision="int8")).manifest
    info = RemoteInfo(jetforge="0.1.0", jetforge_path="jetforge", python=None, rsync=True, remote_dir="/x",
                      free_bytes=None, arch="aarch64", l4t="35.3.1", jetpack="5.1.1", tensorrt="8.5.2",
                      model="NVIDIA Jetson Orin NX", target=NX)
    with pytest.raises(BundleNotPreparedError) as err:
        check_board_prepared(m, info)
    assert "JetPack 5.1.1 with TensorRT 8.5.2" in err.value.one_line() and "--tensorrt 8.5.2" in err.value.one_line()
    info.tensorrt, info.jetpack = "10.3.0", "6.1"
    assert check_board_prepared(m, info) is None
    info.target = "agx-xavier"
    with pytest.raises(BundleNotPreparedError):
        check_board_prepared(m, info)
    # a full disk: before copying (df) and from rsync's own message
    ssh = SshTarget(host="board", user="nvidia")
    with pytest.raises(RemoteDiskFullError) as err:
        check_free_space(10 << 20, 50 << 20, ssh, "/home/nvidia")
    assert "10 MiB free" in err.value.one_line()
    stderr = ('rsync: [receiver] write failed on "/home/nvidia/jetforge/bundles/b/model.onnx": '
              'No space left on device (28)\nrsync error: error in file IO (code 11) at receiver.c(381)\n')
    error = classify(11, stderr, ssh, "copy the bundle", "/home/nvidia/jetforge/bundles/b")
    assert isinstance(error, RemoteDiskFullError) and "No space left on device" in error.one_line()
