"""The ssd-torchvision decoder on a real torchvision SSDlite exported to ONNX, against torchvision's own postprocess.

torchvision's ``ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)`` is built with a fixed seed (its
head's weights drawn with a seeded generator so scores spread), its body (backbone + head) exported to ONNX in the
test and run with ONNX Runtime: its outputs are ``bbox_regression`` ``(1, 3234, 4)`` and ``cls_logits``
``(1, 3234, 91)``, the layout of every torchvision SSD.  An untrained backbone gives many anchors *equal* logits, and
equal scores have no defined order in either implementation's sort, so seeded noise (sd 0.01) is added to the
outputs before both decoders see them.  The reference is torchvision itself: ``SSD.postprocess_detections`` (softmax,
``BoxCoder`` with weights 10, 10, 5, 5, clipping, per-class top-k, ``batched_nms``) then
``GeneralizedRCNNTransform.postprocess`` (boxes back to the 480x640 frame), with the anchors of its own
``DefaultBoxGenerator``, which travel to jetforge's decoder through the sidecar block.

Tolerance: boxes to 1e-3 px and scores to 1e-6 (float32 exp/softmax in numpy and torch differ in the last bits);
torchvision keeps boxes clipped to zero area, jetforge drops them, so those are removed from the reference.
"""

import io

import numpy as np
import pytest

from jetforge.runtime.inputs.image import Preprocess
from jetforge.vision.classes import coco91
from jetforge.vision.decode import DecoderOptions, decoder_block, decoder_for

torch = pytest.importorskip("torch")
tv_detection = pytest.importorskip("torchvision.models.detection")
ort = pytest.importorskip("onnxruntime")

FRAME_HW = (480, 640)


@pytest.fixture(scope="module")
def ssdlite():
    from torchvision.models.detection.image_list import ImageList

    torch.manual_seed(0)
    model = tv_detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.head.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.25)
    model.score_thresh = 0.05

    class Body(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            head = self.m.head(list(self.m.backbone(x).values()))
            return head["bbox_regression"], head["cls_logits"]

    x = torch.rand(1, 3, 320, 320, generator=generator)
    buf = io.BytesIO()
    torch.onnx.export(Body(model).eval(), (x,), buf, input_names=["images"], dynamo=False,
                      output_names=["bbox_regression", "cls_logits"], opset_version=17)
    enc, logits = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(
        None, {"images": x.numpy()})
    with torch.no_grad():
        features = list(model.backbone(x).values())
        head = model.head(features)
        anchors = model.anchor_generator(ImageList(x, [(320, 320)]), features)[0]
    np.testing.assert_allclose(enc, head["bbox_regression"].numpy(), atol=1e-4)  # the ONNX is the model
    rng = np.random.default_rng(7)
    enc = (enc + rng.normal(0, 0.01, enc.shape)).astype(np.float32)
    logits = (logits + rng.normal(0, 0.01, logits.shape)).astype(np.float32)
    return model, enc, logits, anchors.numpy()


def test_ssdlite_outputs_decode_as_torchvision_postprocesses_them(ssdlite):
    model, enc, logits, anchors = ssdlite
    with torch.no_grad():
        head = {"bbox_regression": torch.from_numpy(enc), "cls_logits": torch.from_numpy(logits)}
        dets = model.postprocess_detections(head, [torch.from_numpy(anchors)], [(320, 320)])
        ref = model.transform.postprocess(dets, [(320, 320)], [FRAME_HW])[0]
    ref_boxes, ref_scores, ref_labels = (ref[k].numpy() for k in ("boxes", "scores", "labels"))
    area = (ref_boxes[:, 2] > ref_boxes[:, 0]) & (ref_boxes[:, 3] > ref_boxes[:, 1])
    assert area.sum() > 50  # enough detections to mean something

    block = decoder_block("ssd-torchvision", DecoderOptions(score_threshold=0.05, iou_threshold=0.55,
                                                            max_detections=300),
                          {"anchors": anchors.tolist(), "weights": [10.0, 10.0, 5.0, 5.0], "topk_candidates": 300})
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec

    sidecar = ModelSidecar(task="detect", model_name="ssdlite", labels=coco91(), extra={"decoder": block},
                           inputs=[TensorSpec("images", [1, 3, 320, 320])],
                           outputs=[TensorSpec("bbox_regression", [1, 3234, 4]), TensorSpec("cls_logits", [1, 3234, 91])],
                           input=Preprocess(height=320, width=320, resize="stretch", mean=(0.5,), std=(0.5,)))
    decoder = decoder_for(sidecar)
    got = decoder.decode_frames([enc, logits], sidecar.input, [FRAME_HW])[0]
    np.testing.assert_allclose(got.boxes, ref_boxes[area], atol=1e-3)
    np.testing.assert_allclose(got.scores, ref_scores[area], atol=1e-6)
    np.testing.assert_array_equal(got.classes, ref_labels[area])
    assert got.labels[int(got.classes[0])] == coco91()[int(ref_labels[area][0])]
