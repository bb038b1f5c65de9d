"""Vision: detectors, one detection type, box geometry, tracking, the labelled person set and detection accuracy.

The torch-free library of the domain the apps, the calibration of detectors and action models, and the training
recipes share (docs/architecture.md, "Where to add a detector / a tracker"):

* :mod:`~jetforge.vision.detections`: :class:`~jetforge.vision.detections.Detections`, the one type every detector
  returns (pixel ``x1, y1, x2, y2`` boxes, scores, classes);
* :mod:`~jetforge.vision.boxes`: the one IoU and the one greedy NMS (``"iou"``, and MTCNN's ``"min"`` overlap),
  greedy IoU matching;
* detectors: the SSD decoder (:mod:`~jetforge.vision.ssd`, batched :mod:`~jetforge.vision.ssd_batch`, GPU decoding
  :mod:`~jetforge.vision.ssd_gpu`) and its detectors (:mod:`~jetforge.vision.ssd_detector`), OpenCV's HOG
  (:mod:`~jetforge.vision.hog`), tiles (:mod:`~jetforge.vision.tiles`), MTCNN faces (:mod:`~jetforge.vision.mtcnn`);
* :mod:`~jetforge.vision.tracking` (Kalman + ByteTrack-style association, the option presets),
  :mod:`~jetforge.vision.counting` (lines, zones), :mod:`~jetforge.vision.person_tracks` (a detector and the
  tracker over a video, called directly);
* :mod:`~jetforge.vision.person_labels` (the labelled person set, shipped as package data) and
  :mod:`~jetforge.vision.detection_metrics` (COCO-style AP, paired bootstrap).

Imports the root package, ``jetforge.targets`` and ``jetforge.runtime`` only (plus numpy; OpenCV inside the
functions that decode or detect); ``calibrate``, ``compress``, ``apps``, ``deploy`` and the CLI import it.
Importing this package imports none of its modules.
"""
