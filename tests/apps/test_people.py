"""`jetforge app people` headless on the first 40 frames of OpenCV's vtest.avi, checked against a hand count;
`jetforge app classify` on bikes.mp4; and the failure paths of the app command (bad, truncated, unreachable)."""

import json

import pytest

from jetforge.cli.main import main

# Hand count, frames 0-39 of vtest.avi (768x576, 10 fps), made by writing every 10th frame (cropped to
# x 150-768, y 120-400, with the counting line x = 360 drawn) to PNGs and looking at them:
# - exactly one person crosses x = 360: the man in a dark jacket who starts on the left (x ~ 265 at frame 0)
#   and walks right, past the line between frames 10 and 20 (x ~ 330 at frame 10, ~ 375 at frame 20);
#   for the line drawn top to bottom (360,140 -> 360,420) that move is "backward";
# - five different people are in view: that man; a man in black walking left from mid-frame (x ~ 665);
#   a man coming down from the car park at the top (x ~ 515); a man in a red/blue jacket and a blond woman
#   who enter from the right around frame 10-20. The first three meet by the lamp post from frame 30 on.
# The app's default detector (the SSDLite CNN) finds all five, but the two who enter from the right walk side by
# side and overlap from frame 23 on: their scores drop to 0.2-0.5 and the tracker restarts them (seen: 8 ids for
# the 5 people, 3 of them short re-starts of that pair); the three who meet at the lamp post may split too.
# Tolerance on the number of distinct tracks: -1 / +3.
HAND_CROSSINGS = {"forward": 0, "backward": 1}
HAND_PEOPLE = 5


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def people_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("people")
    code = main(["app", "people", "-q", "--max-frames", "40", "--out", str(out_dir), "--json"])
    assert code == 0
    events = [json.loads(x) for x in (out_dir / "events.jsonl").read_text().splitlines()]
    return out_dir, json.loads((out_dir / "metrics.json").read_text()), events


def test_people_counts_match_the_hand_count(people_run):
    _, metrics, events = people_run
    stream = metrics["results"]["streams"][0]
    line = stream["lines"][0]
    assert line["name"] == "walkway" and line["line"] == [360.0, 140.0, 360.0, 420.0]
    assert {"forward": line["forward"], "backward": line["backward"]} == HAND_CROSSINGS
    assert HAND_PEOPLE - 1 <= stream["tracks"] <= HAND_PEOPLE + 3
    crossings = [e for e in events if e["type"] == "line_cross"]
    assert len(crossings) == 1 and 11 <= crossings[0]["frame"] <= 20 and crossings[0]["direction"] == "backward"
    assert 340 <= crossings[0]["point"][0] <= 400  # it happened at the line


def test_people_events_and_metrics(people_run):
    out_dir, metrics, events = people_run
    frames = [e for e in events if e["type"] == "people"]
    assert [e["frame"] for e in frames] == list(range(40))
    assert frames[10]["t"] == pytest.approx(1.0)
    for e in frames:
        assert e["people"] == len(e["tracks"]) and e["latency_ms"] > 0
        assert set(e["counts"]) == {"walkway"} and set(e["occupancy"]) == {"crossing"}
        for d in e["detections"]:
            assert len(d) == 5 and 0 <= d[0] < d[2] <= 768 and 0 <= d[1] < d[3] <= 576
    # Ids are stable: the man who crosses the line is one track from his first confirmed frame to frame 39.
    crosser = [e for e in events if e["type"] == "line_cross"][0]["track"]
    seen = [e["frame"] for e in frames if any(t["id"] == crosser for t in e["tracks"])]
    assert seen[0] <= 3 and seen[-1] >= 25
    assert max(e["people"] for e in frames) >= 3
    assert metrics["task"] == "people" and metrics["frames"] == 40 and metrics["status"] == "finished"
    assert "SSDLite-MobileNetV2" in metrics["model"]["model"] and "CNN" in metrics["model"]["model"]
    assert metrics["model"]["detector"]["score_threshold"] == 0.2 and metrics["model"]["detector"]["spinning"] is False
    # the first WARMUP_FRAMES (5) frames are reported apart, the other 35 in the latency statistics
    assert metrics["warmup"]["frames"] == 5 and metrics["latency_ms"]["stages"]["infer"]["count"] == 35
    assert metrics["warmup"]["latency_ms"]["stages"]["infer"]["count"] == 5
    assert sorted(p.name for p in out_dir.iterdir()) == ["annotated.mp4", "events.jsonl", "fps.png",
                                                          "latency.png", "metrics.json"]


def test_people_video_has_the_overlay(people_run):
    import cv2

    out_dir, _, _ = people_run
    cap = cv2.VideoCapture(str(out_dir / "annotated.mp4"))
    n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 30)
    ok, image = cap.read()
    cap.release()
    assert n == 40 and ok and image.shape == (576, 768, 3)
    line_pixels = image[200:400, 359:362]
    assert (line_pixels[:, :, 2] > 180).mean() > 0.5 and (line_pixels[:, :, 0] < 90).mean() > 0.5  # the yellow line


def test_classify_app_headless(capsys, tmp_path, mobilenet_onnx, bikes_clip):
    code, out, err = run_cli(capsys, "app", "classify", "-q", "--model", mobilenet_onnx, "--source", bikes_clip,
                             "--max-frames", 6, "--out", tmp_path, "--threads", 1, "--no-plots")
    assert code == 0, err
    assert "ONNX Runtime" in out and "FPS end to end" in out and "top-1     switch x6" in out
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["frame"] for e in events] == list(range(6))
    assert all(e["top"][0]["label"] == "switch" and len(e["top"]) == 5 for e in events)


def one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("jetforge: error: ")
    return lines[0]


def test_truncated_video_keeps_the_events_and_says_so(capsys, tmp_path):
    from jetforge.assets import asset_path

    data = asset_path("opencv_samples", "vtest.avi").read_bytes()
    clip = tmp_path / "cut.avi"
    clip.write_bytes(data[: len(data) // 60])
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "app", "people", "-q", "--source", clip, "--out", out_dir, "--no-plots",
                             "--detector", "hog", "--hog-scale", "1.2")
    line = one_error_line(err)
    assert code == 1 and "cut.avi ended after" in line and "of the 795 frames its header announces" in line
    assert "are kept in %s" % out_dir in line
    events = [json.loads(x) for x in (out_dir / "events.jsonl").read_text().splitlines()]
    n = json.loads((out_dir / "metrics.json").read_text())["frames"]
    assert n > 0 and len([e for e in events if e["type"] == "people"]) == n
    assert "FPS end to end" in out


def test_unreachable_stream_and_bad_paths_are_one_line(capsys, tmp_path):
    code, _, err = run_cli(capsys, "app", "people", "--source", "rtsp://127.0.0.1:9/cam", "--max-reconnects", 0,
                           "--out", tmp_path / "o")
    assert code == 1 and "cannot open RTSP stream rtsp://127.0.0.1:9/cam" in one_error_line(err)
    code, _, err = run_cli(capsys, "app", "people", "--source", tmp_path / "nope.avi", "--out", tmp_path / "o")
    assert code == 1 and "does not exist" in one_error_line(err)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 2048)
    code, _, err = run_cli(capsys, "app", "people", "--source", bad, "--out", tmp_path / "o")
    assert code == 1 and "cannot decode video" in one_error_line(err)
    code, _, err = run_cli(capsys, "app", "people", "--line", "1,2,3", "--out", tmp_path / "o")
    assert code == 1 and "--line needs 4 numbers" in one_error_line(err)
    assert not (tmp_path / "o").exists()
