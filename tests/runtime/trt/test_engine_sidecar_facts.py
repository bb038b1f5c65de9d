"""Engine sidecar format 2 carries the source model's whole sidecar; one accessor gives the same facts everywhere.

Models are small real ONNX graphs (onnx.helper) with real sidecars of each input kind (image + labels, the SSD
block with its anchors, an MTCNN PNet image pyramid) and the committed action model (clip input); plans are the
real planner's; the engine sidecar is written by the function the TensorRT builder calls
(:func:`engine_sidecar_from_plan`), so what is checked is what a build writes (the plan bytes are a stand-in: no
TensorRT here).  The reference for "the same facts" is the ONNX model's own sidecar, read by ``read_sidecar``.
"""

import copy
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from jetforge.errors import InputFileError, ModelError  # noqa: E402
from jetforge.runtime.inputs import ImagePyramid, Preprocess, input_contract  # noqa: E402
from jetforge.runtime.model_facts import model_facts, same_facts  # noqa: E402
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, read_sidecar, sidecar_path, write_sidecar  # noqa: E402
from jetforge.runtime.tensorrt.engine_sidecar import (ENGINE_SIDECAR_FORMAT, UPGRADED_FROM_FORMAT1,  # noqa: E402
                                                      EngineSidecar, engine_sidecar_from_plan, read_engine_sidecar,
                                                      write_engine_sidecar)
from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
NX = "orin-nx-16gb"
ACTION = ROOT / "src" / "jetforge" / "assets" / "shipped" / "action-mobilenet3d" / "model.onnx"


def _onnx(path, inputs, outputs):
    """A real ONNX graph: each output is Identity/ReduceMean of the first input (enough for the parser and planner)."""
    nodes = [helper.make_node("Identity", [inputs[0][0]], [outputs[0][0]])]
    for name, _ in outputs[1:]:
        nodes.append(helper.make_node("Identity", [inputs[0][0]], [name]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _ssd_block():
    from jetforge.vision.ssd import SSDSpec, ssd_anchor_layers

    return SSDSpec(layers=tuple(ssd_anchor_layers([(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]))).to_dict()


def make_image_model(folder):
    path = _onnx(folder / "cls.onnx", [("x", ["N", 3, 32, 32])], [("y", ["N", 3])])
    write_sidecar(path, ModelSidecar(task="classify", model_name="tiny-cls", inputs=[TensorSpec("x", [-1, 3, 32, 32])],
                                     outputs=[TensorSpec("y", [-1, 3])], labels=["cat", "dog", "eel"],
                                     preprocess=Preprocess(height=32, width=32, crop_fraction=0.75)))
    return path, {"x": [1, 3, 32, 32]}


def make_ssd_model(folder):
    path = _onnx(folder / "ssd.onnx", [("image", ["N", 3, 300, 300])], [("boxes", ["N", 3, 300, 300]),
                                                                         ("scores", ["N", 3, 300, 300])])
    write_sidecar(path, ModelSidecar(task="detect", model_name="tiny-ssd",
                                     inputs=[TensorSpec("image", [-1, 3, 300, 300])],
                                     outputs=[TensorSpec("boxes", [-1, 1917, 4]), TensorSpec("scores", [-1, 1917, 2])],
                                     labels=["person"], preprocess=Preprocess(height=300, width=300, resize="stretch",
                                                                              mean=(127.5,) * 3, std=(127.5,) * 3,
                                                                              scale=1.0),
                                     extra={"ssd": _ssd_block()}))
    return path, {"image": [1, 3, 300, 300]}


def make_pyramid_model(folder):
    path = _onnx(folder / "pnet.onnx", [("input", ["batch", 3, "height", "width"])],
                 [("prob", ["batch", 3, "height", "width"])])
    write_sidecar(path, ModelSidecar(task="detect", model_name="pnet",
                                     inputs=[TensorSpec("input", ["batch", 3, "h", "w"])],
                                     outputs=[TensorSpec("prob", ["batch", 2, "h", "w"])],
                                     input=ImagePyramid(min_size=24.0), extra={"family": "mtcnn", "stage": "pnet"}))
    return path, {"input": [1, 3, 12, 12]}


def make_clip_model(folder):
    path = folder / ACTION.name
    shutil.copyfile(str(ACTION), str(path))
    shutil.copyfile(str(sidecar_path(ACTION)), str(sidecar_path(path)))
    return path, {"clip": [1, 3, 8, 112, 112]}


KINDS = {"image": make_image_model, "ssd": make_ssd_model, "image_pyramid": make_pyramid_model,
         "clip": make_clip_model}


def build_stand_in(onnx_path, shapes, engine_name="model.engine", tensorrt="10.3.0"):
    """What the builder writes after TensorRT built ``onnx_path``: stand-in plan bytes and the real engine sidecar."""
    plan = make_plan(onnx_path, get_target(NX), BuildOptions(precision="fp16", input_shapes=shapes))
    io = SimpleNamespace(inputs=[TensorSpec(i["name"], shapes[i["name"]], "float32") for i in plan.inputs],
                         outputs=[TensorSpec(o["name"], [1] + list(o["shape"][1:]), "float32") for o in plan.outputs])
    engine = Path(onnx_path).with_name(engine_name)
    engine.write_bytes(b"stand-in plan bytes of " + Path(onnx_path).name.encode())
    write_engine_sidecar(engine, engine_sidecar_from_plan(plan, io.inputs, io.outputs, tensorrt, build_seconds=1.0))
    return engine


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_format2_round_trip_keeps_every_fact_of_each_input_kind(kind, tmp_path):
    onnx_path, shapes = KINDS[kind](tmp_path)
    engine = build_stand_in(onnx_path, shapes)
    data = json.loads(sidecar_path(engine).read_text())
    assert data["format"] == ENGINE_SIDECAR_FORMAT == 2 and "task" not in data and "preprocess" not in data
    reference = read_sidecar(onnx_path)  # the independent reference: the ONNX model's own sidecar
    back = read_engine_sidecar(engine, tensorrt_version="10.3.0.30")
    assert back.model == reference and back.model.to_dict() == reference.to_dict()
    assert EngineSidecar.from_dict(json.loads(json.dumps(back.to_dict()))) == back
    assert model_facts(engine) == reference and model_facts(back) == reference
    assert model_facts(SimpleNamespace(sidecar=back)) == reference  # what a TrtSession hands its consumers
    contract = input_contract(back, purpose="test")
    assert contract == reference.input and contract.kind == ("image" if kind == "ssd" else kind)
    assert back.task == reference.task and back.labels == reference.labels and not back.upgraded_from_format1


def test_the_consumers_that_could_not_open_a_jetforge_engine_now_read_it(tmp_path):
    from jetforge.runtime.inputs import ClipContract
    from jetforge.vision.ssd import spec_from_sidecar

    ssd = read_engine_sidecar(build_stand_in(*make_ssd_model(tmp_path)))
    spec = spec_from_sidecar(ssd)  # was "no SSD postprocessing block in its sidecar"
    assert spec.num_anchors == 1917 and spec.labels == ("person",)
    pnet = read_engine_sidecar(build_stand_in(*make_pyramid_model(tmp_path), engine_name="pnet.engine"))
    assert input_contract(pnet, "image_pyramid", purpose="MTCNN's PNet").min_size == 24.0  # was "no input contract"
    clip = read_engine_sidecar(build_stand_in(*make_clip_model(tmp_path), engine_name="action.engine"))
    contract = ClipContract.from_sidecar(clip)  # what the action app calls
    assert contract.window == 8 and model_facts(clip).task == "action"
    assert model_facts(clip).extra["evaluation"] == read_sidecar(tmp_path / ACTION.name).extra["evaluation"]


def test_onnx_engine_and_bundle_give_the_same_facts(tmp_path, monkeypatch):
    from jetforge.deploy.bundle import create_bundle, open_bundle

    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    onnx_path, shapes = make_ssd_model(src)
    bundle = open_bundle(create_bundle(onnx_path, tmp_path / "cam", [NX], tensorrt_versions=["10.3.0"]).path)
    engine = build_stand_in(bundle.onnx, shapes)  # as the board builds it: from the bundle's model.onnx
    facts = [model_facts(onnx_path), model_facts(bundle), model_facts(engine), model_facts(str(engine))]
    assert all(f == facts[0] for f in facts) and same_facts(facts[0], facts[2])
    assert facts[0].extra["ssd"]["num_anchors"] == 1917


def test_an_engine_of_a_qdq_model_without_a_sidecar_carries_its_plain_models_facts(tmp_path):
    onnx_path, shapes = make_image_model(tmp_path)
    qdq = tmp_path / "cls.qdq.onnx"
    shutil.copyfile(str(onnx_path), str(qdq))  # same tensors; no sidecar of its own
    sidecar = read_engine_sidecar(build_stand_in(qdq, shapes, engine_name="q.engine"))
    assert sidecar.model == read_sidecar(onnx_path) and any("plain model" in n for n in sidecar.notes)


def test_an_engine_without_any_model_sidecar_says_so_and_consumers_name_the_gap(tmp_path):
    path = _onnx(tmp_path / "bare.onnx", [("x", [1, 3, 8, 8])], [("y", [1, 3, 8, 8])])
    sidecar = read_engine_sidecar(build_stand_in(path, {"x": [1, 3, 8, 8]}))
    assert sidecar.model.task == "other" and sidecar.model.input is None
    assert any("no ONNX sidecar" in n for n in sidecar.notes)
    with pytest.raises(ModelError, match="records no input contract"):
        input_contract(sidecar, "image", purpose="the classify app")


# -- format 1 -------------------------------------------------------------------------------------------------
FORMAT1 = {  # what jetforge wrote before format 2 (engine_sidecar.py at 8c54582), for a classifier
    "format": 1, "kind": "tensorrt-engine", "backend": "tensorrt", "tensorrt_version": "10.3.0", "target": NX,
    "precision": "fp16", "device": "gpu", "dla_core": None, "gpu_fallback": False, "int8_source": None,
    "task": "classify", "labels": ["cat", "dog", "eel"],
    "inputs": [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}],
    "outputs": [{"name": "y", "shape": [1, 3], "dtype": "float32"}],
    "preprocess": {"height": 32, "width": 32, "crop_fraction": 0.75},
    "source_onnx": {"path": "cls.onnx", "sha256": "ab" * 32}, "build_seconds": 2.5, "plan": {"precision": "fp16"},
    "notes": [], "content_sha256": "", "produced_by": {"tool": "jetforge", "stage": "build"}}


def test_a_format1_engine_sidecar_is_read_and_upgraded(tmp_path):
    engine = tmp_path / "old.engine"
    engine.write_bytes(b"old plan")
    sidecar_path(engine).write_text(json.dumps(FORMAT1))
    old = read_engine_sidecar(engine)
    facts = model_facts(engine)
    assert old.format == 2 and facts == old.model and old.upgraded_from_format1
    assert facts.task == "classify" and facts.labels == ["cat", "dog", "eel"]
    assert facts.input == Preprocess(height=32, width=32, crop_fraction=0.75) == old.preprocess
    assert [t.name for t in facts.inputs] == ["x"] and facts.content_sha256 == "ab" * 32
    assert facts.produced_by == {"upgraded_from": UPGRADED_FROM_FORMAT1} and facts.extra == {}
    rewritten = EngineSidecar.from_dict(json.loads(json.dumps(old.to_dict())))
    assert rewritten == old and rewritten.to_dict()["format"] == 2
    # what format 1 never had stays absent, and the consumer says so in its own words
    from jetforge.vision.ssd import spec_from_sidecar
    with pytest.raises(ModelError, match="no SSD postprocessing block"):
        spec_from_sidecar(old)


def test_a_plain_hand_written_engine_description_gives_facts_too(tmp_path):
    from jetforge.runtime.tensorrt.session_logic import load_engine_sidecar

    engine = tmp_path / "trtexec.engine"
    engine.write_bytes(b"plan from trtexec")
    sidecar_path(engine).write_text(json.dumps({
        "inputs": [{"name": "x", "shape": [1, 3, 32, 32]}], "outputs": [{"name": "y", "shape": [1, 3]}],
        "task": "classify", "labels": ["a", "b", "c"], "preprocess": {"height": 32, "width": 32}}))
    plain = load_engine_sidecar(engine, True, "10.3.0")
    assert model_facts(plain).input == Preprocess(height=32, width=32) == input_contract(plain, "image")


# -- hostile engine sidecars ----------------------------------------------------------------------------------
def _valid(tmp_path):
    onnx_path, shapes = make_ssd_model(tmp_path)
    engine = build_stand_in(onnx_path, shapes)
    return engine, json.loads(sidecar_path(engine).read_text())


HOSTILE = {
    "model is a list": lambda d: d.update(model=[]),
    "model missing": lambda d: d.pop("model"),
    "model task unknown": lambda d: d["model"].update(task="x" * 100000),
    "model input kind unknown": lambda d: d["model"]["input"].update(kind="laser"),
    "model input field unknown": lambda d: d["model"]["input"].update(heigth=3),
    "model input shape of floats": lambda d: d["model"]["inputs"][0].update(shape=[1.5, 3]),
    "model extra a list": lambda d: d["model"].update(extra=[1, 2]),
    "model format 9": lambda d: d["model"].update(format=9),
    "format 2 with a top-level task": lambda d: d.update(task="classify"),
    "format 3": lambda d: d.update(format=3),
    "format true": lambda d: d.update(format="two"),
    "labels a string": lambda d: d["model"].update(labels="person"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_engine_sidecars_are_refused_in_one_line(name, tmp_path):
    engine, data = _valid(tmp_path)
    bad = copy.deepcopy(data)
    HOSTILE[name](bad)
    sidecar_path(engine).write_text(json.dumps(bad))
    with pytest.raises(ModelError) as err:
        read_engine_sidecar(engine)
    line = err.value.one_line()
    assert "\n" not in line and "Traceback" not in line and len(line) < 600


@pytest.mark.parametrize("text", ['{"format": 2, "format": 2}', '{"format": NaN}', "[" * 200 + "]" * 200,
                                  '{"format": Infinity, "kind": "tensorrt-engine"}'])
def test_strict_json_refusals_reach_the_engine_sidecar(text, tmp_path):
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    sidecar_path(engine).write_text(text)
    with pytest.raises(ModelError) as err:
        model_facts(engine)
    assert "\n" not in err.value.one_line()


def test_a_nan_inside_the_embedded_model_is_refused(tmp_path):
    engine, data = _valid(tmp_path)
    text = json.dumps(data).replace('"iou_threshold": 0.6', '"iou_threshold": NaN')
    assert "NaN" in text
    sidecar_path(engine).write_text(text)
    with pytest.raises(ModelError, match="NaN"):
        read_engine_sidecar(engine)


def test_a_missing_engine_sidecar_and_an_unknown_source_are_named(tmp_path):
    engine = tmp_path / "none.engine"
    engine.write_bytes(b"plan")
    with pytest.raises(InputFileError, match="has no sidecar"):
        model_facts(engine)
    with pytest.raises(ModelError, match="cannot tell the model facts"):
        model_facts(42)
    assert model_facts(SimpleNamespace(sidecar=None)) is None
