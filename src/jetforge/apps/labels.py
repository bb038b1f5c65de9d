"""Class-name lists shipped with jetforge (``apps/data/<name>_classes.txt``).

A label file holds one name per line in class-index order; lines starting with
``#`` are comments (the source and licence of the list) and are skipped.
"""

from pathlib import Path
from typing import Dict, List

from jetforge.errors import InputFileError, UnknownNameError
from jetforge.fileio import PathLike
from jetforge.jsonfile import read_text

DATA_DIR = Path(__file__).with_name("data")

# name -> (file under apps/data, number of classes)
LABEL_SETS: Dict[str, "tuple[str, int]"] = {
    "imagenet": ("imagenet_classes.txt", 1000),
}

_CACHE: Dict[str, List[str]] = {}


def read_label_file(path: PathLike) -> List[str]:
    """Labels from a text file: one per line, ``#`` comment lines and blank lines skipped."""
    text = read_text(path, "label file", hint="give a text file with one class name per line")  # binary: one line
    labels = [line.strip() for line in text.splitlines()]
    return [x for x in labels if x and not x.startswith("#")]


def load_labels(name: str) -> List[str]:
    """The class names of a bundled label set, e.g. ``load_labels("imagenet")`` (1000 names)."""
    if name not in LABEL_SETS:
        raise UnknownNameError("label set", name, LABEL_SETS)
    if name not in _CACHE:
        filename, count = LABEL_SETS[name]
        labels = read_label_file(DATA_DIR / filename)
        if len(labels) != count:
            raise InputFileError("label file %s has %d names, expected %d" % (DATA_DIR / filename, len(labels), count),
                                 hint="reinstall jetforge; the packaged data is damaged")
        _CACHE[name] = labels
    return list(_CACHE[name])
