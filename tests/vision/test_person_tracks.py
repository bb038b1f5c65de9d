"""Person tracks called directly (jetforge.vision.person_tracks): the tracks the people app follows, no CLI.

Before issue 23 the action recipe ran ``jetforge app people`` in a subprocess and ``jetforge calibrate`` built a
tracker closure in the CLI; both now call these functions.  Here they are held to the people app's own task
(the same detector, the tracker's people preset, every frame in order).
"""

import numpy as np
import pytest

from jetforge.vision.detections import Detections
from jetforge.vision.person_tracks import person_tracker_factory, person_tracks, track_video
from jetforge.vision.tracking import Tracker, tracker_options


class Walker:
    """A scripted detector: one person walking right, another standing, a false alarm on every 5th frame."""

    label = "scripted"

    def __init__(self):
        self.frame = 0

    def __call__(self, image):
        f, self.frame = self.frame, self.frame + 1
        boxes = [[100.0 + 6 * f, 200.0, 140.0 + 6 * f, 300.0], [400.0, 180.0, 440.0, 280.0]]
        scores = [0.9, 0.7 if f % 3 else 0.3]
        if f % 5 == 0:
            boxes.append([600.0, 50.0, 620.0, 90.0])
            scores.append(0.56)
        return Detections(np.array(boxes, np.float32), np.array(scores, np.float32))

    @staticmethod
    def to_confidence(scores):
        return np.asarray(scores, np.float64)


def test_person_tracks_is_the_people_preset_tracker_over_the_detector():
    track, detector, tracker = person_tracks(Walker()), Walker(), Tracker(tracker_options("people"))
    frame = np.zeros((4, 4, 3), np.uint8)
    for index in range(40):
        found = detector(frame)
        want = [(t.id, t.box) for t in tracker.update(found.boxes, found.scores)]
        got = track(index, frame)
        assert [tid for tid, _ in got] == [tid for tid, _ in want]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want))
    assert tracker.ids_issued == 2


def test_the_factory_makes_a_new_tracker_per_video():
    make = person_tracker_factory(Walker())
    first, second = make(), make()
    frame = np.zeros((4, 4, 3), np.uint8)
    for index in range(5):
        first(index, frame)
    assert [tid for tid, _ in second(0, frame)] == []  # a new tracker: nothing confirmed on its first frame


@pytest.mark.slow  # HOG over 20 frames, twice: ~5 s of CPU
def test_track_video_gives_the_people_apps_tracks():
    """HOG (no exported model needed) through track_video and through the people app's task, frame by frame."""
    pytest.importorskip("cv2")
    from jetforge.apps.pipeline.stages import Item
    from jetforge.apps.tasks.people import PeopleTask
    from jetforge.apps.video import open_source
    from jetforge.assets import asset_path
    from jetforge.vision.hog import HogPeopleDetector

    video = asset_path("opencv_samples", "vtest.avi")
    got = [(i, [t.to_dict() for t in tracks]) for i, tracks in track_video(video, HogPeopleDetector(), max_frames=20)]
    task = PeopleTask(HogPeopleDetector(), tracker_options=tracker_options("people"))
    want = []
    with open_source(video) as source:
        for frame in source:
            if frame.index >= 20:
                break
            dets = task.infer([task.preprocess(frame)])[0]
            want.append((frame.index, task.postprocess(Item(frame=frame, stream=0, output=dets))["tracks"]))
    assert [i for i, _ in got] == list(range(20))
    assert [tracks for _, tracks in got] == [tracks for _, tracks in want]
    assert any(tracks for _, tracks in want)  # people are confirmed within the first 2 s
