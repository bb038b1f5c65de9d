"""The labelled person-box set (package data, ``vision/data/people_boxes.json``) and its train / held-out split.

The set holds hand-checked person boxes on frames of the project's real clips (vtest.avi above
all), each frame with its provenance (asset, file, frame index, SHA-256 of the decoded pixels).
Each clip is cut into contiguous *training* and *held-out* segments with at least
``guard_frames`` unused frames between a training and a held-out segment.  Calibration and
distillation code takes frames only from training segments (:func:`training_frames`, which also
yields the unlabeled frames there) and never a held-out one; accuracy is reported on held-out
frames (:func:`load_person_labels` with ``split="heldout"``).  The file is checked on reading:
overlapping segments, short guards or a labelled frame outside its segment are an error.

Frames are decoded with OpenCV from the asset cache (``assets_root`` is the folder holding
``<asset>/<file>``: ``jetforge.assets.asset_dir(name).parent`` in the jetforge cache); each
labelled frame's pixels are hashed and compared with the recorded hash, so a decoder that gives
different pixels is caught (``verify="error"``, the default) or reported (``"warn"``).

numpy and OpenCV only; no torch.  The set ships with jetforge (:data:`DEFAULT_LABELS`, in an installed wheel as in a
checkout); the tool that made it and its provenance (pre-labels, the hand edits, how the labels were made) are in
the repository's ``datasets/people/`` (``README.md``, ``label_people.py``).
"""

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import InputFileError
from jetforge.jsonfile import ValueRefused, expect, expect_number, expect_text, read_json
from jetforge.optional import require

log = logging.getLogger(__name__)

DEFAULT_LABELS = Path(__file__).resolve().parent / "data" / "people_boxes.json"
FORMAT = "jetforge-person-boxes/1"
SPLITS = ("train", "heldout")
VERIFY = ("error", "warn", "off")
PathLike = Union[str, Path]


@dataclass(frozen=True)
class Segment:
    """Frames ``start`` .. ``stop - 1`` of one clip, all in one split."""

    clip: str
    split: str
    start: int
    stop: int

    def __contains__(self, index: int) -> bool:
        return self.start <= index < self.stop


@dataclass
class LabelledFrame:
    """One labelled frame: boxes (N, 4) x1, y1, x2, y2 in pixels, ``difficult`` flags (N,), provenance."""

    clip: str
    asset: str
    file: str
    index: int
    split: str
    sha256: str
    boxes: np.ndarray
    difficult: np.ndarray
    image: Optional[np.ndarray] = None


@dataclass
class PersonLabels:
    """The whole set: labelled frames, every clip's segments and facts (frame count, size)."""

    frames: List[LabelledFrame]
    segments: List[Segment]
    clips: Dict[str, Dict[str, object]]
    guard_frames: int
    path: Path

    def select(self, split: Optional[str] = None, clip: Optional[str] = None) -> List[LabelledFrame]:
        _check_split(split)
        return [f for f in self.frames if (split is None or f.split == split) and (clip is None or f.clip == clip)]

    def segments_of(self, split: str, clip: Optional[str] = None) -> List[Segment]:
        _check_split(split)
        return [s for s in self.segments if s.split == split and (clip is None or s.clip == clip)]

    def split_of(self, clip: str, index: int) -> Optional[str]:
        """``"train"``, ``"heldout"`` or None (a guard frame, or outside every segment)."""
        for s in self.segments:
            if s.clip == clip and index in s:
                return s.split
        return None


def _check_split(split: Optional[str]) -> None:
    if split is not None and split not in SPLITS:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("split", split, SPLITS)


def frame_sha256(image: np.ndarray) -> str:
    """SHA-256 over ``b"<h>x<w>x<c>:"`` + the uint8 pixels (BGR, as OpenCV decodes them), C order."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    head = ("%dx%dx%d:" % (image.shape + (1,) * (3 - image.ndim))[:3]).encode()
    return hashlib.sha256(head + image.tobytes()).hexdigest()


def read_person_labels(path: Optional[PathLike] = None) -> PersonLabels:
    """Read and check the label file (no video is decoded).

    Read with the strict JSON reader (duplicate keys, NaN, infinities, deep nesting and lone surrogates refused)
    and checked with its shared value checks: no value is coerced (``"5"`` is no frame number, ``5.7`` is not
    frame 5), frame numbers and ``guard_frames`` are integers from 0 to :data:`MAX_FRAME`, a box is 4 numbers.
    No message quotes the file's text (a file named by mistake may hold a secret).
    """
    p = Path(path) if path is not None else DEFAULT_LABELS
    hint = "jetforge's own set is %s (the default); pass the path of a file in its format" % DEFAULT_LABELS
    data = read_json(p, "person labels", InputFileError, hint=hint)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputFileError("%s is not a %s file" % (p, FORMAT), hint=hint)
    try:
        guard = _index(data["guard_frames"], "guard_frames")
        clips = expect(data["clips"], dict, "clips")
        segments = [Segment(expect_text(c, "a clip name", 200), expect_text(s["split"], "a segment's split", 20),
                            _index(s["start"], "a segment's start"), _index(s["stop"], "a segment's stop"))
                    for c, spec in clips.items()
                    for s in expect(expect(spec, dict, "a clip")["segments"], list, "a clip's segments")]
        frames = [_frame(expect(f, dict, "a frame")) for f in expect(data["frames"], list, "frames")]
    except KeyError as err:  # the key is one this code asked for, never text from the file
        raise InputFileError("person labels %s: missing field %s" % (p, err), hint=hint) from None
    except ValueRefused as err:  # names the field and the type or range found, never a string from the file
        raise InputFileError("person labels %s: %s" % (p, err), hint=hint) from None
    except (TypeError, ValueError, OverflowError) as err:  # messages would quote the file's values: not shown
        raise InputFileError("person labels %s: a field has a value of the wrong type or range (%s)"
                             % (p, type(err).__name__), hint=hint) from None
    labels = PersonLabels(frames=frames, segments=segments, clips=clips, guard_frames=guard, path=p)
    _check_split_layout(labels)
    return labels


MAX_FRAME = 10 ** 9  # frame numbers and guard lengths: a billion frames is 1.1 years of 30 FPS video


def _index(value: Any, what: str) -> int:
    return int(expect_number(value, what, 0, MAX_FRAME, integer=True))


def _frame(entry: Dict[str, Any]) -> LabelledFrame:
    boxes = []
    for b in expect(entry["boxes"], list, "a frame's boxes"):
        box = expect(expect(b, dict, "a box")["box"], list, "a box")
        if len(box) != 4:
            raise ValueRefused("a box has %d numbers; it needs 4 (x1, y1, x2, y2)" % len(box))
        boxes.append([expect_number(v, "a box coordinate", -1e6, 1e6) for v in box])
    return LabelledFrame(clip=expect_text(entry["clip"], "a frame's clip", 200),
                         asset=expect_text(entry["asset"], "a frame's asset", 200),
                         file=expect_text(entry["file"], "a frame's file", 1000),
                         index=_index(entry["frame"], "a frame number"),
                         split=expect_text(entry["split"], "a frame's split", 20),
                         sha256=expect_text(entry["sha256"], "a frame's sha256", 64),
                         boxes=np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
                         difficult=np.asarray([expect(b["difficult"], bool, "a box's difficult flag")
                                               for b in entry["boxes"]], dtype=bool))


def _check_split_layout(labels: PersonLabels) -> None:
    """No overlap, guards of ``guard_frames`` between splits, every labelled frame inside its split's segment."""
    p = labels.path
    for clip in labels.clips:
        segs = sorted((s for s in labels.segments if s.clip == clip), key=lambda s: s.start)
        for s in segs:
            if s.split not in SPLITS or not 0 <= s.start < s.stop:
                raise InputFileError("%s: clip %s has a bad segment %s" % (p, clip, s))
        for a, b in zip(segs, segs[1:]):
            if b.start < a.stop:
                raise InputFileError("%s: clip %s segments %d..%d and %d..%d overlap"
                                     % (p, clip, a.start, a.stop - 1, b.start, b.stop - 1))
            if a.split != b.split and b.start - a.stop < labels.guard_frames:
                raise InputFileError("%s: clip %s has only %d guard frames between a %s and a %s segment (needs %d)"
                                     % (p, clip, b.start - a.stop, a.split, b.split, labels.guard_frames))
    for f in labels.frames:
        if f.clip not in labels.clips:
            raise InputFileError("%s: frame %d names unknown clip %r" % (p, f.index, f.clip))
        if labels.split_of(f.clip, f.index) != f.split:
            raise InputFileError("%s: %s frame %d is labelled %s but lies in no %s segment"
                                 % (p, f.clip, f.index, f.split, f.split))
        if len(f.boxes) and (np.any(f.boxes[:, 2] <= f.boxes[:, 0]) or np.any(f.boxes[:, 3] <= f.boxes[:, 1])):
            raise InputFileError("%s: %s frame %d has an empty box" % (p, f.clip, f.index))


def _clip_path(labels: PersonLabels, clip: str, assets_root: PathLike) -> Path:
    spec = labels.clips[clip]
    path = Path(assets_root) / str(spec["asset"]) / str(spec["file"])
    if not path.is_file():
        raise InputFileError("clip %s is not at %s" % (clip, path),
                             hint="fetch it with `jetforge assets fetch %s` and pass the cache's assets folder"
                                  % spec["asset"])
    return path


def _iter_decode(path: Path, wanted: Sequence[int]) -> Iterator[Tuple[int, np.ndarray]]:
    """Decode a clip sequentially, yielding the wanted frames in order (exact indices: seeking is not exact
    in every container); one frame in memory at a time."""
    cv2 = require("cv2", "decoding the labelled clips")
    todo = set(wanted)
    cap = cv2.VideoCapture(str(path))
    index = 0
    try:
        while todo:
            ok, image = cap.read()
            if not ok:
                break
            if index in todo:
                todo.discard(index)
                yield index, image
            index += 1
    finally:
        cap.release()
    if todo:
        raise InputFileError("%s ended before frame %d (decoded %d frames)" % (path, min(todo), index),
                             hint="the file differs from the labelled one; re-fetch the asset")


def _verify(frame: LabelledFrame, image: np.ndarray, verify: str) -> None:
    if verify == "off" or frame_sha256(image) == frame.sha256:
        return
    message = ("%s frame %d decodes to different pixels than the labelled one (SHA-256 mismatch): this OpenCV/FFmpeg "
               "decoder differs from the labelling one" % (frame.file, frame.index))
    if verify == "warn":
        log.warning("%s; boxes may be off if the frames are shifted", message)
        return
    raise InputFileError(message, hint="check the frames by eye and pass verify='warn' to use them anyway")


def load_person_labels(split: Optional[str] = None, assets_root: Optional[PathLike] = None,
                       path: Optional[PathLike] = None, verify: str = "error",
                       clips: Optional[Iterable[str]] = None) -> List[LabelledFrame]:
    """Labelled frames of ``split`` ("train", "heldout" or None for both), with images when ``assets_root`` is given."""
    if verify not in VERIFY:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("verify mode", verify, VERIFY)
    labels = read_person_labels(path)
    wanted_clips = set(clips) if clips is not None else None
    frames = [f for f in labels.select(split) if wanted_clips is None or f.clip in wanted_clips]
    if assets_root is None:
        return frames
    for clip in sorted({f.clip for f in frames}):
        of_clip = [f for f in frames if f.clip == clip]
        by_index = {f.index: f for f in of_clip}
        for index, image in _iter_decode(_clip_path(labels, clip, assets_root), sorted(by_index)):
            _verify(by_index[index], image, verify)
            by_index[index].image = image
    return frames


def training_frames(assets_root: PathLike, path: Optional[PathLike] = None, step: int = 1,
                    clips: Optional[Iterable[str]] = None) -> Iterator[Tuple[str, int, np.ndarray]]:
    """(clip, frame index, BGR image) for every ``step``-th frame of the training segments, labelled or not.

    Held-out and guard frames are never decoded into the output: this is the only frame source
    calibration and distillation should use from these clips.
    """
    if step < 1:
        raise InputFileError("step must be at least 1, got %d" % step)
    labels = read_person_labels(path)
    for clip in (sorted(labels.clips) if clips is None else list(clips)):
        if clip not in labels.clips:
            from jetforge.errors import UnknownNameError

            raise UnknownNameError("labelled clip", clip, labels.clips)
        wanted = [i for s in labels.segments_of("train", clip) for i in range(s.start, s.stop, step)]
        if not wanted:
            continue
        for index, image in _iter_decode(_clip_path(labels, clip, assets_root), wanted):
            yield clip, index, image


__all__ = ["DEFAULT_LABELS", "LabelledFrame", "PersonLabels", "Segment", "frame_sha256", "load_person_labels",
           "read_person_labels", "training_frames"]
