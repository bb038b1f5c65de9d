"""The people app's per-track state ends with the track: a camera app running for days must not grow with the
number of people it has seen (the soak benchmark found LineCounter and Zone keeping every track id forever).

Synthetic detections through the real PeopleTask.postprocess (tracker, line counter, zone), one person after
another walking across the counting line and through the zone, each gone for longer than the tracker keeps a
lost track: the counts must stay exact while the state holds only the tracks that still exist.
"""

import numpy as np

from jetforge.apps.pipeline.stages import Item
from jetforge.apps.tasks.people import PeopleTask
from jetforge.vision.counting import LineCounter, Zone
from jetforge.vision.tracking import TrackerOptions
from jetforge.vision.detections import Detections

PEOPLE = 100
WALK = 30  # frames a person is in view
GAP = 25  # frames with nobody: longer than max_age, so every track has ended before the next person


class FixedScoreDetector:
    """Stands in for a detector: postprocess never calls it; its scores are already confidences."""

    label = "synthetic"

    @staticmethod
    def to_confidence(scores):
        return scores


def test_counts_stay_exact_and_state_holds_only_live_tracks_over_a_hundred_people():
    task = PeopleTask(FixedScoreDetector(), lines=[LineCounter((360.0, 140.0), (360.0, 420.0), "walkway")],
                      zones=[Zone([(330, 180), (560, 180), (600, 330), (330, 330)], "crossing")],
                      tracker_options=TrackerOptions(high=0.5, low=0.2, new_track=0.55, min_hits=2, max_age=20))
    line, zone = task.lines[0][0], task.zones[0][0]
    largest_state = 0
    for person in range(PEOPLE):
        for k in range(WALK + GAP):
            if k < WALK:  # left to right across x = 360, feet at y = 300 (inside the zone past x = 330)
                x = 300.0 + 4.0 * k
                dets = Detections(np.array([[x - 20.0, 200.0, x + 20.0, 300.0]]), np.array([0.9]))
            else:
                dets = Detections(np.zeros((0, 4)), np.zeros(0))
            task.postprocess(Item(frame=None, stream=0, output=dets))
            largest_state = max(largest_state, len(line._last), len(line._settled), len(line._passed),
                                len(zone.visitors))
    assert task.trackers[0].ids_issued == PEOPLE
    # each person counted once, in their direction: left to right across a line drawn downwards is "backward"
    assert (line.forward, line.backward) == (0, PEOPLE)
    assert zone.to_dict()["visitors"] == PEOPLE
    assert largest_state == 1  # one person in view at a time: never more than that one track's state
    assert not line._last and not zone.visitors  # everyone has left and their tracks have ended


def test_a_lost_track_that_comes_back_keeps_its_line_state():
    # a track missing for a few frames (an occlusion) is still the tracker's: its settled side must survive
    line = LineCounter((360.0, 140.0), (360.0, 420.0))
    task = PeopleTask(FixedScoreDetector(), lines=[line])
    line = task.lines[0][0]
    path = [300.0 + 4.0 * k for k in range(30)]
    for k, x in enumerate(path):
        occluded = 12 <= k < 18  # on the line (x = 348 .. 368): not seen
        boxes = np.zeros((0, 4)) if occluded else np.array([[x - 20.0, 200.0, x + 20.0, 300.0]])
        task.postprocess(Item(frame=None, stream=0, output=Detections(boxes, np.full(len(boxes), 0.9))))
    assert (line.forward, line.backward) == (0, 1)  # counted once, after the occlusion
