"""Label-set readers (COCO, YOLO, VOC) and the people set exported to COCO and read back.

The round trip is checked against the person-label path itself: the same boxes and difficult flags bit for bit, the
same pixels (PNG is lossless), and the shipped SSD person detector's AP with its bootstrap interval equal through
both paths.  The small hand-made sets give boxes computed here by hand from each format's definition.
"""

import json

import numpy as np
import pytest

from jetforge.errors import InputFileError
from jetforge.vision.label_files import read_coco, read_label_set, read_voc, read_yolo

cv2 = pytest.importorskip("cv2")


def coco_file(tmp_path, file_name="a.png", bbox=(10, 20, 30, 40), size=(100, 200), crowd=0):
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((size[0], size[1], 3), np.uint8))
    data = {"images": [{"id": 7, "file_name": file_name, "height": size[0], "width": size[1]}],
            "annotations": [{"id": 1, "image_id": 7, "category_id": 3, "bbox": list(bbox), "iscrowd": crowd}],
            "categories": [{"id": 3, "name": "car"}, {"id": 1, "name": "person"}]}
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(data))
    return path


def test_coco_reader(tmp_path):
    s = read_label_set(coco_file(tmp_path, crowd=1))
    assert s.classes == ("person", "car") and s.format == "coco"  # categories in id order
    image = s.images[0]
    np.testing.assert_array_equal(image.truth.boxes, [[10, 20, 40, 60]])  # x, y, w, h -> corners
    assert image.truth.classes.tolist() == [1] and image.difficult.tolist() == [True]
    assert image.path == (tmp_path / "a.png").resolve() and image.image_hw == (100, 200)


@pytest.mark.parametrize("file_name", ["../a.png", "/etc/passwd", "sub/../../a.png"])
def test_image_paths_leaving_the_folder_are_refused(tmp_path, file_name):
    (tmp_path / "set").mkdir()
    with pytest.raises(InputFileError, match="leaves its folder|absolute"):
        read_coco(coco_file(tmp_path / "set", file_name=file_name))


def test_boxes_partly_outside_are_clipped_and_wholly_outside_refused(tmp_path):
    s = read_coco(coco_file(tmp_path, bbox=(-5, 90, 30, 40)))  # 100x200 image: y 90..130 leaves the bottom
    np.testing.assert_array_equal(s.images[0].truth.boxes, [[0, 90, 25, 100]])
    with pytest.raises(InputFileError, match="no area inside the 200x100 image"):
        read_coco(coco_file(tmp_path, bbox=(250, 10, 30, 40)))


def test_yolo_reader_against_hand_computed_boxes(tmp_path):
    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "labels" / "val").mkdir(parents=True)
    cv2.imwrite(str(tmp_path / "images" / "val" / "x.jpg"), np.zeros((200, 400, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "images" / "val" / "empty.jpg"), np.zeros((50, 50, 3), np.uint8))
    (tmp_path / "labels" / "val" / "x.txt").write_text("1 0.5 0.5 0.25 0.5\n0 0.1 0.1 0.2 0.2\n")
    (tmp_path / "classes.txt").write_text("person\ncar\n")
    s = read_label_set(tmp_path / "classes.txt")
    assert s.classes == ("person", "car") and [i.path.name for i in s.images] == ["empty.jpg", "x.jpg"]
    assert len(s.images[0].truth) == 0
    # 400x200: cx 200, cy 100, w 100, h 100 -> 150, 50, 250, 150; the second box 0..80 x 0..40 (clipped at 0)
    np.testing.assert_allclose(s.images[1].truth.boxes, [[150, 50, 250, 150], [0, 0, 80, 40]])
    assert s.images[1].truth.classes.tolist() == [1, 0]
    (tmp_path / "labels" / "val" / "x.txt").write_text("2 0.5 0.5 0.25 0.5\n")
    with pytest.raises(InputFileError, match="class 2, but the classes file names 2 classes"):
        read_yolo(tmp_path / "classes.txt")


VOC = """<annotation><filename>{name}</filename><size><width>300</width><height>200</height><depth>3</depth></size>
<object><name>dog</name><difficult>1</difficult><bndbox><xmin>11</xmin><ymin>21</ymin><xmax>60</xmax><ymax>80</ymax>
</bndbox></object><object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>300</xmax><ymax>200</ymax>
</bndbox></object></annotation>"""


def test_voc_reader_in_voc_layout(tmp_path):
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "JPEGImages").mkdir()
    (tmp_path / "Annotations" / "0001.xml").write_text(VOC.format(name="0001.jpg"))
    s = read_label_set(tmp_path / "Annotations")
    assert s.classes == ("cat", "dog")
    image = s.images[0]
    assert image.path == (tmp_path / "JPEGImages" / "0001.jpg").resolve()
    # 1-based inclusive pixels: xmin 11..xmax 60 is x 10..60; the whole image 1..300 is 0..300
    np.testing.assert_array_equal(image.truth.boxes, [[10, 20, 60, 80], [0, 0, 300, 200]])
    assert image.truth.classes.tolist() == [1, 0] and image.difficult.tolist() == [True, False]


@pytest.mark.parametrize("text, message", [
    ('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xx">]><annotation/>', "DOCTYPE or ENTITY"),
    ("<annotation><filename>../../etc/x.jpg</filename></annotation>", "leaves its folder"),
    ("<annotation><filename>a.jpg</filename><size><width>w</width></size></annotation>", "not a number"),
], ids=["entity", "path", "number"])
def test_hostile_voc_files_are_refused(tmp_path, text, message):
    (tmp_path / "a.xml").write_text(text)
    with pytest.raises(InputFileError, match=message):
        read_voc(tmp_path / "a.xml")


def test_the_people_set_reads_back_identically_through_coco(tmp_path):
    """Export the held-out frames, read them through the COCO reader: same boxes, flags, pixels and person AP."""
    from jetforge.runtime.model_facts import model_facts
    from jetforge.runtime.session import open_session
    from jetforge.vision.decode import DecoderOptions, decoder_for
    from jetforge.vision.detection_metrics import paired_bootstrap
    from jetforge.vision.person_coco import export_person_coco
    from jetforge.vision.person_labels import load_person_labels
    from jetforge.assets import asset_dir
    from jetforge.workflow.shipped_models import shipped_model

    root = asset_dir("opencv_samples").parent
    if not (root / "opencv_samples" / "vtest.avi").is_file():
        pytest.skip("the labelled clips are not in the asset cache (jetforge assets fetch)")
    frames = load_person_labels("heldout", assets_root=root)
    path = export_person_coco(tmp_path / "people.coco.json", "heldout", assets_root=root)
    s = read_coco(path)
    assert s.classes == ("person",) and len(s.images) == len(frames)
    for f, image in zip(frames, s.images):
        np.testing.assert_array_equal(image.truth.boxes, f.boxes)
        np.testing.assert_array_equal(image.difficult, f.difficult)
        np.testing.assert_array_equal(cv2.imread(str(image.path)), f.image)
    model = shipped_model("ssdlite-person-192").onnx
    facts = model_facts(model)
    decoder = decoder_for(facts, options=DecoderOptions(score_threshold=0.01, max_detections=100))
    session = open_session(model)

    def detect(images):
        out = []
        for im in images:
            raw = session.infer({session.inputs[0].name: facts.input.batch([im])})
            out.append(decoder.decode_frames([raw[o.name] for o in session.outputs], facts.input, [im.shape[:2]])[0])
        return [d.boxes for d in out], [d.scores for d in out]

    by_labels = paired_bootstrap([f.boxes for f in frames], [f.difficult for f in frames],
                                 detect([f.image for f in frames]), n_resamples=200)
    by_coco = paired_bootstrap([i.truth.boxes for i in s.images], [i.difficult for i in s.images],
                               detect([cv2.imread(str(i.path)) for i in s.images]), n_resamples=200)
    assert by_labels == by_coco and by_labels["a"]["ap50"] > 0.3
