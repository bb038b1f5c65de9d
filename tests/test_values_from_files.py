"""Values in files from others are checked by jetforge's shared checks (jsonfile.expect*, the input contracts'
ranges) before use: each hostile file below was an internal error (exit 2), ran on silently wrong numbers, or
exhausted memory (issue 25).  Each is now one line naming the file and the field; the shipped files still read.

Files: person labels (calibrate --labels, distillation), class-label and evaluation-label text files, pruning plans
(export --prune-plan, checkpoints), model sidecars' input contracts (every consumer) and the SSD block.
"""

import copy
import json

import pytest

from jetforge.errors import JetforgeError

# ---- person labels ----------------------------------------------------------------------------------------------
from jetforge.vision.person_labels import DEFAULT_LABELS, read_person_labels


def _person_labels(tmp_path, edit):
    data = json.loads(DEFAULT_LABELS.read_text())
    edit(data)
    path = tmp_path / "people.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _set(path, value):
    def edit(d):
        node = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


PERSON_LABEL_EDITS = {
    "guard_frames 25.9 (was read as 25)": (_set(["guard_frames"], 25.9), "guard_frames must be an integer"),
    "a frame number as a string": (_set(["frames", 0, "frame"], "0"), "a frame number must be an integer"),
    "a box of 3 numbers (merged into the next box)": (_set(["frames", 0, "boxes", 0, "box"], [1, 2, 3]),
                                                       "a box has 3 numbers"),
    "a difficult flag of 1": (_set(["frames", 0, "boxes", 0, "difficult"], 1), "difficult flag must be true or false"),
    "a negative segment start": (_set(["clips", "vtest", "segments", 0, "start"], -5), "start is -5"),
    "a list as a clip": (_set(["clips", "vtest"], []), "a clip must be an object"),
}


@pytest.mark.parametrize("name", sorted(PERSON_LABEL_EDITS))
def test_person_labels_values_are_checked_not_coerced(tmp_path, name):
    edit, words = PERSON_LABEL_EDITS[name]
    with pytest.raises(JetforgeError) as err:
        read_person_labels(_person_labels(tmp_path, edit))
    line = err.value.one_line()
    assert words in line and "people.json" in line and "\n" not in line


def test_person_labels_are_read_by_the_strict_json_reader(tmp_path):
    """Duplicate keys took the last value; json.loads read 1e999 as infinity."""
    text = DEFAULT_LABELS.read_text().replace('"guard_frames": ', '"guard_frames": 1, "guard_frames": ', 1)
    path = tmp_path / "dup.json"
    path.write_text(text)
    with pytest.raises(JetforgeError, match="appears twice"):
        read_person_labels(path)
    assert read_person_labels().guard_frames >= 25  # the shipped set still reads


# ---- label text files -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", b"cat\x00dog\n", b"\xff\xd8\xff\xe0"])
def test_binary_label_files_are_one_line(tmp_path, data):
    from jetforge.apps.labels import read_label_file
    from jetforge.calibrate.evaluate import read_labels
    from jetforge.cli.cmd_export import _labels  # export --labels FILE

    path = tmp_path / "labels.txt"
    path.write_bytes(data)
    for read in (read_label_file, lambda p: read_labels(p, ["a.jpg"], ["cat", "dog"]), lambda p: _labels(str(p), {})):
        with pytest.raises(JetforgeError) as err:
            read(path)
        assert str(path) in err.value.one_line() and "\n" not in err.value.one_line()


def test_an_evaluation_label_of_unicode_digits_is_one_line(tmp_path):
    """"\u00b2".isdigit() is True and int() refuses it: a ValueError (exit 2)."""
    from jetforge.calibrate.evaluate import read_labels

    path = tmp_path / "labels.txt"
    path.write_text("a.jpg\t\u00b2\nb.jpg\t1\n")
    with pytest.raises(JetforgeError, match="line 1: the label is neither a class index nor a class name"):
        read_labels(path, ["a.jpg", "b.jpg"], ["cat", "dog"])
    path.write_text("a.jpg\t0\nb.jpg\tdog\n")
    assert list(read_labels(path, ["a.jpg", "b.jpg"], ["cat", "dog"])) == [0, 1]


# ---- pruning plans ----------------------------------------------------------------------------------------------
PLAN = {"format": "jetforge.prune-plan/1", "jetforge": "0.1.0", "architecture": "Net", "meta": {"model": "net"},
        "layers": {"conv1": {"in": [3], "out": [16]}},
        "entries": [{"module": "conv1", "tensor": "weight", "dim": 0, "size": 16, "removed": [1, 5]}]}


def _plan_edit(path, value):
    def edit(d):
        if not path:
            return value
        node = d
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return d
    return edit


PLAN_EDITS = {
    "a top-level list": (_plan_edit([], [PLAN]), "not a jetforge pruning plan"),
    "a string meta": (_plan_edit(["meta"], "abc"), "meta must be an object"),
    "a float axis": (_plan_edit(["entries", 0, "dim"], 1.5), "dim must be an integer"),
    "an index past the axis": (_plan_edit(["entries", 0, "removed"], [16]), "removed is 16"),
    "an index as a string": (_plan_edit(["entries", 0, "removed"], ["1"]), "removed must be an integer"),
    "a module as a list": (_plan_edit(["entries", 0, "module"], ["conv1"]), "module must be a string"),
    "layer sizes as a string": (_plan_edit(["layers", "conv1", "in"], "3"), "must be a list"),
}


@pytest.mark.parametrize("name", sorted(PLAN_EDITS))
def test_pruning_plan_values_are_checked(tmp_path, name):
    pytest.importorskip("torch")
    from jetforge.compress.prune.plan import PrunePlan

    edit, words = PLAN_EDITS[name]
    path = tmp_path / "model.prune.json"
    path.write_text(json.dumps(edit(copy.deepcopy(PLAN))))
    with pytest.raises(JetforgeError) as err:
        PrunePlan.load(path)
    assert words in err.value.one_line() and "\n" not in err.value.one_line()


@pytest.mark.parametrize("text, words", [('{"format": "jetforge.prune-plan/1", "entries": [], "meta": {"a": Infinity}}',
                                          "Infinity"),
                                         ("[" * 5000 + "]" * 5000, "deep"),
                                         ('{"format": "jetforge.prune-plan/1", "entries": [{"module": "c", "tensor": '
                                          '"weight", "dim": 0, "size": 4, "removed": [1e999]}]}', "infinity")])
def test_pruning_plans_are_read_by_the_strict_json_reader(tmp_path, text, words):
    pytest.importorskip("torch")
    from jetforge.compress.prune.plan import PrunePlan

    path = tmp_path / "model.prune.json"
    path.write_text(text)
    with pytest.raises(JetforgeError, match=words):
        PrunePlan.load(path)
    path.write_text(json.dumps(PLAN))
    assert PrunePlan.load(path).entries[0].removed == [1, 5]


# ---- model sidecars: the input contract -------------------------------------------------------------------------
def _sidecar(tmp_path, block, task="classify"):
    from jetforge.runtime.sidecar import read_sidecar

    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    (tmp_path / "m.onnx.json").write_text(json.dumps({
        "format": 2, "task": task, "model_name": "m", "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}],
        "outputs": [{"name": "y", "shape": [1, 4]}], "input": block, "labels": ["a", "b", "c", "d"]}))
    return read_sidecar(model)


CONTRACT_EDITS = {
    "crop_fraction 1e-300 (a resize to 2e302 pixels)": ({"kind": "image", "crop_fraction": 1e-300}, "crop_fraction"),
    "height 10^9": ({"kind": "image", "height": 10 ** 9}, "height is 1000000000"),
    "scale given as the string inf": ({"kind": "image", "scale": "inf"}, "scale"),
    "a NaN mean given as a string": ({"kind": "image", "mean": ["nan", 0, 0]}, "mean"),
    "a denormal std": ({"kind": "image", "std": [1e-320]}, "std"),
    "a negative scale": ({"kind": "image", "scale": -1.0}, "scale is -1"),
    "a height of true": ({"kind": "image", "height": True}, "height"),
    "a pyramid factor of 0.999999 (millions of levels)": ({"kind": "image_pyramid", "factor": 0.999999}, "factor"),
    "a clip window of 10^6 frames": ({"kind": "clip", "window": 10 ** 6}, "window is 1000000"),
    "a clip margin of 1e9": ({"kind": "clip", "margin": 1e9}, "margin"),
    "a clip fps of 1e308": ({"kind": "clip", "fps_trained": 1e308}, "fps_trained"),
}


@pytest.mark.parametrize("name", sorted(CONTRACT_EDITS))
def test_input_contract_values_are_checked_when_the_sidecar_is_read(tmp_path, name):
    block, words = CONTRACT_EDITS[name]
    with pytest.raises(JetforgeError) as err:
        _sidecar(tmp_path, block)
    line = err.value.one_line()
    assert words in line and "\n" not in line


def test_the_shipped_contracts_still_read(tmp_path):
    from jetforge.runtime.inputs import Preprocess

    assert _sidecar(tmp_path, {"kind": "image", "height": 224, "width": 224, "crop_fraction": 0.875}).input == \
        Preprocess()
    assert _sidecar(tmp_path, {"kind": "clip", "window": 8, "crop_height": 112, "crop_width": 112}).input.window == 8
    assert _sidecar(tmp_path, {"kind": "image_pyramid"}).input.factor == pytest.approx(0.709)


# ---- the SSD block ----------------------------------------------------------------------------------------------
def _ssd_block():
    from jetforge.vision.ssd import SSDSpec, ssd_anchor_layers

    return SSDSpec(layers=tuple(ssd_anchor_layers([(19, 19), (10, 10), (5, 5)]))).to_dict()


SSD_EDITS = {
    "a 20000x20000 grid (exhausted memory)": (lambda b: b["layers"][0].update(grid=[20000, 20000]), "grid"),
    "a grid of strings (was int()ed)": (lambda b: b["layers"][0].update(grid=["19", "19"]), "must be an integer"),
    "a label that is a list (was the label \"['a']\")": (lambda b: b.update(labels=[["person"]]), "labels[0]"),
    "max_total of true": (lambda b: b.update(max_total=True), "max_total must be an integer"),
    "an iou_threshold of 2": (lambda b: b.update(iou_threshold=2), "iou_threshold is 2"),
}


@pytest.mark.parametrize("name", sorted(SSD_EDITS))
def test_the_ssd_block_is_checked_before_anchors_are_made(name):
    from jetforge.vision.ssd import SSDSpec

    edit, words = SSD_EDITS[name]
    block = _ssd_block()
    assert SSDSpec.from_dict(copy.deepcopy(block)).num_anchors == block["num_anchors"]
    edit(block)
    with pytest.raises(JetforgeError) as err:
        SSDSpec.from_dict(block)
    assert words in err.value.one_line() and "\n" not in err.value.one_line()


# ---- model and engine sidecars: the fields around the contract ----------------------------------------------------
SIDECAR_EDITS = {
    "format true (was format 1)": (lambda d: d.update(format=True), "format"),
    "labels holding null, a list and an object (became \"None\", \"['a']\")": (
        lambda d: d.update(labels=[None, ["a"], {"b": 1}]), "labels[0] must be a string, not null"),
    "a model name that is an object": (lambda d: d.update(model_name={"a": 1}), "model_name must be a string"),
    "a task that is a number": (lambda d: d.update(task=5), "task must be a string"),
    "an axis of 10^12": (lambda d: d["inputs"][0].update(shape=[1, 3, 10 ** 12, 8]), "integer from -1 to"),
    "an axis of -7": (lambda d: d["inputs"][0].update(shape=[-7, 3, 8, 8]), "integer from -1 to"),
    "a dtype that is a list": (lambda d: d["inputs"][0].update(dtype=["float32"]), "dtype must be a string"),
}


@pytest.mark.parametrize("name", sorted(SIDECAR_EDITS))
def test_model_sidecar_fields_are_not_coerced(tmp_path, name):
    from jetforge.runtime.sidecar import read_sidecar

    edit, words = SIDECAR_EDITS[name]
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    data = {"format": 2, "task": "classify", "model_name": "m", "inputs": [{"name": "x", "shape": [1, 3, 8, 8]}],
            "outputs": [{"name": "y", "shape": [1, 4]}], "input": {"kind": "image", "height": 8, "width": 8},
            "labels": ["a", "b", "c", "d"]}
    (tmp_path / "m.onnx.json").write_text(json.dumps(data))
    assert read_sidecar(model).labels == ["a", "b", "c", "d"]
    edit(data)
    (tmp_path / "m.onnx.json").write_text(json.dumps(data))
    with pytest.raises(JetforgeError) as err:
        read_sidecar(model)
    assert words in err.value.one_line() and "m.onnx.json" in err.value.one_line()


ENGINE_EDITS = {
    "gpu_fallback 1 (was true)": (lambda d: d.update(gpu_fallback=1), "gpu_fallback must be true or false"),
    "dla_core \"0\" (was 0)": (lambda d: d.update(dla_core="0"), "dla_core must be an integer"),
    "dla_core 99": (lambda d: d.update(dla_core=99), "dla_core is 99"),
    "a note that is null (became \"None\")": (lambda d: d.update(notes=[None]), "notes[0] must be a string"),
    "a TensorRT version that is a list": (lambda d: d.update(tensorrt_version=["10.3"]), "tensorrt_version"),
    "negative build seconds": (lambda d: d.update(build_seconds=-5), "build_seconds is -5"),
}


@pytest.mark.parametrize("name", sorted(ENGINE_EDITS))
def test_engine_sidecar_fields_are_not_coerced(tmp_path, name):
    from jetforge.runtime.sidecar import TensorSpec
    from jetforge.runtime.tensorrt.engine_sidecar import EngineSidecar, read_engine_sidecar

    edit, words = ENGINE_EDITS[name]
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"plan")
    data = EngineSidecar(tensorrt_version="10.3.0", target="orin-nx-16gb", precision="int8", device="dla",
                         dla_core=0, inputs=[TensorSpec("x", [1, 3, 8, 8])], outputs=[TensorSpec("y", [1, 4])],
                         source_onnx={"path": "m.onnx", "sha256": "0" * 64}, task="classify",
                         labels=["a", "b", "c", "d"], build_seconds=1.5, notes=["n"]).to_dict()
    (tmp_path / "m.engine.json").write_text(json.dumps(data))
    assert read_engine_sidecar(engine).dla_core == 0
    edit(data)
    (tmp_path / "m.engine.json").write_text(json.dumps(data))
    with pytest.raises(JetforgeError) as err:
        read_engine_sidecar(engine)
    assert words in err.value.one_line() and "m.engine.json" in err.value.one_line()
