"""Clips labelled from person tracks: the velocity rule, the split's guard gap, and the crops on real vtest.avi frames."""

import json

import cv2
import numpy as np
import pytest

from jetforge.compress.action.track_clips import (AWAY_TOWARD, LEFT, RIGHT, STILL, ClipWindow, MotionRule, cut_clips,
                                                  make_windows, read_track_events, split_windows)
from jetforge.errors import InputFileError
from jetforge.runtime.inputs.clip import ClipContract

FPS = 10.0


def _moving(vx, vy, frames=8, height=100.0, x=300.0, y=200.0, jitter=0.0, seed=0):
    """Boxes of a person ``height`` px tall moving (vx, vy) body heights per second at 10 fps."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / FPS
    cx = x + vx * height * t + rng.normal(0, jitter, frames)
    bottom = y + height + vy * height * t + rng.normal(0, jitter, frames)
    return np.stack([cx - 20, bottom - height, cx + 20, bottom], axis=1)


@pytest.mark.parametrize("vx, vy, label", [
    (0.6, 0.0, RIGHT), (-0.5, 0.1, LEFT), (0.0, 0.3, AWAY_TOWARD), (0.05, -0.25, AWAY_TOWARD),
    (0.0, 0.0, STILL), (0.05, 0.05, STILL),
    (0.3, 0.3, None),     # diagonal: neither direction dominates
    (0.3, 0.0, None),     # between standing still (< 0.1) and walking (>= 0.35)
    (0.15, 0.0, None)])
def test_rule_labels_velocities_in_body_heights_per_second(vx, vy, label):
    rule = MotionRule()
    got_vx, got_vy = rule.velocity(_moving(vx, vy), FPS)
    assert got_vx == pytest.approx(vx, abs=1e-9) and got_vy == pytest.approx(vy, abs=1e-9)  # exact lines: exact slopes
    assert rule.label(_moving(vx, vy), FPS) == label


def test_velocity_does_not_depend_on_the_persons_size_or_the_frame_rate_sampling():
    rule = MotionRule()
    near, far = _moving(0.5, 0.0, height=200.0), _moving(0.5, 0.0, height=50.0)
    assert rule.velocity(near, FPS)[0] == pytest.approx(rule.velocity(far, FPS)[0])
    assert rule.velocity(_moving(0.5, 0.0, frames=16), FPS)[0] == pytest.approx(0.5)


def _events(tmp_path, tracks):
    frames = sorted({f for boxes in tracks.values() for f in boxes})
    lines = []
    for f in frames:
        lines.append({"type": "people", "stream": 0, "frame": f,
                      "tracks": [{"id": tid, "box": list(map(float, boxes[f])), "score": 0.9, "age": 3,
                                  "state": "tracked"} for tid, boxes in tracks.items() if f in boxes]})
    lines.append({"type": "summary"})
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in lines))
    return path


def test_windows_from_the_people_apps_events_and_the_guard_gap(tmp_path):
    walker = _moving(0.6, 0.0, frames=60)
    stander = _moving(0.0, 0.0, frames=60, x=500.0)
    tracks = {1: {f: walker[f] for f in range(60)}, 2: {f: stander[f] for f in range(60) if f != 33}}  # 2 misses 33
    read = read_track_events(_events(tmp_path, tracks))
    assert sorted(read) == [1, 2] and len(read[1]) == 60 and 33 not in read[2]
    windows = make_windows(read, 8, 2, MotionRule(), FPS)
    assert {w.label for w in windows if w.track == 1} == {RIGHT}
    assert {w.label for w in windows if w.track == 2} == {STILL}
    assert not [w for w in windows if w.track == 2 and w.start <= 33 < w.start + 8]  # no window over a missed frame
    train, held = split_windows(windows, 30, 40)
    assert train and held
    assert max(w.start + 7 for w in train) < 30 and min(w.start for w in held) >= 40  # no frame on both sides


def test_a_file_that_is_not_the_events_is_one_clear_error(tmp_path):
    bad = tmp_path / "events.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(InputFileError, match="events.jsonl"):
        read_track_events(bad)
    bad.write_text(json.dumps({"type": "people", "frame": 0, "tracks": []}))
    with pytest.raises(InputFileError, match="no person tracks"):
        read_track_events(bad)


def test_cut_clips_are_the_contracts_own_clips_on_real_frames():
    """One pass over vtest.avi gives, per window, exactly what ClipContract.clip makes of the same frames."""
    from jetforge.assets import asset_path

    video = asset_path("opencv_samples", "vtest.avi")
    contract = ClipContract(window=4, crop_height=32, crop_width=32, color="rgb")
    windows = [ClipWindow(1, 3, RIGHT, _moving(0.6, 0.0, frames=4, x=350.0, y=150.0)),
               ClipWindow(2, 5, STILL, _moving(0.0, 0.0, frames=4, x=740.0, y=470.0))]  # leaves the frame
    clips = cut_clips(video, windows, contract)
    assert clips.shape == (2, 4, 32, 32, 3) and clips.dtype == np.uint8
    cap = cv2.VideoCapture(str(video))
    frames = [cap.read()[1] for _ in range(9)]
    cap.release()
    for clip, w in zip(clips, windows):
        ref = contract.clip(frames[w.start:w.start + 4], w.boxes)
        np.testing.assert_array_equal(contract.normalize(clip), ref)  # the same crops, the same arithmetic


@pytest.mark.slow  # the CNN detector over 40 frames twice, and one export of it: ~15 s of CPU
def test_the_track_cache_holds_the_people_apps_tracks_made_without_the_cli(tmp_path, monkeypatch):
    """The cache is the tracks `jetforge app people` follows (same detector, tracker preset and frames), made by
    calling jetforge.vision directly: no process is started (before issue 23 it ran the CLI in a subprocess)."""
    import subprocess

    pytest.importorskip("torch")  # exporting the person detector (the recipe's side)
    from jetforge.assets import asset_path
    from jetforge.cli.main import main
    from jetforge.compress.action.track_clips import ensure_track_cache

    video = asset_path("opencv_samples", "vtest.avi")
    assert main(["-q", "app", "people", "--detector", "ssd", "--no-video", "--no-plots", "--out",
                 str(tmp_path / "app"), "--max-frames", "40", "--source", str(video)]) == 0
    app = read_track_events(tmp_path / "app" / "events.jsonl")

    def no_process(*args, **kwargs):
        raise AssertionError("the track cache started a process: %s" % (args,))

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    events = ensure_track_cache(video, tmp_path / "cache", max_frames=40)
    assert events == tmp_path / "cache" / "events.jsonl" and (tmp_path / "cache" / "person_detector.onnx").is_file()
    cache = read_track_events(events)
    assert len(app) >= 3 and sorted(cache) == sorted(app)  # several people walk in vtest's first 4 s
    for tid in app:
        assert sorted(cache[tid]) == sorted(app[tid])
        assert all(np.array_equal(cache[tid][f], app[tid][f]) for f in app[tid])
    assert ensure_track_cache(video, tmp_path / "cache") == events  # made once, then read
