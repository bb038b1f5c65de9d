"""``jetforge app action`` with the bundled 3D MobileNetV2 (RGB clips, CNN person tracks) on held-out vtest.avi frames."""

import json

import numpy as np

from jetforge.apps.tasks.action import DEFAULT_MODEL, MOBILENET3D_MODEL
from jetforge.runtime.inputs import input_contract
from jetforge.runtime.sidecar import read_sidecar

LABELS = ["walking left", "walking right", "moving, no lateral motion", "standing still"]


def test_the_3d_model_is_the_default_and_its_sidecar_says_what_it_recognizes():
    assert DEFAULT_MODEL == MOBILENET3D_MODEL
    sc = read_sidecar(DEFAULT_MODEL)  # verifies the content hash
    assert sc.task == "action" and sc.labels == LABELS
    contract = input_contract(sc, "clip")
    assert contract.rgb and contract.input_shape == (3, 8, 112, 112) and sc.inputs[0].shape == ["batch", 3, 8, 112, 112]
    ev = sc.extra["evaluation"]
    data = sc.extra["data"]  # the recipe's own evaluation block and split (what the shipped model's card quotes)
    assert ev["clips"] >= 200 and data["heldout_frames"][0] >= sc.produced_by["trained_on_frames"][1]
    assert data["heldout_frames"][0] - data["train_frames"][1] == data["guard_frames"]
    assert ev["accuracy"] > ev["majority_baseline"] + 0.2
    assert "not a general action-recognition result" in ev["what"]
    assert sc.extra["label_rule"]["units"].startswith("body heights per second")
    assert DEFAULT_MODEL.stat().st_size < 4 * 1024 * 1024


def test_action_app_with_the_3d_model_on_held_out_vtest(run_action_app):
    from jetforge.compress.action.track_clips import MotionRule

    out, _, frames, classified = run_action_app(["--no-video"], LABELS)
    # top 3 of 4 classes: probabilities in descending order summing to at most 1 (each rounded to 4 decimals)
    assert all([p["p"] for p in t["top"]] == sorted([p["p"] for p in t["top"]], reverse=True) and
               sum(p["p"] for p in t["top"]) <= 1.0 + 2e-4 for t in classified)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["results"]["labels"] == LABELS and metrics["results"]["windows_classified"] > 20
    # Per track over its life: the model's top-1 against the label rule applied to the app's own boxes (the question
    # the model was trained on); tracks the rule leaves unlabelled are not judged.
    boxes = {}
    for r in frames:
        for t in r["tracks"]:
            boxes.setdefault(t["id"], []).append(t["box"])
    judged = agree = 0
    for tr in metrics["results"]["streams"][0]["track_actions"]:
        rule = MotionRule().label(np.array(boxes[tr["track"]]), 10.0)
        if rule is not None:
            judged += 1
            agree += int(rule == tr["top"][0]["label"])
    assert judged >= 3 and agree / judged >= 0.6, (judged, agree)
