"""The on-board engine cache: built once then loaded; a stale, tampered or foreign entry is never loaded.

The key and the refusal rules are tested with a FakeEngineBuilder (it stands in for JetPack's TensorRT,
which cannot be installed here) writing real engine sidecars.  Where TensorRT-RTX is installed, the
bundle path runs the real TensorRT builder layer on it: the second start loads, it does not rebuild.
"""

import json
import struct

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.deploy.bundle import create_bundle  # noqa: E402
from jetforge.runtime.tensorrt.engine_cache import ENGINE, KEY_FILE, EngineCache, EngineKey  # noqa: E402
from jetforge.deploy.onboard import Board, build_bundle  # noqa: E402
from jetforge.runtime.tensorrt.engine_sidecar import EngineSidecar, write_engine_sidecar  # noqa: E402
from jetforge.runtime.sidecar import TensorSpec  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

NX = "orin-nx-16gb"


def make_model(path, qdq=False):
    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, write_sidecar

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")]
    nodes, x = [], "input"
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["input", "s"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"])]
        inits.append(numpy_helper.from_array(np.asarray(0.02, dtype=np.float32), "s"))
        x = "xd"
    nodes += [helper.make_node("Conv", [x, "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    write_sidecar(path, ModelSidecar(task="other", model_name="tiny", inputs=[TensorSpec("input", [1, 3, 32, 32])],
                                     outputs=[TensorSpec("y", [1, 8, 32, 32])], preprocess=Preprocess(height=32, width=32)))
    return path


class FakeEngineBuilder:
    """Stands in for TensorRT's builder: writes a plan file and the real engine sidecar; counts builds."""

    def __init__(self, tensorrt_version="10.3.0.30"):
        self.calls = 0
        self.tensorrt_version = tensorrt_version

    def __call__(self, plan, engine_path):
        self.calls += 1
        engine_path.write_bytes(b"fake plan %d for %s" % (self.calls, plan.onnx_sha256.encode()))
        sidecar = EngineSidecar(tensorrt_version=self.tensorrt_version, target=plan.target, precision=plan.precision,
                                device=plan.device, dla_core=plan.dla_core, inputs=[TensorSpec("input", [1, 3, 32, 32])],
                                outputs=[TensorSpec("y", [1, 8, 32, 32])],
                                source_onnx={"path": plan.onnx_path, "sha256": plan.onnx_sha256}, plan=plan.to_dict())
        write_engine_sidecar(engine_path, sidecar)
        return engine_path


@pytest.fixture
def bundle(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model = make_model(src / "model.onnx")
    qdq = make_model(src / "model.qdq.onnx", qdq=True)
    cache = src / "model.calib"
    cache.write_text("TRT-100300-EntropyCalibration2\n" + "".join(
        "%s: %s\n" % (n, struct.pack(">f", s).hex()) for n, s in (("input", 1 / 127.0), ("c", 0.05), ("y", 0.02))))
    return create_bundle(model, tmp_path / "bundle", [NX, "agx-orin-64gb"], calib=[cache], qdq=qdq,
                         tensorrt_versions=["10.3.0"]).path


def board(installed="10.3.0.30", version="10.3.0", target=NX, device="NVIDIA Jetson Orin NX Developer Kit"):
    return Board(target=get_target(target), how="test", tensorrt_installed=installed, tensorrt_version=version,
                 device_name=device)


def test_second_start_loads_instead_of_rebuilding(bundle, tmp_path):
    cache = EngineCache(tmp_path / "engines")
    fake = FakeEngineBuilder()
    first = build_bundle(bundle, board=board(), cache=cache, builder=fake)
    assert first["cache"] == "built" and fake.calls == 1 and first["int8_source"] == "qdq"
    engine = first["engine"]
    assert engine.startswith(str(tmp_path / "engines")) and engine.endswith("/" + ENGINE)
    again = build_bundle(bundle, board=board(), cache=cache, builder=fake)
    assert again["cache"] == "hit" and again["engine"] == engine and fake.calls == 1
    key = json.loads((tmp_path / "engines" / first["key"] / KEY_FILE).read_text())
    assert key["bundle_hash"] == first["bundle_hash"] and key["tensorrt_version"] == "10.3.0.30"
    assert key["compute_capability"] == "8.7" and key["dla_core"] is None
    # each part of the key makes another entry
    assert build_bundle(bundle, board=board(), cache=cache, builder=fake, overrides={"dla_core": 0})["cache"] == "built"
    assert build_bundle(bundle, board=board(device="another board"), cache=cache, builder=fake)["cache"] == "built"
    assert build_bundle(bundle, board=board(target="agx-orin-64gb"), cache=cache, builder=fake)["cache"] == "built"
    assert build_bundle(bundle, board=board(), cache=cache, builder=fake,
                        overrides={"workspace_mib": 256})["cache"] == "built"
    assert fake.calls == 5
    assert build_bundle(bundle, board=board(), cache=cache, builder=fake, overrides={"dla_core": 0})["cache"] == "hit"
    # the DLA build used the 10.3 cache, not the Q/DQ model (DLA takes no Q/DQ)
    dla = build_bundle(bundle, board=board(), cache=cache, builder=fake, overrides={"dla_core": 0})
    assert dla["int8_source"] == "cache" and dla["plan"]["device"] == "dla" and fake.calls == 5


def _key(**changes):
    base = dict(bundle_hash="b" * 64, onnx_sha256="o" * 64, tensorrt_version="10.3.0.30", device_name="Orin NX",
                compute_capability="8.7", dla_core=None, build_options={"precision": "fp16"})
    base.update(changes)
    return EngineKey(**base)


def _plan_like(key):
    class Plan:
        target, precision, device, dla_core = NX, "fp16", "dla" if key.dla_core is not None else "gpu", key.dla_core
        onnx_path, onnx_sha256 = "model.onnx", key.onnx_sha256

        def to_dict(self):
            return {}
    return Plan()


def test_stale_tampered_and_foreign_entries_are_refused_and_rebuilt(tmp_path):
    cache = EngineCache(tmp_path)
    fake = FakeEngineBuilder()
    key = _key()
    build = lambda path: fake(_plan_like(key), path)  # noqa: E731
    assert cache.get_or_build(key, build).built and cache.lookup(key).hit
    entry = cache.entry(key)
    # the engine changed after its sidecar was written
    (entry / ENGINE).write_bytes(b"tampered")
    found = cache.lookup(key)
    assert not found.hit and "stale" in found.reason and "changed after" in found.reason
    resolved = cache.get_or_build(key, build)
    assert resolved.built and fake.calls == 2 and cache.lookup(key).hit
    # an entry whose key.json describes another build (copied in from elsewhere)
    other = _key(tensorrt_version="8.6.2.3")
    (entry / KEY_FILE).write_text(json.dumps(other.material()))
    found = cache.lookup(key)
    assert not found.hit and "foreign" in found.reason and "tensorrt_version" in found.reason
    # an engine built by another TensorRT behind a matching key.json
    (entry / KEY_FILE).write_text(json.dumps(key.material()))
    FakeEngineBuilder(tensorrt_version="8.6.2.3")(_plan_like(key), entry / ENGINE)
    found = cache.lookup(key)
    assert not found.hit and "TensorRT 8.6.2.3" in found.reason
    # built for another DLA core / another ONNX
    FakeEngineBuilder()(_plan_like(_key(dla_core=1)), entry / ENGINE)
    assert "DLA core 1" in cache.lookup(key).reason
    FakeEngineBuilder()(_plan_like(_key(onnx_sha256="x" * 64)), entry / ENGINE)
    assert "another ONNX" in cache.lookup(key).reason
    (entry / KEY_FILE).unlink()
    assert "foreign" in cache.lookup(key).reason
    (entry / ENGINE).unlink()
    (entry / (ENGINE + ".json")).unlink()
    assert not cache.lookup(key).hit
    assert cache.get_or_build(key, build).built and cache.lookup(key).hit
    assert _key().digest == key.digest and _key(build_options={"precision": "int8"}).digest != key.digest


def test_an_entry_built_by_an_older_jetforge_is_rebuilt_to_carry_the_model(tmp_path):
    """A format-1 engine sidecar (task, labels, image preprocessing only) behind a matching key: rebuilt, so the
    engine the board gets carries its model's whole sidecar (issue 24: the SSD block and clip inputs were lost)."""
    cache = EngineCache(tmp_path)
    fake = FakeEngineBuilder()
    key = _key()
    build = lambda path: fake(_plan_like(key), path)  # noqa: E731
    assert cache.get_or_build(key, build).built and cache.lookup(key).hit
    sidecar = cache.entry(key) / (ENGINE + ".json")
    data = json.loads(sidecar.read_text())
    model = data.pop("model")
    data.update(format=1, task=model["task"], labels=model["labels"], preprocess=None)
    sidecar.write_text(json.dumps(data))
    found = cache.lookup(key)
    assert not found.hit and "format 1" in found.reason
    assert cache.get_or_build(key, build).built and fake.calls == 2 and cache.lookup(key).hit


def test_an_interrupted_build_leaves_no_entry(tmp_path):
    cache = EngineCache(tmp_path)
    key = _key()

    def dies(path):
        path.write_bytes(b"half a plan")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.get_or_build(key, dies)
    assert not cache.entry(key).exists() and list(tmp_path.iterdir()) == []
    assert cache.lookup(key).reason == "no cached engine"


def test_real_builder_on_tensorrt_rtx_is_cached(bundle, tmp_path):
    rtx = pytest.importorskip("tensorrt_rtx", reason="tensorrt_rtx is not installed (pip install tensorrt-rtx-cu13)")
    from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar
    from jetforge.runtime.tensorrt.builder import build_engine

    calls = []

    def rtx_builder(plan, engine_path):
        calls.append(plan.onnx_path)
        return build_engine(plan, engine_path, trt=rtx, inspect=False)

    # TensorRT-RTX stands in for the board's TensorRT: the plan is for TensorRT 10.3, the builder is RTX's
    rtx_board = board(installed=rtx.__version__, version="10.3.0")
    cache = EngineCache(tmp_path / "engines")
    first = build_bundle(bundle, board=rtx_board, cache=cache, builder=rtx_builder,
                         overrides={"precision": "fp16"})
    assert first["cache"] == "built" and len(calls) == 1
    sidecar = read_engine_sidecar(first["engine"])
    assert sidecar.backend == "tensorrt_rtx" and sidecar.inputs[0].name == "input"
    size = (tmp_path / "engines" / first["key"] / ENGINE).stat().st_size
    assert size > 1000
    second = build_bundle(bundle, board=rtx_board, cache=cache, builder=rtx_builder, overrides={"precision": "fp16"})
    assert second["cache"] == "hit" and second["engine"] == first["engine"] and len(calls) == 1
    out = tmp_path / "copy" / "model.engine"
    third = build_bundle(bundle, board=rtx_board, cache=cache, builder=rtx_builder, overrides={"precision": "fp16"},
                         output=out)
    assert third["cache"] == "hit" and out.read_bytes() == (tmp_path / "engines" / first["key"] / ENGINE).read_bytes()
    assert read_engine_sidecar(out).content_sha256 == sidecar.content_sha256
