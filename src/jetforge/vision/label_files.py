"""Your labelled data: COCO JSON, YOLO txt (+ classes file) and Pascal VOC XML, read into the one detection type.

:func:`read_label_set` picks the reader by what it is given and returns a :class:`LabelSet`: per image, its path,
its size, the ground truth as :class:`~jetforge.vision.detections.Detections` (pixel ``x1, y1, x2, y2``, scores 1,
class indices into :attr:`LabelSet.classes`), ``difficult`` flags (boxes neither required nor counted: VOC's
``difficult``, COCO's ``iscrowd``) and an optional group of correlated images (COCO's ``video_id``/``frame_id``):

* ``*.json``: COCO (``images`` with ``file_name``, ``width``, ``height``; ``annotations`` with ``bbox`` ``[x, y, w, h]``
  in pixels; ``categories``); classes are the categories in id order;
* ``*.txt``/``*.names``: a YOLO classes file (one name per line); its folder's images (recursively) are the set,
  each with the label file of the same stem in the parallel ``labels/`` folder (``images/a/b.jpg`` ->
  ``labels/a/b.txt``) or beside it; a line is ``class cx cy w h``, normalised to the image size; an image without a
  label file has no objects (YOLO's convention);
* ``*.xml`` or a folder of them: Pascal VOC; ``<filename>`` is looked up in the sibling ``JPEGImages/`` folder (VOC's
  layout) or beside the XML; ``xmin``..``xmax`` are 1-based inclusive pixels, so ``x1 = xmin - 1``, ``x2 = xmax``.

Files from others are hostile: an image path that leaves the set's folder (absolute, ``..``, a symlink out) is
refused; XML with a DOCTYPE or ENTITY declaration is refused before parsing (entity expansion and external entities
need one; defusedxml's ``forbid_dtd`` rule, with the standard library's parser); numbers must be finite.  Boxes
partly outside their image are **clipped** to it (annotation tools let a drag overshoot the edge by a pixel or two;
the visible part is what a detector can find, and detectors clip their boxes the same way), but a box with **no
area inside** the image is **refused**: it means a wrong image size, swapped corners or ``x, y, w, h`` read as
corners, and dropping it silently would change AP.  Python 3.8, numpy; images are decoded only for YOLO (its boxes
are fractions of the image size).
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union
from xml.etree import ElementTree

import numpy as np

from jetforge.errors import InputFileError
from jetforge.jsonfile import ValueRefused, expect, expect_number, expect_text, read_json, read_text
from jetforge.vision.classes import check_names, read_names_file
from jetforge.vision.detections import Detections

PathLike = Union[str, Path]
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MAX_XML_BYTES = 10 * 1024 * 1024  # a VOC annotation is a few kB
MAX_SIDE = 65535  # pixels: COCO's and VOC's sizes are 16-bit in practice


@dataclass
class LabelledImage:
    """One image of a label set: where it is, its (height, width), its ground truth and difficult flags."""

    path: Path
    image_hw: Tuple[int, int]
    truth: Detections
    difficult: np.ndarray
    group: Optional[str] = None


@dataclass
class LabelSet:
    """The images of one label file, in file order, and the class names their ``truth.classes`` index."""

    images: List[LabelledImage]
    classes: Tuple[str, ...]
    source: Path
    format: str


def inside(root: Path, relative: str, where: str) -> Path:
    """``root / relative``, refused when it leaves ``root`` (absolute, ``..``, or a symlink out)."""
    if not relative or Path(relative).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", relative):
        raise InputFileError("%s: an image path is absolute or empty; paths are relative to %s" % (where, root),
                             hint="write image paths relative to the label file's folder")
    base = root.resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise InputFileError("%s: an image path leaves its folder %s" % (where, root),
                             hint="keep the images under the label file's folder; paths with .. or links out are "
                                  "refused")
    return target


def clip_boxes(boxes: np.ndarray, image_hw: Tuple[int, int], where: str) -> np.ndarray:
    """Clip ``(K, 4)`` boxes to the image; refuse non-finite numbers and boxes with no area inside (module doc)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    if not np.all(np.isfinite(b)):
        raise InputFileError("%s: a box has a NaN or infinite coordinate" % where)
    h, w = image_hw
    clipped = np.stack([np.clip(b[:, 0], 0, w), np.clip(b[:, 1], 0, h), np.clip(b[:, 2], 0, w),
                        np.clip(b[:, 3], 0, h)], axis=1)
    empty = (clipped[:, 2] <= clipped[:, 0]) | (clipped[:, 3] <= clipped[:, 1])
    if empty.any():
        k = int(np.flatnonzero(empty)[0])
        raise InputFileError("%s: box %d has no area inside the %dx%d image (%s)"
                             % (where, k, w, h, ", ".join("%.4g" % v for v in b[k])),
                             hint="boxes are x1, y1, x2, y2 inside the image (COCO: x, y, w, h); check the image "
                                  "size and the box format")
    return clipped.astype(np.float32)


def _image(path: Path, hw: Tuple[int, int], boxes: List[List[float]], classes: List[int], difficult: List[bool],
           where: str, group: Optional[str] = None) -> LabelledImage:
    b = clip_boxes(np.asarray(boxes, np.float64).reshape(-1, 4), hw, where)
    truth = Detections(b, np.ones(len(b), np.float32), np.asarray(classes, np.int64).reshape(-1))
    return LabelledImage(path, hw, truth, np.asarray(difficult, bool).reshape(-1), group)


def read_coco(path: PathLike, images_root: Optional[PathLike] = None, block_frames: int = 10) -> LabelSet:
    """A COCO detection JSON (module docstring); image paths relative to ``images_root`` (default: its folder)."""
    p = Path(path)
    root = Path(images_root) if images_root is not None else p.parent
    data = read_json(p, "COCO labels", InputFileError, hint="a COCO detection JSON (images, annotations, categories)")
    try:
        cats = sorted((expect_number(expect(c, dict, "a category")["id"], "a category id", 0, 2 ** 31, integer=True),
                       expect_text(c["name"], "a category name", 200))
                      for c in expect(data["categories"], list, "categories"))
        classes = tuple(check_names([n for _, n in cats], "COCO labels %s" % p))
        index = {cid: i for i, (cid, _) in enumerate(cats)}
        per_image: Dict[int, List[Tuple[List[float], int, bool]]] = {}
        for a in expect(data["annotations"], list, "annotations"):
            a = expect(a, dict, "an annotation")
            x, y, w, h = (expect_number(v, "a bbox number", -1e6, 1e6) for v in expect(a["bbox"], list, "a bbox"))
            cid = expect_number(a["category_id"], "a category_id", 0, 2 ** 31, integer=True)
            if cid not in index:
                raise ValueRefused("an annotation names category id %d, which categories do not list" % cid)
            crowd = expect_number(a.get("iscrowd", 0), "iscrowd", 0, 1, integer=True)
            image_id = expect_number(a["image_id"], "an image_id", 0, 2 ** 63, integer=True)
            per_image.setdefault(image_id, []).append(([x, y, x + w, y + h], index[cid], bool(crowd)))
        images = []
        for entry in expect(data["images"], list, "images"):
            entry = expect(entry, dict, "an image")
            image_id = expect_number(entry["id"], "an image id", 0, 2 ** 63, integer=True)
            hw = (expect_number(entry["height"], "an image height", 1, MAX_SIDE, integer=True),
                  expect_number(entry["width"], "an image width", 1, MAX_SIDE, integer=True))
            group = None
            if "video_id" in entry and "frame_id" in entry:
                group = "%s:%d" % (entry["video_id"], expect_number(entry["frame_id"], "a frame_id", 0, 2 ** 31,
                                                                    integer=True) // block_frames)
            found = per_image.pop(image_id, [])
            where = "COCO labels %s, image id %d" % (p, image_id)
            file = inside(root, expect_text(entry["file_name"], "a file_name", 1000), where)
            images.append(_image(file, hw, [f[0] for f in found], [f[1] for f in found], [f[2] for f in found],
                                 where, group))
    except KeyError as err:
        raise InputFileError("COCO labels %s: missing field %s" % (p, err)) from None
    except ValueRefused as err:
        raise InputFileError("COCO labels %s: %s" % (p, err)) from None
    if per_image:
        raise InputFileError("COCO labels %s: annotations name image id %d, which images do not list"
                             % (p, sorted(per_image)[0]))
    return LabelSet(images, classes, p, "coco")


def _yolo_label_path(image: Path, root: Path) -> Path:
    parts = list(image.relative_to(root).parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            candidate = root.joinpath(*parts[:i], "labels", *parts[i + 1:]).with_suffix(".txt")
            if candidate.is_file():
                return candidate
    return image.with_suffix(".txt")


def read_yolo(classes_file: PathLike) -> LabelSet:
    """A YOLO set: ``classes_file`` and the images under its folder (module docstring)."""
    from jetforge.optional import require

    cv2 = require("cv2", "reading YOLO labels (their boxes are fractions of the image size)")
    p = Path(classes_file)
    classes = tuple(read_names_file(p, "YOLO classes file"))
    root = p.parent.resolve()
    files = sorted(f for f in root.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
    if not files:
        raise InputFileError("YOLO set %s has no images under %s" % (p, root),
                             hint="put the images (images/...) and labels (labels/...) next to the classes file")
    images = []
    for f in files:
        inside(root, str(f.relative_to(root)), "YOLO set %s" % p)  # a symlinked image pointing out is refused
        image = cv2.imread(str(f), cv2.IMREAD_UNCHANGED)
        if image is None:
            raise InputFileError("YOLO set %s: image %s cannot be decoded" % (p, f.relative_to(root)))
        h, w = image.shape[:2]
        label = _yolo_label_path(f, root)
        boxes, labels = [], []
        if label.is_file():
            where = "YOLO labels %s" % label.relative_to(root)
            for n, line in enumerate(read_text(label, "YOLO labels", InputFileError).splitlines(), 1):
                fields = line.split()
                if not fields:
                    continue
                try:
                    c, cx, cy, bw, bh = int(fields[0]), *(float(v) for v in fields[1:5])
                    if len(fields) != 5:
                        raise ValueError
                except ValueError:
                    raise InputFileError("%s line %d: expected `class cx cy w h`" % (where, n)) from None
                if not 0 <= c < len(classes):
                    raise InputFileError("%s line %d: class %d, but the classes file names %d classes"
                                         % (where, n, c, len(classes)),
                                         hint="the classes file and the labels disagree; give the classes file "
                                              "the labels were made with")
                boxes.append([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h])
                labels.append(c)
        images.append(_image(f, (h, w), boxes, labels, [False] * len(boxes), "YOLO labels of %s" % f.name))
    return LabelSet(images, classes, p, "yolo")


def safe_xml(path: Path) -> ElementTree.Element:
    """Parse an XML file after refusing DOCTYPE/ENTITY declarations and oversized files (module docstring)."""
    if path.stat().st_size > MAX_XML_BYTES:
        raise InputFileError("VOC annotation %s is over %d MB" % (path, MAX_XML_BYTES >> 20))
    text = read_text(path, "VOC annotation", InputFileError)
    if re.search(r"<!\s*(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise InputFileError("VOC annotation %s has a DOCTYPE or ENTITY declaration; these are refused (entity "
                             "expansion)" % path, hint="VOC annotations need none: remove the declaration")
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as err:
        raise InputFileError("VOC annotation %s is not well-formed XML (%s)" % (path, err)) from None


def _number(node: Optional[ElementTree.Element], what: str, where: str) -> float:
    try:
        value = float((node.text or "").strip()) if node is not None else float("nan")
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise InputFileError("%s: %s is missing or not a number" % (where, what))
    return value


def read_voc(path: PathLike, classes: Optional[Sequence[str]] = None) -> LabelSet:
    """Pascal VOC XML files: one ``.xml`` or a folder of them; ``classes`` fixes the class order (default: the names
    found, sorted)."""
    p = Path(path)
    files = sorted(p.glob("*.xml")) if p.is_dir() else [p]
    if not files:
        raise InputFileError("no VOC annotations (*.xml) in %s" % p)
    parsed = []
    for f in files:
        root = safe_xml(f)
        where = "VOC annotation %s" % f.name
        folder = f.parent.parent / "JPEGImages" if (f.parent.parent / "JPEGImages").is_dir() else f.parent
        image = inside(folder, (root.findtext("filename") or "").strip(), where)
        size = root.find("size")
        hw = (int(_number(size.find("height") if size is not None else None, "size/height", where)),
              int(_number(size.find("width") if size is not None else None, "size/width", where)))
        objects = []
        for obj in root.findall("object"):
            name = (obj.findtext("name") or "").strip()
            box = obj.find("bndbox")
            coords = [_number(box.find(k) if box is not None else None, "bndbox/" + k, where)
                      for k in ("xmin", "ymin", "xmax", "ymax")]
            objects.append((name, [coords[0] - 1, coords[1] - 1, coords[2], coords[3]],
                            (obj.findtext("difficult") or "0").strip() == "1"))
        parsed.append((image, hw, objects, where))
    names = tuple(classes) if classes is not None else tuple(sorted({o[0] for _, _, objs, _ in parsed for o in objs}))
    index = {n: i for i, n in enumerate(names)}
    images = []
    for image, hw, objects, where in parsed:
        unknown = [o[0] for o in objects if o[0] not in index]
        if unknown:
            raise InputFileError("%s: object class %r is not among the %d classes" % (where, unknown[0][:40],
                                                                                   len(names)))
        images.append(_image(image, hw, [o[1] for o in objects], [index[o[0]] for o in objects],
                             [o[2] for o in objects], where))
    return LabelSet(images, names, p, "voc")


def read_label_set(path: PathLike, images_root: Optional[PathLike] = None) -> LabelSet:
    """COCO (``.json``), YOLO (a ``.txt``/``.names`` classes file) or VOC (``.xml`` or a folder) by what ``path`` is."""
    p = Path(path)
    if p.is_dir() or p.suffix.lower() == ".xml":
        return read_voc(p)
    if not p.is_file():
        raise InputFileError("label file %s does not exist" % p,
                             hint="give a COCO .json, a YOLO classes .txt or a VOC .xml/folder")
    if p.suffix.lower() == ".json":
        return read_coco(p, images_root)
    if p.suffix.lower() in (".txt", ".names"):
        return read_yolo(p)
    raise InputFileError("%s is no label file jetforge reads (COCO .json, YOLO classes .txt/.names, VOC .xml)" % p)


def is_label_set_path(path: PathLike) -> bool:
    """Whether ``path`` names a label set :func:`read_label_set` reads (by suffix, or a folder)."""
    p = Path(path)
    return p.is_dir() or p.suffix.lower() in (".json", ".txt", ".names", ".xml")


__all__ = ["IMAGE_SUFFIXES", "LabelSet", "LabelledImage", "clip_boxes", "inside", "is_label_set_path", "read_coco",
           "read_label_set", "read_voc", "read_yolo", "safe_xml"]
