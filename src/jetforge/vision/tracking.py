"""Multi-object tracking: a Kalman filter per track and ByteTrack-style IoU association, with its option presets.

:class:`Tracker` follows boxes from frame to frame.  Each track has a constant-velocity
Kalman filter over (centre x, centre y, aspect ratio w/h, height) as in SORT/DeepSORT/
ByteTrack.  Association per frame, as in ByteTrack (Zhang et al., ECCV 2022):

1. predict every track;
2. match high-score detections to tracked *and* lost tracks by IoU;
3. match the remaining tracked tracks to the low-score detections (a partly
   occluded person often still scores low: this keeps its identity);
4. match unconfirmed (new) tracks to the high-score detections left over;
5. start a new tentative track from each high-score detection still unmatched.

Matching is greedy on IoU, highest first, above a threshold.  A track becomes
*confirmed* (and gets its public id) after ``min_hits`` consecutive matches; a
confirmed track that misses detections stays *lost*, coasting on its prediction,
for up to ``max_age`` frames, and takes its old id back when it is matched again -
ids stay stable through short occlusions.

The settings jetforge's apps track with are presets (:data:`TRACKER_PRESETS`, :func:`tracker_options`): the
people preset is what the people and action apps, per-track clip calibration and the action recipe's track
cache use (the action models were trained on its tracks); the faces preset is the faces app's.  Counting
tracks across a line and in zones: :mod:`jetforge.vision.counting`.  Pure numpy; Python 3.8.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.errors import ConfigError, UnknownNameError
from jetforge.vision.boxes import greedy_match, iou_matrix

Point = Tuple[float, float]


# -- boxes ---------------------------------------------------------------------------------------

def _to_xyah(box: np.ndarray) -> np.ndarray:
    x1, y1, x2, y2 = [float(v) for v in box]
    w, h = max(x2 - x1, 1e-3), max(y2 - y1, 1e-3)
    return np.array([x1 + w / 2.0, y1 + h / 2.0, w / h, h])


def _to_xyxy(xyah: np.ndarray) -> np.ndarray:
    cx, cy, a, h = [float(v) for v in xyah[:4]]
    h = max(h, 1e-3)
    w = max(a, 1e-3) * h
    return np.array([cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0])


# -- Kalman filter -------------------------------------------------------------------------------

class KalmanBox:
    """Constant-velocity Kalman filter over (cx, cy, a, h) and their velocities (ByteTrack's noise model)."""

    STD_POS = 1.0 / 20.0
    STD_VEL = 1.0 / 160.0

    def __init__(self, box: np.ndarray) -> None:
        z = _to_xyah(box)
        self.F = np.eye(8)
        self.F[:4, 4:] = np.eye(4)
        self.H = np.eye(4, 8)
        self.x = np.concatenate([z, np.zeros(4)])
        h = z[3]
        std = [2 * self.STD_POS * h, 2 * self.STD_POS * h, 1e-2, 2 * self.STD_POS * h,
               10 * self.STD_VEL * h, 10 * self.STD_VEL * h, 1e-5, 10 * self.STD_VEL * h]
        self.P = np.diag(np.square(std))

    def predict(self) -> None:
        h = max(self.x[3], 1e-3)
        std = [self.STD_POS * h, self.STD_POS * h, 1e-2, self.STD_POS * h,
               self.STD_VEL * h, self.STD_VEL * h, 1e-5, self.STD_VEL * h]
        if self.x[3] + self.x[7] <= 1.0:  # never predict a collapsing box
            self.x[7] = 0.0
        self.x = self.F @ self.x
        self.P = self.F @ self.P @ self.F.T + np.diag(np.square(std))

    def update(self, box: np.ndarray) -> None:
        z = _to_xyah(box)
        h = max(self.x[3], 1e-3)
        R = np.diag(np.square([self.STD_POS * h, self.STD_POS * h, 1e-1, self.STD_POS * h]))
        S = self.H @ self.P @ self.H.T + R
        K = self.P @ self.H.T @ np.linalg.inv(S)
        self.x = self.x + K @ (z - self.H @ self.x)
        self.P = (np.eye(8) - K @ self.H) @ self.P

    @property
    def box(self) -> np.ndarray:
        return _to_xyxy(self.x)


# -- tracks and the tracker ------------------------------------------------------------------------

@dataclass
class Track:
    """One tracked object; ``id`` is 0 until the track is confirmed."""

    kf: KalmanBox
    score: float
    uid: int  # internal, never shown
    id: int = 0
    hits: int = 1
    age: int = 1  # frames since it started
    missed: int = 0  # frames since its last match
    state: str = "tentative"  # tentative | tracked | lost
    history: List[Point] = field(default_factory=list)  # anchor points of the last frames

    @property
    def box(self) -> np.ndarray:
        return self.kf.box

    @property
    def anchor(self) -> Point:
        """Bottom centre of the box: where a person stands."""
        x1, _, x2, y2 = self.box
        return (float((x1 + x2) / 2.0), float(y2))

    def to_dict(self) -> Dict[str, object]:
        return {"id": self.id, "box": [round(float(v), 1) for v in self.box], "score": round(float(self.score), 3),
                "age": self.age, "state": self.state}


@dataclass
class TrackerOptions:
    """ByteTrack's thresholds: ``high``/``low`` split detections by score; ``new_track`` starts tracks;
    IoU thresholds per association step; ``min_hits`` to confirm; ``max_age`` frames kept when lost."""

    high: float = 0.5
    low: float = 0.1
    new_track: float = 0.6
    match_iou: float = 0.2
    low_match_iou: float = 0.5
    unconfirmed_iou: float = 0.3
    min_hits: int = 3
    max_age: int = 30

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high:
            raise ConfigError("tracker thresholds need 0 <= low <= high, got low=%r high=%r" % (self.low, self.high))
        if self.min_hits < 1 or self.max_age < 0:
            raise ConfigError("tracker min_hits must be >= 1 and max_age >= 0")


class Tracker:
    """Tracks boxes across frames; :meth:`update` takes one frame's detections and returns the active tracks."""

    def __init__(self, options: Optional[TrackerOptions] = None) -> None:
        self.options = options or TrackerOptions()
        self.tracks: List[Track] = []
        self.frame = 0
        self._next_uid = 1
        self._next_id = 1

    @property
    def ids_issued(self) -> int:
        """How many distinct confirmed ids this tracker has handed out."""
        return self._next_id - 1

    def update(self, boxes: np.ndarray, scores: np.ndarray) -> List[Track]:
        """Associate this frame's detections (N, 4) x1y1x2y2 and scores (N,); returns confirmed tracks seen now."""
        o = self.options
        self.frame += 1
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        for t in self.tracks:
            t.kf.predict()
            t.age += 1
        high = [i for i in range(len(scores)) if scores[i] >= o.high]
        low = [i for i in range(len(scores)) if o.low <= scores[i] < o.high]
        confirmed = [t for t in self.tracks if t.state in ("tracked", "lost")]
        tentative = [t for t in self.tracks if t.state == "tentative"]

        matched: List[Track] = []

        def assign(tracks: List[Track], dets: List[int], threshold: float) -> Tuple[List[Track], List[int]]:
            iou = iou_matrix(np.array([t.box for t in tracks]).reshape(-1, 4), boxes[dets])
            pairs, free_t, free_d = greedy_match(iou, threshold)
            for r, c in pairs:
                self._hit(tracks[r], boxes[dets[c]], float(scores[dets[c]]))
                matched.append(tracks[r])
            return [tracks[r] for r in free_t], [dets[c] for c in free_d]

        rest_tracks, rest_high = assign(confirmed, high, o.match_iou)  # step 2
        still_tracked = [t for t in rest_tracks if t.state == "tracked"]
        unmatched_tracked, _ = assign(still_tracked, low, o.low_match_iou)  # step 3
        unmatched_new, rest_high = assign(tentative, rest_high, o.unconfirmed_iou)  # step 4
        for i in rest_high:  # step 5
            if scores[i] >= o.new_track:
                self.tracks.append(Track(KalmanBox(boxes[i]), float(scores[i]), uid=self._next_uid))
                self._next_uid += 1
        matched_ids = {id(t) for t in matched}
        for t in self.tracks:
            if id(t) in matched_ids or t.age == 1 and t.hits == 1 and t.missed == 0:
                continue
            t.missed += 1
            if t.state == "tracked":
                t.state = "lost"
        # Tentative tracks that miss once, and lost tracks past max_age, are removed.
        self.tracks = [t for t in self.tracks if not (t.state == "tentative" and t.missed > 0)
                       and not (t.state == "lost" and t.missed > o.max_age)]
        for t in self.tracks:
            if t.missed == 0:
                t.history.append(t.anchor)
                del t.history[:-32]
        return [t for t in self.tracks if t.state == "tracked" and t.missed == 0]

    def coast(self) -> List[Track]:
        """A frame without detection (the detector runs on every N-th frame only): every track moves on its
        Kalman prediction, nothing is matched, missed or removed; returns the tracks :meth:`update` returned last
        (confirmed, seen at the last detection), at their predicted places."""
        self.frame += 1
        for t in self.tracks:
            t.kf.predict()
            t.age += 1
        shown = [t for t in self.tracks if t.state == "tracked" and t.missed == 0]
        for t in shown:
            t.history.append(t.anchor)
            del t.history[:-32]
        return shown

    def _hit(self, track: Track, box: np.ndarray, score: float) -> None:
        track.kf.update(box)
        track.score = score
        track.hits += 1
        track.missed = 0
        if track.state == "lost":
            track.state = "tracked"
        elif track.state == "tentative" and track.hits >= self.options.min_hits:
            track.state = "tracked"
            track.id = self._next_id
            self._next_id += 1


# The apps' tracker settings.  "people": the people app (its --max-age changes max_age), the action app, per-track
# clip calibration and the action recipe's track cache -- the bundled action model was trained on these tracks;
# "faces": the faces app (MTCNN's scores are high and sure: higher thresholds, shorter memory).
TRACKER_PRESETS: Dict[str, Dict[str, Any]] = {
    "people": dict(high=0.5, low=0.2, new_track=0.55, min_hits=2, max_age=20),
    "faces": dict(high=0.9, low=0.7, new_track=0.9, match_iou=0.2, min_hits=2, max_age=15),
}


def tracker_options(preset: str, **overrides: Any) -> TrackerOptions:
    """A new :class:`TrackerOptions` of the named preset (:data:`TRACKER_PRESETS`), with ``overrides`` applied."""
    if preset not in TRACKER_PRESETS:
        raise UnknownNameError("tracker preset", preset, TRACKER_PRESETS)
    return dataclasses.replace(TrackerOptions(**TRACKER_PRESETS[preset]), **overrides)


__all__ = ["KalmanBox", "TRACKER_PRESETS", "Track", "Tracker", "TrackerOptions", "tracker_options"]
