"""The 3D action recipe end to end on the CPU at small settings: real CNN person tracks of vtest.avi -> labelled RGB
clips -> inflated teacher -> pruned student distilled from it -> ONNX with the clip sidecar, run by ONNX Runtime."""

import json

import numpy as np
import pytest

from jetforge.compress.action.action3d import Action3DRecipe, TrainSettings
from jetforge.compress.action.mobilenet3d_recipe import run_recipe
from jetforge.runtime.inputs import input_contract
from jetforge.runtime.session import open_session
from jetforge.runtime.sidecar import read_sidecar


@pytest.mark.slow
def test_recipe_runs_on_the_cpu_and_exports_both_models(tmp_path):
    from jetforge.assets import asset_path

    tiny = TrainSettings(epochs=1, batch_size=4, lr=1e-3)
    recipe = Action3DRecipe(out_dir=str(tmp_path / "run"), tracks_dir=str(tmp_path / "tracks"), tracks_max_frames=100,
                            crop=32, train_end=50, heldout_start=60, max_clips=4, teacher=tiny, student=tiny,
                            macs_factor=2.0)
    report = run_recipe(recipe, asset_path("opencv_samples", "vtest.avi"), progress=False)
    assert (tmp_path / "tracks" / "events.jsonl").is_file()  # the people app made the track cache
    assert report["data"]["guard_frames"] == 10 and report["prune"]["macs_factor"] >= 2.0
    student = tmp_path / "run" / "student.onnx"
    sc = read_sidecar(student)
    contract = input_contract(sc, "clip")
    assert contract.rgb and contract.input_shape == (3, 8, 32, 32) and sc.labels == list(recipe.labels)
    assert sc.extra["evaluation"]["clips"] == report["student"]["clips"] <= 4
    assert sc.produced_by["trained_on_frames"] == [0, 50]
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 32, 32)).astype(np.float32)
    with open_session(student) as s:
        logits = s.infer({"clip": x})["logits"]
    assert logits.shape == (2, 4) and np.isfinite(logits).all()
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["prune"]["macs_student"] < saved["prune"]["macs_teacher"]
