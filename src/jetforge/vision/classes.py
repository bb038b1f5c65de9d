"""Class names of a detector: the shipped COCO lists, a labels file, or a comma list.

A detector's class index is the position of its name in the model's label list (the sidecar's ``labels``), so a
name list is read in one place and checked the same way wherever it comes from:

* ``coco80``: the 80 COCO names in the contiguous order YOLO-family models and their exports use
  (``vision/data/coco80.txt``, package data);
* ``coco91``: the same names at their COCO category ids 1..90, with ``__background__`` at 0 and ``N/A`` at the
  11 ids COCO leaves unused: the index order of torchvision's detection models, whose ``labels`` output is the
  category id;
* a file: one name per line (a YOLO ``classes.txt``/``obj.names``, a ``labels.txt``), blank lines and surrounding
  spaces ignored;
* ``a,b,c``: the names themselves.

Pure Python, no numpy; Python 3.8.
"""

from pathlib import Path
from typing import List, Sequence, Tuple, Union

from jetforge.errors import InputFileError
from jetforge.jsonfile import read_text

DATA = Path(__file__).resolve().parent / "data"
COCO80_FILE = DATA / "coco80.txt"
# COCO's category id of each of the 80 names, in coco80 order (the ids the 2017 annotations use)
COCO80_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32,
              33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
              60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90)
SHIPPED = ("coco80", "coco91")
MAX_CLASSES = 100000  # names in one list: far above any detector's (LVIS has 1,203), small enough to read safely
MAX_NAME = 200


def read_names_file(path: Union[str, Path], what: str = "class names file") -> List[str]:
    """One name per line; blank lines skipped.  Refuses an empty list, a duplicate name and an absurd length."""
    text = read_text(path, what, InputFileError, hint="one class name per line")
    names = [line.strip() for line in text.splitlines() if line.strip()]
    return check_names(names, "%s %s" % (what, path))


def check_names(names: Sequence[str], where: str) -> List[str]:
    """The names as a list, after refusing an empty list, duplicates, too many or too long names."""
    if not names:
        raise InputFileError("%s names no class" % where, hint="give one class name per line")
    if len(names) > MAX_CLASSES:
        raise InputFileError("%s names %d classes; at most %d are read" % (where, len(names), MAX_CLASSES))
    long = [n for n in names if len(n) > MAX_NAME]
    if long:
        raise InputFileError("%s has a class name of %d characters; at most %d" % (where, len(long[0]), MAX_NAME))
    seen = {}
    for i, n in enumerate(names):
        if n in seen and n != "N/A":  # COCO's unused ids share the placeholder; the name itself is not quoted
            raise InputFileError("%s names one class twice (entries %d and %d)" % (where, seen[n] + 1, i + 1),
                                 hint="each class once, in index order")
        seen.setdefault(n, i)
    return list(names)


def coco80() -> List[str]:
    return read_names_file(COCO80_FILE, "shipped COCO names")


def coco91() -> List[str]:
    """torchvision's detection label order: index = COCO category id."""
    names = ["__background__"] + ["N/A"] * 90
    for name, cid in zip(coco80(), COCO80_IDS):
        names[cid] = name
    return names


def class_names(spec: str) -> Tuple[str, ...]:
    """``coco80``, ``coco91``, a names file, or ``a,b,c`` -> the names in class-index order."""
    text = str(spec).strip()
    if text == "coco80":
        return tuple(coco80())
    if text == "coco91":
        return tuple(coco91())
    path = Path(text).expanduser()
    if path.is_file():
        return tuple(read_names_file(path))
    if "," in text or (text and not path.suffix and "/" not in text):
        return tuple(check_names([n.strip() for n in text.split(",") if n.strip()], "--classes %s" % text))
    raise InputFileError("class list %s is no file, and not coco80, coco91 or a comma list" % text,
                         hint="give coco80, coco91, a file with one name per line, or names like person,car")


__all__ = ["COCO80_FILE", "COCO80_IDS", "SHIPPED", "check_names", "class_names", "coco80", "coco91",
           "read_names_file"]
