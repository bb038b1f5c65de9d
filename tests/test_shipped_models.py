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
    args = argparse.Namespace(model="tiny-net", calib=[])  # bundle create's --calib: repeatable, default []
    sm.resolve_model_names("bundle", args, root=shipped_root)
    assert args.calib == [str(folder / "model.calib")]
    mine = argparse.Namespace(model="tiny-net", calib=["mine.calib"])
    sm.resolve_model_names("bundle", mine, root=shipped_root)
    assert mine.calib == ["mine.calib"]


# ------------------------------------------------------------------------------------------------ what ships
SHIPPED = sm.shipped_models()


def test_this_checkout_ships_models() -> None:
    assert SHIPPED, "no shipped model under %s" % sm.SHIPPED_DIR


@pytest.mark.parametrize("model", SHIPPED, ids=[m.name for m in SHIPPED])
def test_shipped_files_match_their_card(model: sm.ShippedModel) -> None:
    assert model.verify() == []
    assert sorted(p.name for p in model.folder.iterdir()) == sorted(
        [e["path"] for e in model.card["files"].values()] + [sm.CARD])


@pytest.mark.parametrize("model", SHIPPED, ids=[m.name for m in SHIPPED])
def test_docs_show_the_card_as_it_is(model: sm.ShippedModel) -> None:
    doc = ROOT / "docs" / "models" / ("%s.md" % model.name)
    assert doc.read_text() == sm.render_card(model)


#: a detector's recipe run, as the GPU call's time stage names it (the port is ssdlite_person_port)
DETECTOR_RUNS = {"ssdlite-person-192": "ssdlite_person_student_192", "yolov8-person-192": "yolov8_person_student"}


def expected_from_result(kind: str, name: str, result: dict) -> dict:
    """What the card must say, read from the result JSON by the result's own keys (one reading per model kind)."""
    timing = result["gpu_timing"]["models"]
    if kind == "detector":
        ap = result["ap"][name]
        return {"value": ap["ap50"], "teacher": result["ap"]["teacher"]["ap50"],
                "minus_teacher": ap["minus_teacher"]["ap50"], "minus_teacher_ci95": list(ap["minus_teacher"]["ap50_ci"]),
                "int8": result["int8"]["report"]["evaluation"]["int8"]["metrics"]["detection_ap"]["ap50_int8"],
                "gpu": (timing[DETECTOR_RUNS[name]], timing["ssdlite_person_port"]),
                "cpu_ms": result["cpu_latency"][name]["median_ms"]}
    acc = result["accuracy"]
    return {"value": acc["student"]["accuracy"], "teacher": acc["teacher"]["accuracy"],
            "minus_teacher": acc["student_minus_teacher"]["value"],
            "minus_teacher_ci95": list(acc["student_minus_teacher"]["ci"]),
            "int8": result["recipe_report"]["int8"]["ptq"]["clip_accuracy"]["accuracy_int8"],
            "gpu": (timing["action_student"], timing["action_teacher"]),
            "cpu_ms": result["cpu_latency"]["student"]["median_ms"]}


@pytest.mark.parametrize("model", SHIPPED, ids=[m.name for m in SHIPPED])
def test_card_numbers_equal_their_result_file(model: sm.ShippedModel) -> None:
    card = model.card
    result = json.loads((ROOT / card["results"][0]).read_text())
    want = expected_from_result(result["kind"], model.name, result)
    acc = card["accuracy"]
    for key in ("value", "teacher", "minus_teacher", "minus_teacher_ci95", "int8"):
        assert acc[key] == want[key], key
    student, teacher = want["gpu"]
    for batch in card["speed"]["gpu"]["batches"]:
        row = card["speed"]["gpu"]["batch%d" % batch]
        assert row["teacher_ms"] == teacher["batch%d" % batch]["median_ms"]
        assert row["ms"] == student["batch%d" % batch]["median_ms"]
    assert card["speed"]["cpu"]["batch1"]["ms"] == want["cpu_ms"]
    assert card["macs"] == result["macs"]["student"]
    assert result["shipped_onnx_sha256"] == sha256_file(model.onnx)


def test_models_list_and_show_through_the_cli(capsys: pytest.CaptureFixture) -> None:
    from jetforge.cli.main import main

    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    for model in SHIPPED:
        assert model.name in listed
        assert main(["models", "show", model.name]) == 0
        assert capsys.readouterr().out.strip() == sm.render_card(model).strip()
    assert main(["models", "show", "no-such-model"]) == 1
    assert "unknown shipped model" in capsys.readouterr().err


def test_the_yolov8_layout_student_is_a_yolov8_export_to_jetforge(capsys: pytest.CaptureFixture) -> None:
    """``yolov8-person-192`` is what a YOLOv8 export looks like to jetforge: one ``[N, 4 + 1, A]`` output, a sidecar
    naming the ``yolov8`` decoder and the class ``person``; the card's MACs (counted by finish.py from the run's
    student.pt with the torch-side counter) equal what ``jetforge info`` counts on the shipped ONNX."""
    from jetforge.cli.main import main
    from jetforge.runtime.model_facts import model_facts
    from jetforge.vision.decode import decoder_for, matching_decoders

    model = sm.shipped_model("yolov8-person-192")
    facts = model_facts(model.onnx)
    assert decoder_for(facts).name == "yolov8" and list(facts.labels) == ["person"]
    assert [list(o.shape) for o in facts.outputs] == [["batch", 5, 756]]
    assert matching_decoders([[1, 5, 756]], 1) == ["yolov8"]
    assert model.card["input"] == "1x3x192x192" and model.card["task"] == "detect (person)"
    assert main(["info", "yolov8-person-192", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["macs"]["total"] == model.card["macs"]


def test_a_shipped_detector_runs_in_the_people_app_by_name(tmp_path: Path) -> None:
    from jetforge.cli.main import main

    out = tmp_path / "run"
    code = main(["-q", "app", "people", "--detector-model", "ssdlite-person-192", "--max-frames", "3", "--no-video",
                 "--no-plots", "--out", str(out)])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert "ssdlite" in json.dumps(metrics["model"]).lower()


def test_demo_compare_shows_the_port_beside_the_shipped_student(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``./dev demo --compare`` from the shipped files.  The port's AP at the app's threshold is the people-app
    study's committed number (its own loop; see tests/test_compare_detectors.py for the tolerance)."""
    from jetforge.cli.main import main

    assert main(["-q", "demo", "--compare", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "compare.json").read_text())
    port = result["detectors"][result["reference"]]
    committed = json.loads((ROOT / "benchmarks" / "people_app" / "results" / "epyc-2core_2026-12-01_ap.json"
                            ).read_text())["detectors"]["ssd"]["ap50"]
    assert port["ap50"] == pytest.approx(committed, abs=1e-6) and port["input"] == "300x300"
    for name in ("ssdlite-person-192", "yolov8-person-192"):  # an SSD student and one of another output layout
        student = result["detectors"][name]
        assert student["input"] == "192x192" and student["minus_reference_ci"][0] <= student["minus_reference"]
        assert name in printed
    assert "yolov8 decoder" in result["detectors"]["yolov8-person-192"]["label"] and "FPS" in printed


@pytest.mark.parametrize("model", SHIPPED, ids=[m.name for m in SHIPPED])
def test_card_estimates_are_what_jetforge_estimate_gives_today(model: sm.ShippedModel,
                                                               capsys: pytest.CaptureFixture) -> None:
    """The card's Jetson rows are the user's command on the shipped file, with this checkout's estimator: when an
    efficiency set changes, the cards must be refreshed (``finish.py --refresh-estimates NAME``), not left stale.
    Tolerance 1e-9 relative: the same code on the same graph (float sums in a fixed order)."""
    from jetforge.cli.main import main

    for row in model.card["estimated"]["rows"]:
        args = ["estimate", str(model.onnx), "--target", row["target"], "--precision", row["precision"], "--json"]
        args += ["--dla-core", "0"] if row["where"].startswith("DLA") else []
        code = main(args)
        out = capsys.readouterr().out
        if row["ms"] is None:  # the card records a refusal (a board without DLA): the command still refuses
            assert code == 1, row
            continue
        assert code == 0, row
        first = json.loads(out)["batches"][0]  # the card's rows are batch 1
        assert first["batch"] == 1 and first["latency_ms"] == pytest.approx(row["ms"], rel=1e-9), row
