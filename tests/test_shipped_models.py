"""Shipped models: usable by name where a command takes a model file, their cards checked against their files.

The name resolution runs on a temporary shipped folder holding a real (tiny) ONNX model, so it is tested whether
or not this checkout ships models; the cards of the models it does ship are checked against their files, their
rendering in docs/models/ and the result JSON each card names.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from jetforge.errors import ModelError, UnknownNameError
from jetforge.fileio import sha256_file
from jetforge.workflow import shipped_models as sm

ROOT = Path(__file__).resolve().parents[1]


def _tiny_onnx(path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["input"], ["output"])
    graph = helper.make_graph([node], "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _card(name: str, folder: Path) -> dict:
    return {"format": sm.CARD_FORMAT, "name": name, "task": "classify", "made_by": {}, "accuracy": {},
            "speed": {}, "not_executed": ["everything"], "results": [],
            "files": {"onnx": {"path": "model.onnx", "sha256": sha256_file(folder / "model.onnx")}}}


@pytest.fixture()
def shipped_root(tmp_path: Path) -> Path:
    root = tmp_path / "shipped"
    folder = root / "tiny-net"
    folder.mkdir(parents=True)
    _tiny_onnx(folder / "model.onnx")
    (folder / sm.CARD).write_text(json.dumps(_card("tiny-net", folder)))
    return root


def test_a_shipped_name_becomes_its_onnx_where_a_command_takes_a_model(shipped_root: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(model="tiny-net", detector_model=None)
    notes = sm.resolve_model_names("app", args, root=shipped_root)
    assert Path(args.model) == shipped_root / "tiny-net" / "model.onnx" and len(notes) == 1
    import onnxruntime as ort

    out = ort.InferenceSession(args.model).run(None, {"input": np.array([[-1.0, 0.0, 2.0]], np.float32)})[0]
    assert out.tolist() == [[0.0, 0.0, 2.0]]


def test_a_users_own_file_named_like_a_shipped_model_wins(shipped_root: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tiny-net").write_bytes(b"the user's own file")
    args = argparse.Namespace(model="tiny-net")
    assert sm.resolve_model_names("bench", args, root=shipped_root) == [] and args.model == "tiny-net"


def test_a_damaged_shipped_model_is_refused_not_run(shipped_root: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    model = shipped_root / "tiny-net" / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(ModelError, match="damaged.*differs from the card"):
        sm.resolve_model_names("estimate", argparse.Namespace(model="tiny-net"), root=shipped_root)


def test_an_unknown_shipped_name_suggests_the_close_ones(shipped_root: Path) -> None:
    with pytest.raises(UnknownNameError, match="tiny-net"):
        sm.shipped_model("tiny-nte", root=shipped_root)


@pytest.mark.parametrize("path", ["../escape.onnx", "/etc/passwd", "sub/model.onnx", ".hidden"])
def test_a_card_cannot_point_outside_its_folder(shipped_root: Path, path: str) -> None:
    card_file = shipped_root / "tiny-net" / sm.CARD
    card = json.loads(card_file.read_text())
    card["files"]["onnx"]["path"] = path
    card_file.write_text(json.dumps(card))
    with pytest.raises(ModelError, match="plain file name"):
        sm.shipped_models(shipped_root)


def test_bundle_create_takes_a_shipped_models_cache_unless_given_another(shipped_root: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = shipped_root / "tiny-net"
    (folder / "model.calib").write_text("TRT-100300-EntropyCalibration2\n")
    card = json.loads((folder / sm.CARD).read_text())
    card["files"]["calib"] = {"path": "model.calib", "sha256": sha256_file(folder / "model.calib")}
    (folder / sm.CARD).write_text(json.dumps(card))
    args = argparse.Namespace(model="tiny-net", calib=None)
    sm.resolve_model_names("bundle", args, root=shipped_root)
    assert Path(args.calib) == folder / "model.calib"
    mine = argparse.Namespace(model="tiny-net", calib="mine.calib")
    sm.resolve_model_names("bundle", mine, root=shipped_root)
    assert mine.calib == "mine.calib"
