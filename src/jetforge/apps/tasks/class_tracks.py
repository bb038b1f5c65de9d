"""Tracking and counting per class, the one implementation behind ``app detect`` and ``app people``.

Each tracked class of each stream has its own :class:`~jetforge.vision.tracking.Tracker` and its own copies of the
counting lines and zones (:class:`ClassState`).  Why one tracker per class rather than one class-aware tracker: the
tracker's association and its presets stay exactly what the people app, the action app and the action recipe were
measured with, and a detection can only ever continue a track of its own class (a car is never matched to the
person who walked past it).  Track ids are therefore numbered per class (``car #3``, ``person #3``); a track's class
is in its event.  A model that flips an object between two classes (car/truck) splits it into two tracks.

:class:`ClassTracking` holds the states of every stream and class, steps them with one frame's detections, and
draws what they hold (lines with their counts, zones with their occupancy, tracks with ids and trails).  The people
app is this with the one class ``person``; its events keep their older, class-free shape (``apps/tasks/people.py``).
Torch-free; OpenCV inside the drawing functions.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.pipeline.stages import draw_label, track_colour
from jetforge.vision.counting import LineCounter, Zone
from jetforge.vision.tracking import Track, Tracker, TrackerOptions

LINE_COLOUR = (0, 220, 255)
ZONE_COLOUR = (255, 200, 0)

#: one class's detections of one frame: boxes (K, 4) in frame pixels and the tracker's confidences (K,); None on a
#: frame the detector skipped (the tracks coast on their prediction)
ClassInput = Optional[Tuple[np.ndarray, np.ndarray]]


@dataclass
class ClassStep:
    """What one class's state made of one frame: its confirmed tracks now, the line crossings that happened, and
    each zone's occupancy."""

    tracks: List[Track]
    crossings: List[Dict[str, Any]]
    occupancy: Dict[str, int]


class ClassState:
    """One class in one stream: its tracker, its own copies of the lines and zones, its latest tracks and peak."""

    def __init__(self, options: TrackerOptions, lines: Sequence[LineCounter], zones: Sequence[Zone]) -> None:
        self.tracker = Tracker(options)
        self.lines = [LineCounter(l.a, l.b, l.name, margin=l.margin) for l in lines]
        self.zones = [Zone(z.points, z.name) for z in zones]
        self.last: List[Track] = []
        self.peak = 0

    def step(self, found: ClassInput) -> ClassStep:
        """Track one frame (``found``: see :data:`ClassInput`), then count along the tracks."""
        tracks = self.tracker.coast() if found is None else self.tracker.update(found[0], found[1])
        self.last = tracks
        crossings: List[Dict[str, Any]] = []
        for line in self.lines:
            crossings += line.update(tracks)
        occupancy = {z.name: z.update(tracks) for z in self.zones}
        live = {t.id for t in self.tracker.tracks}  # lost tracks may come back; removed ones never do
        for counter in self.lines + self.zones:  # type: ignore[operator]
            counter.forget(live)
        self.peak = max(self.peak, len(tracks))
        return ClassStep(tracks, crossings, occupancy)

    def summary(self) -> Dict[str, Any]:
        return {"tracks": self.tracker.ids_issued, "max_in_frame": self.peak,
                "lines": [l.to_dict() for l in self.lines], "zones": [z.to_dict() for z in self.zones]}


class ClassTracking:
    """The :class:`ClassState` of every stream and tracked class (``classes``: their names, in slot order)."""

    def __init__(self, classes: Sequence[str], streams: int, options: TrackerOptions,
                 lines: Sequence[LineCounter] = (), zones: Sequence[Zone] = ()) -> None:
        self.classes: List[str] = []
        self.options = options
        self.lines = list(lines)  # the templates each class copies
        self.zones = list(zones)
        self.states: List[List[ClassState]] = [[] for _ in range(streams)]
        for name in classes:
            self.add(name)

    def add(self, name: str) -> None:
        """Start tracking class ``name`` in every stream (nothing when it is tracked already)."""
        if name in self.classes:
            return
        self.classes.append(name)
        for states in self.states:
            states.append(ClassState(self.options, self.lines, self.zones))

    def step(self, stream: int, per_class: Optional[Sequence[ClassInput]]) -> List[ClassStep]:
        """Step every class of ``stream`` (``per_class``: one input per class slot; None: the detector skipped the
        frame, every class coasts)."""
        states = self.states[stream]
        inputs = per_class if per_class is not None else [None] * len(states)
        return [state.step(found) for state, found in zip(states, inputs)]

    def summary(self, stream: int) -> Dict[str, Dict[str, Any]]:
        return {name: state.summary() for name, state in zip(self.classes, self.states[stream])}

    def draw(self, image: np.ndarray, stream: int, tracks: Sequence[Dict[str, Any]],
             track_label: Callable[[Dict[str, Any]], str]) -> None:
        """Zones with occupancy, lines with counts (per class where there are several), the frame's ``tracks`` (event
        dicts) labelled by ``track_label``, and each class's trails."""
        import cv2

        states = self.states[stream]
        if not states:
            return
        for k, zone in enumerate(states[0].zones):
            pts = np.array(zone.points, np.int32).reshape(-1, 1, 2)
            cv2.polylines(image, [pts], True, ZONE_COLOUR, 2, cv2.LINE_AA)
            x, y = int(zone.points[0][0]), int(zone.points[0][1])
            text = "%s: %d inside" % (zone.name, sum(s.zones[k].occupancy for s in states))
            if len(states) > 1:
                text += " (%s)" % ", ".join("%s %d" % (c, s.zones[k].occupancy) for c, s in zip(self.classes, states))
            draw_label(image, text, (x + 4, y + 18), ZONE_COLOUR, 0.5)
        for k, line in enumerate(states[0].lines):
            a, b = (int(line.a[0]), int(line.a[1])), (int(line.b[0]), int(line.b[1]))
            cv2.line(image, a, b, LINE_COLOUR, 2, cv2.LINE_AA)
            text = "%s  fwd %d  back %d" % (line.name, sum(s.lines[k].forward for s in states),
                                            sum(s.lines[k].backward for s in states))
            if len(states) > 1:
                text += "  (%s)" % ", ".join("%s %d/%d" % (c, s.lines[k].forward, s.lines[k].backward)
                                             for c, s in zip(self.classes, states))
            draw_label(image, text, (min(a[0], b[0]) + 4, min(a[1], b[1]) - 8), LINE_COLOUR, 0.5)
        for t in tracks:
            x1, y1, x2, y2 = [int(round(v)) for v in t["box"]]
            colour = track_colour(t["id"])
            cv2.rectangle(image, (x1, y1), (x2, y2), colour, 2)
            draw_label(image, track_label(t), (x1, max(12, y1 - 4)), colour, 0.5)
        for state in states:
            for tr in state.last:
                pts = np.array(tr.history[-20:], np.int32).reshape(-1, 1, 2)
                if len(pts) > 1:
                    cv2.polylines(image, [pts], False, track_colour(tr.id), 1, cv2.LINE_AA)

    def crossed(self, stream: int) -> int:
        """Line crossings so far in ``stream``, every class and line together."""
        return sum(l.total for s in self.states[stream] for l in s.lines)

    def ids_issued(self, stream: int) -> int:
        """Distinct confirmed tracks so far in ``stream``, every class together."""
        return sum(s.tracker.ids_issued for s in self.states[stream])


__all__ = ["ClassInput", "ClassState", "ClassStep", "ClassTracking"]
