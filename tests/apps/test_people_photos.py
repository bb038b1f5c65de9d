"""A folder of photos in ``app people`` (issue 28 item 2): every photo's people are shown and counted at once,
without waiting for a track, and each photo gets its annotated JPEG.

The reference is independent of the app: the same detector run directly on each photo, its detections kept at
the tracker's ``new_track`` confidence.  Before this change every photo counted 0 (a track needs 3 hits in a
row, and photos 80 frames apart of a walkway never give a second)."""

import json

import pytest

from jetforge.apps.tasks.people import PeopleTask
from jetforge.apps.tasks.photos import is_photo, photo_event
from jetforge.apps.video.sources.base import Frame
from jetforge.assets import asset_path
from jetforge.cli.main import main as cli_main
from jetforge.vision.hog import HogPeopleDetector, score_to_unit
from jetforge.vision.tracking import tracker_options

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Four frames of OpenCV's vtest.avi, 80 frames apart, as JPEGs (one downscaled: photos differ in size)."""
    folder = tmp_path_factory.mktemp("photos")
    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    index = 0
    kept = 0
    while kept < 4:
        ok, image = cap.read()
        assert ok
        if index % 80 == 0:
            if kept == 3:
                image = cv2.resize(image, (384, 288), interpolation=cv2.INTER_AREA)
            cv2.imwrite(str(folder / ("photo_%d.jpg" % kept)), image)
            kept += 1
        index += 1
    cap.release()
    return folder


def test_each_photo_counts_its_own_people_and_gets_an_annotated_jpeg(photos, tmp_path):
    out = tmp_path / "run"
    assert cli_main(["app", "people", "--source", str(photos), "--detector", "hog", "--out", str(out), "-q",
                     "--no-plots", "--no-video"]) == 0
    records = [json.loads(l) for l in (out / "events.jsonl").read_text().splitlines()]
    frames = [r for r in records if r.get("type") == "people"]
    assert [r["image"] for r in frames] == ["photo_%d.jpg" % i for i in range(4)]
    detector = HogPeopleDetector()
    threshold = tracker_options("people").new_track
    for r in frames:
        image = cv2.imread(str(photos / r["image"]))
        dets = detector(image)
        expected = int((score_to_unit(dets.scores) >= threshold).sum())
        assert r["photo"] is True and r["tracks"] == []
        assert r["people"] == expected == len(r["people_boxes"]), r["image"]
        written = cv2.imread(str(out / "images" / r["image"]))
        assert written is not None and written.shape == image.shape  # each at its own size, not letterboxed
    assert sum(r["people"] for r in frames) >= 4  # a walkway with people in every photo
    metrics = json.loads((out / "metrics.json").read_text())
    images = [s for s in metrics["sinks"] if s["kind"] == "images"]
    assert images and images[0]["frames"] == 4
    assert max(s["max_people_in_frame"] for s in metrics["results"]["streams"]) == max(r["people"] for r in frames)


def test_video_frames_still_track():
    task = PeopleTask(HogPeopleDetector(), streams=1)
    assert not is_photo(Frame(index=0, timestamp=0.0, image=None))  # a video frame names no file
    assert is_photo(Frame(index=0, timestamp=0.0, image=None, name="a.jpg"))
    assert photo_event(None, score_to_unit, 0.6) == {"photo": True, "detections": None, "tracks": [], "people": 0,
                                                      "people_boxes": []}
    assert task.tracker_options.min_hits > 1  # why photos cannot wait for a track
