"""The 3D action recipe end to end on the CPU at small settings: real CNN person tracks of vtest.avi -> labelled RGB
clips -> inflated teacher -> pruned student distilled from it -> ONNX with the clip sidecar, run by ONNX Runtime."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jetforge.runtime.inputs import input_contract  # noqa: E402
from jetforge.runtime.session import open_session  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar  # noqa: E402

LABELS = ["walking left", "walking right", "moving, no lateral motion", "standing still"]


@pytest.mark.slow
def test_recipe_runs_on_the_cpu_and_exports_both_models(tmp_path, capsys):
    """Through ``jetforge distill --config recipes/action_mobilenet3d.yaml`` (kind: action3d), at tiny settings."""
    from jetforge.cli.main import main

    tiny = ["out_dir=%s" % (tmp_path / "run"), "tracks_dir=%s" % (tmp_path / "tracks"), "tracks_max_frames=100",
            "crop=32", "train_end=50", "heldout_start=60", "max_clips=4", "macs_factor=2.0",
            "int8.samples=8", "int8.qat_steps=1"]
    tiny += ["%s.%s" % (part, kv) for part in ("teacher", "student") for kv in ("epochs=1", "batch_size=4", "lr=1e-3")]
    argv = ["distill", "--config", "recipes/action_mobilenet3d.yaml", "--json"]
    assert main(argv + [a for o in tiny for a in ("--set", o)]) == 0
    printed = json.loads(capsys.readouterr().out)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert printed["files"] == report["files"] and printed["student"] == report["student"]
    assert printed["int8"] == report["int8"]  # --json prints the simulated-INT8 accuracies too
    assert (tmp_path / "tracks" / "events.jsonl").is_file()  # the people app made the track cache
    assert report["data"]["guard_frames"] == 10 and report["prune"]["macs_factor"] >= 2.0
    student = tmp_path / "run" / "student.onnx"
    sc = read_sidecar(student)
    contract = input_contract(sc, "clip")
    assert contract.rgb and contract.input_shape == (3, 8, 32, 32) and sc.labels == LABELS
    assert sc.extra["evaluation"]["clips"] == report["student"]["clips"] <= 4
    assert sc.produced_by["trained_on_frames"] == [0, 50]
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 32, 32)).astype(np.float32)
    with open_session(student) as s:
        logits = s.infer({"clip": x})["logits"]
    assert logits.shape == (2, 4) and np.isfinite(logits).all()
    assert report["prune"]["macs_student"] < report["prune"]["macs_teacher"]
    # the int8 stage: PTQ (calibration cache + Q/DQ) and one QAT step, both evaluated in simulated INT8
    import onnxruntime as ort

    run = tmp_path / "run"
    assert (run / "student.calib").is_file()
    for name, key in (("student.qdq.onnx", "student_ptq_qdq"), ("student.qat.qdq.onnx", "student_qat_qdq")):
        assert report["files"][key] == str(run / name)
        q = ort.InferenceSession(str(run / name), providers=["CPUExecutionProvider"])
        out = q.run(None, {q.get_inputs()[0].name: x})[0]
        assert out.shape == (2, 4) and np.isfinite(out).all()
    for stage in ("ptq", "qat"):
        acc = report["int8"][stage]["clip_accuracy"]
        assert 0.0 <= acc["accuracy_int8"] <= 1.0 and 0.0 <= acc["accuracy_fp32"] <= 1.0
    assert report["int8"]["qat"]["steps"] == 1 and report["int8"]["ptq"]["calibration"]["frames"] == [0, 50]
    # without --json the CLI prints the module entry's summary of this report
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.compress.action.mobilenet3d_recipe import summary_lines
    from jetforge.config import load_config

    lines = summary_lines(report, load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml", tiny))
    assert lines[2] == "held out    teacher %.3f, student %.3f (majority class alone %.3f)" % (
        report["teacher"]["accuracy"], report["student"]["accuracy"], report["student"]["majority_baseline"])
    assert lines[-1].endswith("report.json") and str(student) in lines[-1] and str(run / "student.qdq.onnx") in lines[-1]
    assert lines[-2].startswith("INT8        student held out, simulated INT8: PTQ %.3f, QAT %.3f" % (
        report["int8"]["ptq"]["clip_accuracy"]["accuracy_int8"], report["int8"]["qat"]["clip_accuracy"]["accuracy_int8"]))
    # `jetforge qat --config` of the same recipe: the int8 stage again, on the teacher.pt / student.pt the run saved
    student_pt = torch.load(str(run / "student.pt"), map_location="cpu", weights_only=True)
    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

    with torch.no_grad():
        rebuilt = mobilenet3d_from_state(student_pt).eval()(torch.from_numpy(x)).numpy()
    # the saved weights are the exported student's: torch vs ONNX Runtime float32, logits of magnitude ~1-10
    np.testing.assert_allclose(rebuilt, logits, rtol=1e-4, atol=1e-4)
    # calibration only (~3 s of CPU; the QAT steps ran above through the same int8 stage code)
    ptq_only = ["int8.calibrate=true", "int8.samples=6", "int8.qat_steps=0"]
    assert main(["qat", "--config", "recipes/action_mobilenet3d.yaml", "--json"]
                + [a for o in tiny + ptq_only for a in ("--set", o)]) == 0
    again = json.loads(capsys.readouterr().out)
    updated = json.loads((run / "report.json").read_text())
    assert again["int8"] == updated["int8"] and again["files"] == updated["files"]
    assert updated["int8"]["ptq"]["calibration"]["clips"] <= 6 and "qat" not in updated["int8"]
    assert "student_qat_qdq" not in updated["files"]
    assert updated["files"]["student_ptq_qdq"] == str(run / "student.qdq.onnx")
    assert updated["student"] == report["student"] and updated["recipe"] == report["recipe"]  # the FP32 run stands

