"""calibrate's detector evaluation, streamed one batch at a time (``DetectionEvaluator``): the numbers of the
whole-set ``Evaluator`` it replaced, and memory bounded by a batch.

* Same numbers: the shipped ssdlite-person-192 and its Q/DQ model on 16 held-out frames of the person set, once
  through the generic ``Evaluator`` holding every batch and FP32 output (what ``detection_evaluator`` built before the
  change: same batches of 8, metrics ``detection_ap`` and ``output_sqnr``) and once streamed.  Every ``detection_ap``
  field (AP, per-class AP, the frame and block bootstrap intervals) is compared with ``==``; the output SQNR adds
  per-batch sums, so it is compared at 1e-9 dB (float summation order; 4e-15 dB apart on all 94 frames when this was
  written, where every AP field was identical to the pre-change code's).
* Bounded memory, counted rather than timed: a 16-image COCO set read through a counting ``read_image`` and counting
  batch iterator: at most one batch of decoded images (4) and two preprocessed batches (the one run, the next being
  made) are alive at any moment, while all 16 are read; the whole-set code held all 16 images and all 4 batches.
"""

import json
import weakref
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")

from jetforge.calibrate import phash  # noqa: E402
from jetforge.calibrate.detection_eval import detection_evaluator, person_set_frames, read_label_image  # noqa: E402
from jetforge.errors import InputFileError  # noqa: E402
from jetforge.runtime.model_facts import model_facts  # noqa: E402
from jetforge.vision.person_labels import DEFAULT_LABELS  # noqa: E402
from jetforge.workflow.shipped_models import shipped_model  # noqa: E402


@pytest.fixture(scope="module")
def detector() -> Path:
    return Path(shipped_model("ssdlite-person-192").onnx)


def test_streamed_evaluation_gives_the_whole_set_evaluators_numbers(detector):
    from jetforge.assets import asset_dir
    from jetforge.calibrate.evaluate import Evaluator, preprocess_samples

    if not (asset_dir("opencv_samples") / "vtest.avi").is_file():
        pytest.skip("the labelled clips are not in the asset cache (jetforge assets fetch)")
    facts, qdq = model_facts(detector), detector.with_name("model.qdq.onnx")
    frames = person_set_frames(DEFAULT_LABELS, 16, model_labels=facts.labels)
    batches, names = preprocess_samples(frames.images(), facts.input, batch_size=8)
    whole = Evaluator(detector, batches, metrics=("detection_ap", "output_sqnr"), targets=frames.targets,
                      metric_options={"detection_ap": {"sidecar": facts}}).evaluate(qdq)

    data, evaluator, held = detection_evaluator(detector, facts, DEFAULT_LABELS, None, 16)
    assert data.batches == [] and data.hashes == [] and "split" in held  # nothing read before the evaluation
    streamed = evaluator.evaluate(qdq)
    assert streamed.metrics["detection_ap"] == whole.metrics["detection_ap"]
    assert streamed.metrics["detection_ap"]["frames"] == 16 and streamed.metrics["detection_ap"]["boxes"] > 50
    for key, value in whole.metrics["output_sqnr"].items():
        assert streamed.metrics["output_sqnr"][key] == pytest.approx(value, abs=1e-9), key
    assert streamed.samples == whole.samples == 16 and streamed.arithmetic == whole.arithmetic
    assert data.names == names and data.describe() == {"used": 16, "available": 94, "limit": "--eval-samples 16"}
    assert data.hashes == [(n, phash.perceptual_hash(image)) for n, image in frames.images()]  # filled as it passed


def _coco_set(folder: Path, count: int) -> Path:
    rng = np.random.default_rng(0)
    images, annotations = [], []
    for i in range(count):
        cv2.imwrite(str(folder / ("f%02d.png" % i)), rng.integers(0, 256, (96, 128, 3), dtype=np.uint8))
        images.append({"id": i + 1, "file_name": "f%02d.png" % i, "width": 128, "height": 96})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": [10 + i, 8, 30, 60]})
    path = folder / "set.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 1, "name": "person"}]}))
    return path


class _Alive:
    """How many of the objects handed to :meth:`track` are alive, and the most at once (CPython frees an array when
    its last reference goes, so the count is exact and deterministic)."""

    def __init__(self) -> None:
        self.now = self.peak = self.total = 0

    def track(self, obj):
        self.now += 1
        self.total += 1
        self.peak = max(self.peak, self.now)
        weakref.finalize(obj, self._gone)
        return obj

    def _gone(self) -> None:
        self.now -= 1


def test_memory_is_one_batch_of_images_not_the_set(detector, tmp_path, monkeypatch, capsys):
    from jetforge.calibrate import sources
    from jetforge.runtime import image_files

    labels = _coco_set(tmp_path, 16)
    decoded, prepared = _Alive(), _Alive()
    read_image, batches = image_files.read_image, sources.PreprocessedBatches.__iter__
    monkeypatch.setattr(image_files, "read_image", lambda path: decoded.track(read_image(path)))
    monkeypatch.setattr(sources.PreprocessedBatches, "__iter__",
                        lambda self: ((prepared.track(b), n) for b, n in batches(self)))

    facts = model_facts(detector)
    _, evaluator, _ = detection_evaluator(detector, facts, labels, None, progress=True, batch_size=4)
    assert decoded.total == 0  # the label set is read when the evaluation reaches each image
    # the FP32 model through ONNX Runtime's optimised kernels: the same float model, so no difference to find
    res = evaluator.with_arithmetic("ort-int8").evaluate(detector)
    assert decoded.total == 16 and prepared.total == 4
    assert decoded.peak <= 4 and prepared.peak <= 2, (decoded.peak, prepared.peak)
    assert decoded.now == 0 and prepared.now == 0  # nothing kept after the evaluation
    ap = res.metrics["detection_ap"]
    assert ap["frames"] == 16 and ap["ap50_diff"] == 0.0 and res.metrics["output_sqnr"]["min_sqnr_db"] == np.inf
    assert "INT8 evaluation" in capsys.readouterr().err  # the pass shows progress


def test_one_reader_for_every_labelled_image(tmp_path):
    """bench's classifier images and the label sets' images are read by one function: refusals name the file."""
    (tmp_path / "bad.png").write_bytes(b"not an image")
    cv2.imwrite(str(tmp_path / "ok.png"), np.zeros((20, 30, 3), np.uint8))
    with pytest.raises(InputFileError, match="cannot decode the image bad.png"):
        read_label_image("labels.txt", tmp_path / "bad.png")
    with pytest.raises(InputFileError, match="image ok.png is 30x20 but the labels say 40x20"):
        read_label_image("set.json", tmp_path / "ok.png", (20, 40))
    assert read_label_image("set.json", tmp_path / "ok.png", (20, 30)).shape == (20, 30, 3)
