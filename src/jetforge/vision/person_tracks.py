"""Person tracks of a video: a person detector and the tracker's people preset, frame by frame, called directly.

These are the tracks ``jetforge app people`` and ``jetforge app action`` follow (the same detector objects, the
same :class:`~jetforge.vision.tracking.Tracker` with :func:`~jetforge.vision.tracking.tracker_options` ``"people"``,
every decoded frame in order), for the code below the apps that needs them:

* :func:`person_tracks` -- one tracker over one video, as a function of each decoded frame; a
  :func:`person_tracker_factory` makes one per video for per-track clip calibration
  (:mod:`jetforge.calibrate.clips.sources`);
* :func:`track_video` -- every frame of a video file with the confirmed tracks seen on it: the action recipe's
  track cache (:mod:`jetforge.compress.action.track_clips`).

A detector is any object called with a BGR frame that returns :class:`~jetforge.vision.detections.Detections`
(``vision.ssd_detector.SsdPeopleDetector``, ``vision.person_detectors.DecodedPersonDetector`` for another output
layout, ``vision.hog.HogPeopleDetector``, ``vision.tiles.TiledPeopleDetector``);
its ``to_confidence`` (HOG's :func:`~jetforge.vision.hog.score_to_unit` when it has none) turns scores into the
tracker's confidences.  Torch-free; OpenCV decodes the video.
"""

import functools
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from jetforge.errors import InputFileError
from jetforge.fileio import opencv_path
from jetforge.optional import require
from jetforge.vision.hog import score_to_unit
from jetforge.vision.tracking import Track, Tracker, TrackerOptions, tracker_options

TrackFn = Callable[[int, np.ndarray], List[Tuple[int, np.ndarray]]]


def _tracking(detector: Any, options: Optional[TrackerOptions]) -> Callable[[np.ndarray], List[Track]]:
    """frame -> the confirmed tracks seen on it, with one new tracker (the people preset unless ``options``)."""
    tracker = Tracker(options or tracker_options("people"))
    to_confidence = getattr(detector, "to_confidence", score_to_unit)

    def step(frame: np.ndarray) -> List[Track]:
        found = detector(frame)
        return tracker.update(found.boxes, to_confidence(found.scores))
    return step


def person_tracks(detector: Any, options: Optional[TrackerOptions] = None) -> TrackFn:
    """A new tracker over one video: each (frame index, BGR frame), in order -> ``[(track id, box)]`` of the
    confirmed tracks seen on that frame (the action app's tracks)."""
    step = _tracking(detector, options)

    def track(index: int, frame: np.ndarray) -> List[Tuple[int, np.ndarray]]:
        return [(t.id, t.box) for t in step(frame)]
    return track


def person_tracker_factory(detector: Any, options: Optional[TrackerOptions] = None) -> Callable[[], TrackFn]:
    """Makes a new :func:`person_tracks` function per call (one per video)."""
    return functools.partial(person_tracks, detector, options)


def track_video(video: Union[str, Path], detector: Any, options: Optional[TrackerOptions] = None,
                max_frames: int = 0) -> Iterator[Tuple[int, List[Track]]]:
    """(frame index, confirmed tracks seen on it) for every frame of ``video`` (the first ``max_frames``; 0: all),
    decoded in order with OpenCV, as ``jetforge app people`` decodes a file.  The tracks are the tracker's own
    objects: read them (``Track.to_dict``, ``box``) before the next frame moves them on."""
    cv2 = require("cv2", "decoding the video to track people in")
    cap = cv2.VideoCapture(opencv_path(video, "video file"))
    if not cap.isOpened():
        cap.release()
        raise InputFileError("cannot decode %s" % video, hint="pass a video OpenCV can read")
    step = _tracking(detector, options)
    index = 0
    try:
        while not max_frames or index < max_frames:
            ok, frame = cap.read()
            if not ok or frame is None:
                break
            yield index, step(frame)
            index += 1
    finally:
        cap.release()


__all__ = ["TrackFn", "person_tracker_factory", "person_tracks", "track_video"]
