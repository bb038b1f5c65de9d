"""The person-box set jetforge ships (package data): its split invariants, provenance hashes against real OpenCV
decoding, the loader; its provenance files in datasets/people/."""

import json
from pathlib import Path

import numpy as np
import pytest

from jetforge.errors import InputFileError
from jetforge.vision.person_labels import (DEFAULT_LABELS, frame_sha256, load_person_labels, read_person_labels,
                                           training_frames)

# the tool that made the set and its provenance (pre-labels, hand edits, the line-crossing count)
DATASET = Path(__file__).resolve().parents[2] / "datasets" / "people"


@pytest.fixture(scope="module")
def labels():
    return read_person_labels()


@pytest.fixture(scope="module")
def assets_root():
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("opencv_samples", "vtest.avi").parent.parent
    except AssetError as err:
        pytest.skip("real clips not available: %s" % err)


def test_the_set_is_large_spread_and_split_with_guards(labels):
    assert len(labels.frames) >= 150
    held = labels.select("heldout")
    assert len(held) >= 80 and len(labels.select("train")) >= 50
    vtest_held = labels.segments_of("heldout", "vtest")
    assert len(vtest_held) >= 3  # spread over the clip, not one block
    for clip in labels.clips:
        segs = sorted((s for s in labels.segments if s.clip == clip), key=lambda s: s.start)
        for a, b in zip(segs, segs[1:]):
            assert b.start >= a.stop
            if a.split != b.split:
                assert b.start - a.stop >= labels.guard_frames >= 25
    for f in labels.frames:
        assert labels.split_of(f.clip, f.index) == f.split
        h, w = labels.clips[f.clip]["height"], labels.clips[f.clip]["width"]
        if len(f.boxes):
            assert f.boxes[:, 0].min() >= 0 and f.boxes[:, 1].min() >= 0
            assert f.boxes[:, 2].max() <= w and f.boxes[:, 3].max() <= h
            assert np.all(f.boxes[:, 2] > f.boxes[:, 0]) and np.all(f.boxes[:, 3] > f.boxes[:, 1])
    # enough people to score: held-out vtest frames have several non-difficult boxes each on average
    positives = sum(int((~f.difficult).sum()) for f in held if f.clip == "vtest")
    assert positives >= 4 * len([f for f in held if f.clip == "vtest"])


def test_every_box_edit_is_logged_with_a_reason():
    log = json.loads((DATASET / "people_box_edits.json").read_text())["edits"]
    assert len(log) > 100
    for e in log:
        assert e["reason"] and e["action"] in ("set", "fit", "add", "del", "split", "difficult", "easy")
        assert e["old_box"] is not None or e["action"] == "add"


def test_heldout_frames_decode_to_the_recorded_pixels(labels, assets_root):
    frames = load_person_labels("heldout", assets_root=assets_root, clips=["vtest"])
    assert len(frames) == len(labels.select("heldout", "vtest"))
    for f in frames:
        assert f.image.shape == (576, 768, 3) and f.split == "heldout"
        assert frame_sha256(f.image) == f.sha256


def test_training_frames_never_yield_a_heldout_or_guard_frame(labels, assets_root):
    seen = [(clip, i) for clip, i, image in training_frames(assets_root, step=5, clips=["vtest"])]
    assert seen and all(labels.split_of(c, i) == "train" for c, i in seen)
    labelled = {f.index for f in labels.select("train", "vtest")}
    assert any(i not in labelled for _, i in seen)  # unlabeled training frames are included
    held = [i for s in labels.segments_of("heldout", "vtest") for i in range(s.start, s.stop)]
    assert not set(held) & {i for _, i in seen}


def _tampered(tmp_path, change):
    data = json.loads(DEFAULT_LABELS.read_text())
    change(data)
    p = tmp_path / "labels.json"
    p.write_text(json.dumps(data))
    return p


def test_a_broken_split_is_refused(tmp_path):
    def short_guard(d):
        d["clips"]["vtest"]["segments"][1]["start"] = d["clips"]["vtest"]["segments"][0]["stop"] + 5

    with pytest.raises(InputFileError, match="guard frames"):
        read_person_labels(_tampered(tmp_path, short_guard))

    def frame_in_gap(d):
        d["frames"][0]["frame"] = d["clips"]["vtest"]["segments"][0]["stop"] + 1

    with pytest.raises(InputFileError, match="lies in no"):
        read_person_labels(_tampered(tmp_path, frame_in_gap))
    with pytest.raises(InputFileError, match="cannot read"):
        read_person_labels(tmp_path / "missing.json")


def test_a_different_decoder_is_detected(tmp_path, assets_root):
    def wrong_hash(d):
        for f in d["frames"]:
            if f["clip"] == "carphone":
                f["sha256"] = "0" * 64

    p = _tampered(tmp_path, wrong_hash)
    with pytest.raises(InputFileError, match="different pixels"):
        load_person_labels(assets_root=assets_root, path=p, clips=["carphone"])
    frames = load_person_labels(assets_root=assets_root, path=p, clips=["carphone"], verify="warn")
    assert len(frames) == 6 and all(f.image.shape == (144, 176, 3) for f in frames)


def test_the_line_crossing_count_matches_the_people_app_line():
    from jetforge.apps.tasks.people import VTEST_LINE

    data = json.loads((DATASET / "vtest_line_crossings.json").read_text())
    x1, y1, x2, y2 = [float(v) for v in VTEST_LINE.split("=")[1].split(",")]
    assert data["line"]["a"] == [x1, y1] and data["line"]["b"] == [x2, y2]
    events = data["crossings"]
    frames = [e["frame"] for e in events]
    assert frames == sorted(frames) and 0 <= frames[0] and frames[-1] < data["clip"]["frames"]
    assert data["counts"]["forward"] == sum(e["direction"] == "forward" for e in events)
    assert data["counts"]["backward"] == sum(e["direction"] == "backward" for e in events)
    assert all(y1 <= e["feet_y"] <= y2 for e in events)  # a crossing is on the segment, by definition
