"""Counting tracks: line crossings (by direction, with hysteresis) and zone occupancy, and a crossing-count check.

:class:`LineCounter` counts tracks whose anchor point (bottom centre of the box: the feet) crosses a line segment,
by direction; :class:`Zone` counts the tracks inside a polygon and remembers its peak and its visitors;
:func:`match_crossings` compares an app's ``line_cross`` events with a reference count (the hand count of vtest's
crossings, ``datasets/people/vtest_line_crossings.json``).  The tracks are :class:`jetforge.vision.tracking.Track`
objects (anything with an ``id`` and an ``anchor``).  Pure numpy; Python 3.8.
"""

from typing import Any, Dict, List, Sequence, Set

import numpy as np

from jetforge.config import Bound
from jetforge.errors import ConfigError
from jetforge.vision.tracking import Point, Track


def _side(p: Point, a: Point, b: Point) -> float:
    """> 0 left of the directed line a->b (in image coordinates, y down: the right-hand side on screen)."""
    return (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])


def _segments_cross(p: Point, q: Point, a: Point, b: Point) -> bool:
    d1, d2 = _side(p, a, b), _side(q, a, b)
    d3, d4 = _side(a, p, q), _side(b, p, q)
    return ((d1 > 0) != (d2 > 0)) and ((d3 > 0) != (d4 > 0)) and d1 != 0 and d3 != d4


class LineCounter:
    """Counts tracks whose anchor crosses the segment a->b and gets clearly past it, by direction.

    ``forward`` counts moves from the negative to the positive side of the directed
    line a->b (for a line drawn left to right, that is from above it to below it on
    screen), ``backward`` the opposite.

    Hysteresis (``margin``, pixels): a box's bottom edge jitters by a few pixels from
    frame to frame, so a person standing on the line, or walking along it, would
    otherwise cross it back and forth and be counted again and again.  Each track has a
    *settled side*: the side its anchor was last seen on at least ``margin`` pixels
    (perpendicular distance) from the line; a track is born settled on the side it first
    appears on.  A crossing counts when the anchor, having passed through the segment
    itself (not around its ends) since it left its settled side, is at least ``margin``
    pixels beyond the line on the other side; that side becomes the settled one.
    Wandering into the band and back counts nothing, however often it happens.  With
    ``margin=0`` every pass through the segment counts (the side changes at once).
    """

    def __init__(self, a: Point, b: Point, name: str = "line", margin: float = 10.0) -> None:
        if a == b:
            raise ConfigError("line %s has two equal end points %s" % (name, a))
        if not margin >= 0:
            raise ConfigError("line %s: the crossing margin must be 0 or more pixels, got %r" % (name, margin),
                              hint="e.g. --line-margin 10")
        self.a = (float(a[0]), float(a[1]))
        self.b = (float(b[0]), float(b[1]))
        self.name = name
        self.margin = float(margin)
        self.forward = 0
        self.backward = 0
        self._length = float(np.hypot(self.b[0] - self.a[0], self.b[1] - self.a[1]))
        self._last: Dict[int, Point] = {}
        self._settled: Dict[int, int] = {}  # track id -> +1 / -1
        self._passed: Dict[int, bool] = {}  # went through the segment since leaving its settled side

    @property
    def total(self) -> int:
        return self.forward + self.backward

    def distance(self, p: Point) -> float:
        """Signed perpendicular distance in pixels from the line through a and b (> 0: the forward side)."""
        return _side(p, self.a, self.b) / self._length

    def update(self, tracks: Sequence[Track]) -> List[Dict[str, object]]:
        """Feed the confirmed tracks of one frame; returns the crossings that happened now."""
        events = []
        for t in tracks:
            p = t.anchor
            d = self.distance(p)
            prev = self._last.get(t.id)
            self._last[t.id] = p
            if prev is None:
                self._settled[t.id] = 1 if d > 0 else -1
                self._passed[t.id] = False
                continue
            if _segments_cross(prev, p, self.a, self.b) or _touches(prev, p, self.a, self.b):
                self._passed[t.id] = True
            settled = self._settled[t.id]
            if abs(d) < self.margin or d == 0:
                continue
            side = 1 if d > 0 else -1
            if side == settled:
                self._passed[t.id] = False  # back where it was: whatever happened in the band does not count
                continue
            self._settled[t.id] = side
            if not self._passed[t.id]:
                continue  # changed side around an end of the segment
            self._passed[t.id] = False
            direction = "forward" if side > 0 else "backward"
            if direction == "forward":
                self.forward += 1
            else:
                self.backward += 1
            events.append({"type": "line_cross", "line": self.name, "track": t.id, "direction": direction,
                           "point": [round(p[0], 1), round(p[1], 1)]})
        return events

    def forget(self, live_ids: Set[int]) -> None:
        """Drop the state of tracks that no longer exist (``live_ids``: the tracker's tracks, lost ones included).

        Track ids are never reused, so a finished track's state is dead weight: kept, it grew by a few hundred
        bytes per person ever seen (found by the soak benchmark: a camera app's memory grew without bound).
        """
        for state in (self._last, self._settled, self._passed):
            for gone in [k for k in state if k not in live_ids]:
                del state[gone]

    def to_dict(self) -> Dict[str, object]:
        return {"name": self.name, "line": [self.a[0], self.a[1], self.b[0], self.b[1]], "margin": self.margin,
                "forward": self.forward, "backward": self.backward, "total": self.total}


def _touches(p: Point, q: Point, a: Point, b: Point) -> bool:
    """Whether the step p->q ends exactly on the segment a-b (a point on the line, between its ends)."""
    if _side(q, a, b) != 0:
        return False
    return min(a[0], b[0]) <= q[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= q[1] <= max(a[1], b[1])


class Zone:
    """A polygon; :meth:`update` gives how many tracks stand in it (anchor inside) and remembers the peak."""

    def __init__(self, points: Sequence[Point], name: str = "zone") -> None:
        if len(points) < 3:
            raise ConfigError("zone %s needs at least 3 points, got %d" % (name, len(points)))
        self.points = [(float(x), float(y)) for x, y in points]
        self.name = name
        self.occupancy = 0
        self.peak = 0
        self.visitors: set = set()  # ids of live tracks that have been inside (each counted once)
        self._visitors_gone = 0  # visitors whose tracks ended (forgotten, still counted)

    def contains(self, p: Point) -> bool:
        """Even-odd rule (ray casting)."""
        x, y = p
        inside = False
        pts = self.points
        j = len(pts) - 1
        for i in range(len(pts)):
            xi, yi = pts[i]
            xj, yj = pts[j]
            if (yi > y) != (yj > y) and x < (xj - xi) * (y - yi) / (yj - yi) + xi:
                inside = not inside
            j = i
        return inside

    def update(self, tracks: Sequence[Track]) -> int:
        inside = [t.id for t in tracks if self.contains(t.anchor)]
        self.occupancy = len(inside)
        self.peak = max(self.peak, self.occupancy)
        self.visitors.update(inside)
        return self.occupancy

    @property
    def visitor_count(self) -> int:
        """Distinct tracks that have been inside, since the start."""
        return len(self.visitors) + self._visitors_gone

    def forget(self, live_ids: Set[int]) -> None:
        """Drop the ids of tracks that no longer exist, keeping their count (see :meth:`LineCounter.forget`)."""
        gone = self.visitors - live_ids
        self._visitors_gone += len(gone)
        self.visitors -= gone

    def to_dict(self) -> Dict[str, object]:
        return {"name": self.name, "points": [list(p) for p in self.points], "occupancy": self.occupancy,
                "peak": self.peak, "visitors": self.visitor_count}


def match_crossings(events: Sequence[Dict[str, Any]], hand: Sequence[Dict[str, Any]],
                    tolerance: int) -> Dict[str, Any]:
    """How well an app's ``line_cross`` events agree with a reference count (e.g. a hand count).

    ``events``: the app's events (others are ignored), each with ``frame`` and ``direction``; ``hand``: the
    reference crossings, each with ``frame`` and ``direction``.  Each reference crossing takes the nearest unused
    app crossing of the same direction within ``tolerance`` frames (in reference order); returns the app's
    counts, the number matched, the reference crossings missed and the app crossings left unmatched.
    """
    app = [e for e in events if e.get("type") == "line_cross"]
    used: set = set()
    matched: List[Dict[str, Any]] = []
    missed: List[Dict[str, Any]] = []
    for h in hand:
        best = None
        for j, e in enumerate(app):
            if j in used or e["direction"] != h["direction"]:
                continue
            gap = abs(int(e["frame"]) - int(h["frame"]))
            if gap <= tolerance and (best is None or gap < best[1]):
                best = (j, gap)
        if best is None:
            missed.append(h)
        else:
            used.add(best[0])
            matched.append({"hand_frame": h["frame"], "app_frame": app[best[0]]["frame"],
                            "direction": h["direction"]})
    extra = [{"frame": e["frame"], "direction": e["direction"], "track": e["track"]}
             for j, e in enumerate(app) if j not in used]
    return {"app": {"forward": sum(e["direction"] == "forward" for e in app),
                    "backward": sum(e["direction"] == "backward" for e in app), "total": len(app)},
            "matched": len(matched), "missed": [{"frame": h["frame"], "direction": h["direction"],
                                                 "person": h.get("person", "")} for h in missed],
            "unmatched_app_crossings": extra, "pairs": matched}


def parse_line(text: str, name: str = "line", margin: float = 10.0) -> LineCounter:
    """``x1,y1,x2,y2`` (pixels) -> LineCounter with crossing ``margin``; ``name=x1,y1,x2,y2`` names it."""
    if "=" in text:
        name, text = text.split("=", 1)
    values = _numbers(text, "--line")
    if len(values) != 4:
        raise ConfigError("--line needs 4 numbers x1,y1,x2,y2, got %r" % text, hint="e.g. --line 0,300,768,300")
    return LineCounter((values[0], values[1]), (values[2], values[3]), name=name.strip() or "line", margin=margin)


def parse_zone(text: str, name: str = "zone") -> Zone:
    """``x1,y1,x2,y2,x3,y3,...`` (a polygon, pixels) -> Zone; ``name=...`` names it."""
    if "=" in text:
        name, text = text.split("=", 1)
    values = _numbers(text, "--zone")
    if len(values) < 6 or len(values) % 2:
        raise ConfigError("--zone needs at least 3 points as x1,y1,x2,y2,x3,y3,..., got %r" % text,
                          hint="e.g. --zone door=100,300,300,300,300,500,100,500")
    return Zone([(values[i], values[i + 1]) for i in range(0, len(values), 2)], name=name.strip() or "zone")


#: A --line/--zone coordinate, in pixels: OpenCV draws with 32-bit integer coordinates (2^31 is refused by
#: ``cv2.line``), and NaN made the writer fail on every frame while the run still exited 0.
COORDINATE = Bound(float, -(2 ** 31 - 1), 2 ** 31 - 1, why="pixels; OpenCV draws with 32-bit coordinates")


def _numbers(text: str, flag: str) -> List[float]:
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ConfigError("%s takes comma-separated numbers, got %r" % (flag, text)) from None
    for v in values:
        COORDINATE.check(v, "%s %s" % (flag, text))
    return values


__all__ = ["LineCounter", "Zone", "match_crossings", "parse_line", "parse_zone"]
