"""The YOLO-layout student's ONNX and sidecar: one ``[N, 4 + C, A]`` output, decoded by the registered ``yolov8``.

The sidecar is what ``jetforge export-sidecar --decoder yolov8`` would write for it, with what only the exporter
knows: task ``detect``, the class names, the input contract the student was trained with (the teacher's
preprocessing -- stretch, RGB, ``x * 2/255 - 1`` for the port -- at the student's size; not YOLO's letterbox
convention, so nothing is assumed) and ``extra.decoder`` naming ``yolov8`` with its thresholds
(:func:`jetforge.vision.decode.decoder_block`).  Every consumer (``app detect``, ``calibrate --labels``, bundles)
then reads it as any YOLOv8 export.  SAME padding's asymmetric pads are folded into the convolutions, as the SSD
exporter does.
"""

import logging
import warnings
from typing import Any, Mapping, Optional, Sequence

from jetforge.compress.models.ssdlite_export import fold_pads_in_exported
from jetforge.fileio import PathLike
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.sidecar import ModelSidecar
from jetforge.vision.decode import DecoderOptions, decoder_block

log = logging.getLogger(__name__)

MODEL_NAME = "yolov8_layout_person_student"
OUTPUT_NAME = "output0"  # the name YOLOv8 exports give their one output
# what the apps use: a person at 0.25 (the decoder's default) and NMS at 0.5 IoU (between YOLO's usual 0.45 and
# the port's 0.6: the student's IoU-aware scores already rank a well-placed box first)
DEFAULT_OPTIONS = DecoderOptions(score_threshold=0.25, iou_threshold=0.5)


def export_yolo_student(model: Any, preprocess: Preprocess, path: PathLike, labels: Sequence[str] = ("person",),
                        *, options: DecoderOptions = DEFAULT_OPTIONS, dynamic_batch: bool = True, opset: int = 17,
                        provenance: Optional[Mapping[str, Any]] = None, model_name: str = MODEL_NAME
                        ) -> ModelSidecar:
    """Write ``model`` (a :class:`~jetforge.compress.models.yolo_student.YoloStudent`) to ``path`` and its sidecar."""
    from jetforge.compress.export import export_onnx

    if (preprocess.height, preprocess.width) != (model.image_size, model.image_size):
        from jetforge.errors import CompressError

        raise CompressError("the input contract is %dx%d but the student runs at %d px"
                            % (preprocess.width, preprocess.height, model.image_size),
                            hint="give the contract at the student's input size")
    extra = {"family": "yolov8-layout student",
             "decoder": decoder_block("yolov8", options),
             "outputs": {OUTPUT_NAME: "(N, 4 + C, A): cx, cy, w, h in input pixels, C class probabilities"}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
        sidecar = export_onnx(model, path, (1, 3, model.image_size, model.image_size), task="detect",
                              model_name=model_name, labels=list(labels), preprocess=preprocess,
                              input_name="images", output_name=OUTPUT_NAME, dynamic_batch=dynamic_batch, opset=opset,
                              extra=extra, provenance=dict(provenance or {}))
    folded = fold_pads_in_exported(path, sidecar)
    log.info("exported the YOLO-layout student to %s (%d candidates, %d Pad nodes folded)", path, model.num_anchors,
             folded)
    return sidecar


__all__ = ["DEFAULT_OPTIONS", "MODEL_NAME", "OUTPUT_NAME", "export_yolo_student"]
