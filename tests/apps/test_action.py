"""``jetforge app action --model WALKING_DIRECTION_MODEL --detector hog``: the earlier walking-direction model
(still shipped as an option) over sliding windows of real person tracks.

The bundled model (apps/data/action_walking_direction.onnx) was trained by
recipes/action_walking_direction.yaml on vtest.avi frames 0..559, with labels derived
from HOG tracks; these tests run it on frames 600.. of vtest.avi (held out) only.
"""

import json

import numpy as np
import pytest

from jetforge.apps.tasks.action import WALKING_DIRECTION_MODEL, ClipContract
from jetforge.compress.action.walking_direction import (LABELS, ActionRecipe, LabelRule, label_window, link_tracks,
                                                        make_windows, window_boxes)
from jetforge.runtime.sidecar import read_sidecar

HELD_OUT = (600, 660)  # vtest.avi frames used here: after the training part (0..559) and the gap


@pytest.fixture(scope="module")
def vtest_frames():
    from jetforge.assets import asset_path
    from jetforge.apps.video import open_source

    with open_source(asset_path("opencv_samples", "vtest.avi")) as src:
        frames = []
        for f in src:
            if f.index >= HELD_OUT[1]:
                break
            if f.index >= HELD_OUT[0]:
                frames.append(f.image)
    return frames


def _boxes(dx, dy, h=140.0, n=8):
    t = np.arange(n)[:, None]
    base = np.array([[300.0, 200.0, 300.0 + h / 2, 200.0 + h]])
    return base + t * np.array([[dx, dy, dx, dy]]) / (n - 1)


def test_label_rule_is_displacement_in_body_heights():
    rule = LabelRule()
    assert label_window(_boxes(70, 5), rule) == "walking right"    # half a body height sideways
    assert label_window(_boxes(-70, -5), rule) == "walking left"
    assert label_window(_boxes(3, 8), rule) == "no lateral motion"  # < 0.12 heights in the window
    assert label_window(_boxes(25, 0), rule) is None                # 0.18 heights: between the thresholds
    assert label_window(_boxes(50, 50), rule) is None               # diagonal: not labelled
    assert label_window(_boxes(5, 80), rule) is None                # fast toward the camera: not a class


def test_tracks_and_windows_from_detections():
    boxes = [np.array([[100.0 + 9 * f, 100, 170 + 9 * f, 240, 1.0]], np.float32) if f != 4 else np.zeros((0, 5))
             for f in range(12)]
    tracks = link_tracks(boxes, iou_min=0.3, max_age=3)
    assert len(tracks) == 1 and sorted(tracks[0]) == [f for f in range(12) if f != 4]
    filled = window_boxes(tracks[0], 0, 8, max_gap=2)
    assert filled is not None and filled[4, 0] == pytest.approx(136.0)  # the gap interpolated
    windows = make_windows(tracks, ActionRecipe(), (768, 576))
    assert [w.start for w in windows] == [0, 2]  # a window must begin and end on a detection and {w.label for w in windows} == {"walking right"}


def test_bundled_model_sidecar_states_what_it_recognizes_and_its_held_out_accuracy():
    sc = read_sidecar(WALKING_DIRECTION_MODEL)  # verifies the content hash
    assert sc.task == "action" and sc.labels == LABELS
    assert sc.inputs[0].shape == ["batch", 8, 64, 32]
    ev = sc.extra["evaluation"]
    assert ev["test_windows"] >= 100
    assert ev["test_accuracy"] > ev["majority_baseline"] + 0.3
    assert "walking left, walking right, no lateral motion" in ev["what"]
    assert sc.produced_by["trained_on_frames"] == [0, 560]
    assert WALKING_DIRECTION_MODEL.stat().st_size < 2 * 1024 * 1024


def test_clip_contract_is_the_training_one(vtest_frames):
    """apps' ClipContract and compress' window_region/crop_gray/normalize_clip give the same tensor."""
    pytest.importorskip("torch")
    import cv2

    from jetforge.compress.models import action as train_side

    contract = ClipContract.from_sidecar(read_sidecar(WALKING_DIRECTION_MODEL))
    grays = [cv2.cvtColor(im, cv2.COLOR_BGR2GRAY) for im in vtest_frames[:8]]
    for boxes in (_boxes(60, 4), _boxes(60, 4) + np.array([[-320.0, -210.0, -320.0, -210.0]])):  # inside, off edge
        region = train_side.window_region(boxes, (768, 576))
        assert contract.region(boxes) == region
        expected = train_side.normalize_clip(np.stack([train_side.crop_gray(g, region) for g in grays]))
        assert np.array_equal(contract.clip(grays, boxes), expected)


def test_action_app_headless_on_held_out_vtest(run_action_app):
    out, records, frames, classified = run_action_app(
        ["--hog-scale", "1.1", "--model", str(WALKING_DIRECTION_MODEL), "--detector", "hog"], LABELS)
    assert all(abs(sum(p["p"] for p in t["top"]) - 1.0) < 1e-3 for t in classified)
    changes = [r for r in records if r["type"] == "action_change"]
    assert changes and all(c["to"] in LABELS for c in changes)

    # The model's per-track answer (top-1 over the track's life) against the label rule applied to the
    # app's own track boxes over the same frames: the same question the model was trained to answer.
    boxes = {}
    for r in frames:
        for t in r["tracks"]:
            boxes.setdefault(t["id"], []).append(t["box"])
    metrics = json.loads((out / "metrics.json").read_text())
    summary = metrics["results"]["streams"][0]["track_actions"]
    judged = agree = 0
    for tr in summary:
        b = np.array(boxes[tr["track"]])
        rule = label_window(b, LabelRule(still_max=0.12 * len(b) / 8, moving_min=0.25 * len(b) / 8))
        if rule is None:
            continue
        judged += 1
        agree += int(rule == tr["top"][0]["label"])
    assert judged >= 2 and agree / judged >= 0.6, (judged, agree, summary)
    assert metrics["results"]["held_out"]["test_accuracy"] > 0.8
    assert (out / "annotated.mp4").stat().st_size > 10000
