"""``jetforge demo --compare``'s numbers: the people app's detector on the held-out labelled frames.

The independent reference is the people-app study's committed result
(benchmarks/people_app/results/epyc-2core_2026-12-01_ap.json, written by benchmarks/people_app/people_ap.py through
its own loop and pycocotools-checked AP code): the port's AP@0.5 there must be what the comparison computes.
Detections of one model do not depend on the CPU beyond float rounding in ONNX Runtime's kernels, which moves a
score by ~1e-6 and the AP by far less than the 1e-6 tolerance unless a score sits exactly on a tie (none does in
the committed run: it reproduced to 16 digits here).  A detector compared with itself differs by exactly 0 in every
resample, a check of the pairing.
"""

import json
import shutil
from pathlib import Path

import pytest

from jetforge.workflow.compare_detectors import compare_person_detectors, comparison_table, frame_blocks
from jetforge.workflow.model_refs import ensure_person_detector

ROOT = Path(__file__).resolve().parents[1]
PEOPLE_AP = ROOT / "benchmarks" / "people_app" / "results" / "epyc-2core_2026-12-01_ap.json"


@pytest.fixture(scope="module")
def port_twice() -> dict:
    port, _ = ensure_person_detector()
    return compare_person_detectors({"port": Path(port), "again": Path(port)}, resamples=200, progress=False)


def test_the_ports_ap_is_the_people_app_studys(port_twice: dict) -> None:
    committed = json.loads(PEOPLE_AP.read_text())["detectors"]["ssd"]["ap50"]
    assert port_twice["detectors"]["port"]["ap50"] == pytest.approx(committed, abs=1e-6)
    assert port_twice["frames"] == json.loads(PEOPLE_AP.read_text())["frames"]


def test_a_detector_against_itself_differs_by_exactly_zero(port_twice: dict) -> None:
    again = port_twice["detectors"]["again"]
    assert again["minus_reference"] == 0.0 and again["minus_reference_ci"] == [0.0, 0.0]
    assert again["ap50_ci"] == port_twice["detectors"]["port"]["ap50_ci"]
    header, rows = comparison_table(port_twice)
    assert [r[0] for r in rows] == ["port", "again"] and rows[1][3] == "+0.000 [+0.000, +0.000]"


def test_blocks_never_span_two_segments() -> None:
    class F:
        def __init__(self, clip: str, split: str) -> None:
            self.clip, self.split = clip, split

    frames = [F("a", "heldout")] * 12 + [F("b", "heldout")] * 3
    blocks = frame_blocks(frames, size=10)
    assert blocks == ["a:heldout:0"] * 10 + ["a:heldout:1"] * 2 + ["b:heldout:0"] * 3


def test_a_detector_of_another_layout_is_measured_as_the_people_apps_detector_would_be(tmp_path: Path) -> None:
    """A model without an SSD block runs through ``app detect``'s decoder-driven detector at the people app's score
    threshold (:class:`~jetforge.vision.person_detectors.DecodedPersonDetector`).  Checked on the port itself, which both paths can run (its sidecar's SSD
    block is read by the ``ssd-tf`` decoder): on 10 held-out frames the boxes agree within 1e-3 px and the scores
    exactly, so a YOLOv8-layout student in the table is measured as the SSD ones are.  Then the shipped YOLOv8-layout
    student goes through the chooser to that path, and a model whose labels name no person is refused."""
    import numpy as np

    from jetforge.assets import asset_dir
    from jetforge.errors import ModelError
    from jetforge.vision.person_labels import load_person_labels
    from jetforge.vision.ssd_detector import SsdPeopleDetector
    from jetforge.vision.person_detectors import DecodedPersonDetector
    from jetforge.workflow.compare_detectors import person_detector
    from jetforge.workflow.shipped_models import shipped_model

    port, _ = ensure_person_detector()
    frames = load_person_labels("heldout", assets_root=asset_dir("opencv_samples").parent)[::9][:10]
    found = 0
    with SsdPeopleDetector(port) as app:
        decoded = DecodedPersonDetector(Path(port))
        try:
            for f in frames:
                a, b = app(f.image), decoded(f.image)
                assert len(a) == len(b)
                np.testing.assert_allclose(b.boxes, a.boxes, rtol=0, atol=1e-3)
                np.testing.assert_array_equal(b.scores, a.scores)
                found += len(a)
        finally:
            decoded.close()
    assert found >= 20
    student = person_detector(shipped_model("yolov8-person-192").onnx)
    try:
        assert isinstance(student, DecodedPersonDetector) and student.image_size == (192, 192)
        assert "yolov8 decoder" in student.label and len(student(frames[0].image)) > 0
    finally:
        student.close()
    car = tmp_path / "car.onnx"  # the same model, its sidecar naming another class
    shutil.copyfile(str(shipped_model("yolov8-person-192").onnx), str(car))
    sidecar = json.loads(Path(str(shipped_model("yolov8-person-192").onnx) + ".json").read_text())
    Path(str(car) + ".json").write_text(json.dumps(dict(sidecar, labels=["car"])))
    with pytest.raises(ModelError, match="not people"):
        person_detector(car)
