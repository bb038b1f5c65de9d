"""The tracker (Kalman + ByteTrack-style association), line crossing and zones, on scripted box motion."""

import numpy as np
import pytest

from jetforge.errors import ConfigError, UnknownNameError
from jetforge.vision.boxes import greedy_match, iou_matrix
from jetforge.vision.counting import LineCounter, Zone, parse_line, parse_zone
from jetforge.vision.tracking import TRACKER_PRESETS, Tracker, TrackerOptions, tracker_options


def box(cx, cy, w=40.0, h=100.0):
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def test_iou_and_greedy_matching():
    a = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float)
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30], [100, 100, 110, 110]], float)
    iou = iou_matrix(a, b)
    assert iou[0, 0] == pytest.approx(50 / 150) and iou[1, 1] == 1.0 and iou[0, 2] == 0.0
    pairs, rows, cols = greedy_match(iou, 0.3)
    assert sorted(pairs) == [(0, 0), (1, 1)] and rows == [] and cols == [2]
    assert greedy_match(iou, 0.5)[0] == [(1, 1)]
    assert iou_matrix(np.zeros((0, 4)), b).shape == (0, 3)


def test_ids_are_confirmed_after_min_hits_and_stay_through_an_occlusion():
    tracker = Tracker(TrackerOptions(min_hits=2, max_age=10))
    ids = []
    for f in range(30):
        dets, scores = [box(100 + 6 * f, 200)], [0.9]  # A walks right
        if not 12 <= f < 18:  # B walks left and is hidden for 6 frames
            dets.append(box(400 - 6 * f, 205))
            scores.append(0.9)
        tracks = tracker.update(np.array(dets), np.array(scores))
        ids.append(sorted((round(t.box[0]), t.id) for t in tracks))
    assert ids[0] == []  # tentative on the first frame
    assert [i for _, i in ids[1]] == [1, 2]
    assert len(ids[14]) == 1  # only A is visible during the occlusion
    assert tracker.ids_issued == 2  # B came back under its old id: no new id was issued
    assert {i for row in ids for _, i in row} == {1, 2}
    # A (moving right) keeps id 1 on the left at frame 5 and on the right at frame 29.
    a_id = [i for x, i in ids[5] if x < 200][0]
    assert any(i == a_id and x > 250 for x, i in ids[29])


def test_low_score_detections_keep_a_track_alive_and_noise_starts_nothing():
    tracker = Tracker(TrackerOptions(high=0.5, low=0.1, new_track=0.6, min_hits=2))
    for f in range(4):
        tracker.update(np.array([box(100 + 5 * f, 100)]), np.array([0.9]))
    for f in range(4, 8):  # partly occluded: only a weak detection
        tracks = tracker.update(np.array([box(100 + 5 * f, 100)]), np.array([0.2]))
        assert [t.id for t in tracks] == [1]
    for _ in range(3):  # a one-frame blip never becomes a track
        tracker.update(np.array([box(500, 500)]), np.array([0.3]))
    assert tracker.ids_issued == 1


def test_lost_tracks_are_forgotten_after_max_age():
    tracker = Tracker(TrackerOptions(min_hits=1, max_age=3))
    tracker.update(np.array([box(100, 100)]), np.array([0.9]))
    tracker.update(np.array([box(100, 100)]), np.array([0.9]))
    for _ in range(5):
        tracker.update(np.zeros((0, 4)), np.zeros((0,)))
    assert tracker.tracks == []
    assert [t.id for t in tracker.update(np.array([box(100, 100)]), np.array([0.9]))] == []  # a new, tentative one


class _T:
    def __init__(self, tid, x, y):
        self.id, self._x, self._y = tid, x, y

    @property
    def anchor(self):
        return (self._x, self._y)


def test_line_counter_counts_each_direction_once_per_crossing():
    line = LineCounter((100, 0), (100, 200), name="door", margin=0)  # vertical, drawn downwards; no hysteresis
    xs = [80, 90, 99, 101, 102, 99, 101, 120, 130, 90]  # crosses right, back, right again, then left
    events = []
    for x in xs:
        events += line.update([_T(7, x, 150)])
    directions = [e["direction"] for e in events]
    # left->right of a downward line is "backward"; moves that stay on one side (101->102, 120->130) count nothing.
    assert directions == ["backward", "forward", "backward", "forward"]
    assert (line.forward, line.backward, line.total) == (2, 2, 4)
    outside = LineCounter((100, 0), (100, 50))
    outside.update([_T(1, 80, 150)])
    assert outside.update([_T(1, 120, 150)]) == []  # passes below the end of the segment


def _feed(line, xs, y=150, tid=7):
    events = []
    for x in xs:
        events += line.update([_T(tid, x, y)])
    return [e["direction"] for e in events]


def test_line_margin_ignores_jitter_on_the_line_and_counts_clear_crossings():
    # The same walk as above with a 10 px margin: 101/102/99/101 stay within 10 px of x = 100 (the band), so
    # only the two clear passes count: 80 -> 120 (backward, counted at 120, the first point >= 10 px past),
    # and 130 -> 90 (forward, 90 is exactly 10 px past: the margin is inclusive).
    line = LineCounter((100, 0), (100, 200), margin=10)
    assert _feed(line, [80, 90, 99, 101, 102, 99, 101, 120, 130, 90]) == ["backward", "forward"]
    # Standing on the line and jittering by +-8 px for 50 frames counts nothing; then walking off counts once.
    standing = LineCounter((100, 0), (100, 200), margin=10)
    jitter = [100 + (8 if i % 2 else -8) for i in range(50)]
    assert _feed(standing, [70] + jitter) == []
    assert _feed(standing, [115]) == ["backward"]
    # Into the band and back to the side it came from: nothing, however often.
    back = LineCounter((100, 0), (100, 200), margin=10)
    assert _feed(back, [70, 95, 105, 95, 80, 104, 85]) == []
    # The margin is a perpendicular distance: a slanted line (3-4-5 triangle) gives the same verdicts.
    slanted = LineCounter((0, 0), (300, 400), margin=10)  # length 500; the positive side's unit normal (-0.8, 0.6)
    assert slanted.distance((300, 0)) == pytest.approx(-240.0) and slanted.distance((0, 50)) == pytest.approx(30.0)
    p0, p_in, p_out = (150 - 8 * 0.8, 200 + 8 * 0.6), (150 + 8 * 0.8, 200 - 8 * 0.6), (150 + 12 * 0.8, 200 - 12 * 0.6)
    events = []
    for tid, p in ((3, (150 - 20 * 0.8, 200 + 20 * 0.6)), (3, p0), (3, p_in), (3, p0), (3, p_in), (3, p_out)):
        events += slanted.update([_T(tid, *p)])
    assert [e["direction"] for e in events] == ["backward"] and slanted.total == 1  # + 20 px -> - 12 px


def test_line_margin_needs_the_segment_itself_and_rejects_bad_margins():
    line = LineCounter((100, 0), (100, 50), margin=10)  # a short segment; the path passes below its end
    assert _feed(line, [70, 130]) == []
    # Two tracks crossing are counted separately.
    two = LineCounter((100, 0), (100, 200), margin=5)
    assert _feed(two, [80, 120], tid=1) == ["backward"]
    assert _feed(two, [80, 120], tid=2) == ["backward"]  # each track counts on its own
    assert (two.forward, two.backward) == (0, 2)
    with pytest.raises(ConfigError, match="margin must be 0 or more"):
        LineCounter((0, 0), (1, 1), margin=-1)
    assert parse_line("a=0,0,10,0", margin=4.0).margin == 4.0
    assert two.to_dict()["margin"] == 5.0


def test_tracker_coasts_between_detections():
    tracker = Tracker(TrackerOptions(min_hits=2))
    seen = []
    for i in range(4):  # a box moving 10 px right per frame, confirmed on its second detection
        seen = tracker.update(np.array([box(100 + 10 * i, 100)]), np.array([0.9]))
    assert [t.id for t in seen] == [1]
    before = seen[0].box.copy()
    coasted = tracker.coast()
    # constant velocity: the prediction moves on by about the learnt 10 px per frame (the filter has seen 4
    # frames, so its velocity estimate is close to, not exactly, 10: 5 px tolerance)
    assert [t.id for t in coasted] == [1] and 5 < coasted[0].box[0] - before[0] < 15
    assert tracker.tracks[0].missed == 0 and tracker.tracks[0].state == "tracked"
    # the next detection continues the same id
    assert [t.id for t in tracker.update(np.array([box(150, 100)]), np.array([0.9]))] == [1]


def test_zone_occupancy_and_parsing():
    zone = parse_zone("lobby=0,0,100,0,100,100,0,100")
    assert zone.name == "lobby" and zone.contains((50, 50)) and not zone.contains((150, 50))
    assert zone.update([_T(1, 10, 10), _T(2, 90, 90), _T(3, 200, 10)]) == 2
    zone.update([_T(1, 10, 10)])
    assert zone.to_dict()["peak"] == 2 and zone.to_dict()["visitors"] == 2 and zone.occupancy == 1
    line = parse_line("0,300,768,300")
    assert line.name == "line" and line.a == (0.0, 300.0)
    with pytest.raises(ConfigError, match="4 numbers"):
        parse_line("1,2,3")
    with pytest.raises(ConfigError, match="at least 3 points"):
        parse_zone("1,2,3,4")
    with pytest.raises(ConfigError, match="comma-separated numbers"):
        parse_line("a,b,c,d")
    with pytest.raises(ConfigError, match="equal end points"):
        parse_line("1,1,1,1")


def test_the_presets_are_the_settings_the_apps_tracked_with():
    """Before issue 23 the people app, the action app and ``calibrate --clips per-track`` each wrote out the people
    settings and the faces app its own; the presets hold exactly those values, and each call is a new object."""
    assert tracker_options("people") == TrackerOptions(high=0.5, low=0.2, new_track=0.55, min_hits=2, max_age=20)
    assert tracker_options("people", max_age=7) == TrackerOptions(high=0.5, low=0.2, new_track=0.55, min_hits=2,
                                                                  max_age=7)
    assert tracker_options("faces") == TrackerOptions(high=0.9, low=0.7, new_track=0.9, match_iou=0.2, min_hits=2,
                                                      max_age=15)
    assert tracker_options("people") is not tracker_options("people") and sorted(TRACKER_PRESETS) == ["faces",
                                                                                                       "people"]
    with pytest.raises(UnknownNameError, match="peple"):
        tracker_options("peple")


def test_the_apps_track_with_the_presets():
    from jetforge.apps.tasks.faces import FacesTask
    from jetforge.apps.tasks.people import PeopleTask

    class _Detector:
        label = "stub"

    assert PeopleTask(_Detector()).tracker_options == tracker_options("people")
    assert FacesTask(_Detector()).tracker_options == tracker_options("faces")
