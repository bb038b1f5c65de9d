"""The bundled ImageNet class names."""

import pytest

from jetforge.apps.labels import DATA_DIR, load_labels, read_label_file
from jetforge.errors import UnknownNameError


def test_imagenet_labels_in_index_order():
    labels = load_labels("imagenet")
    assert len(labels) == 1000
    assert labels[0] == "tench" and labels[1] == "goldfish"
    assert labels[444] == "bicycle-built-for-two" and labels[671] == "mountain bike"
    assert labels[844] == "switch" and labels[999] == "toilet tissue"
    # torchvision made the 1000 names unique (ImageNet has two "crane"s: the bird and the machine)
    assert len(set(labels)) == 1000 and labels[134] == "crane bird" and labels[517] == "crane"


def test_header_names_the_source_and_is_skipped():
    text = (DATA_DIR / "imagenet_classes.txt").read_text(encoding="utf-8")
    assert text.startswith("#") and "torchvision" in text.splitlines()[1] and "BSD-3" in text.splitlines()[1]
    assert read_label_file(DATA_DIR / "imagenet_classes.txt")[0] == "tench"


def test_returns_a_copy_and_rejects_unknown_sets():
    load_labels("imagenet")[0] = "changed"
    assert load_labels("imagenet")[0] == "tench"
    with pytest.raises(UnknownNameError, match="did you mean 'imagenet'"):
        load_labels("imagenett")
