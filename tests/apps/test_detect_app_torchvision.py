"""`jetforge app detect` on a whole torchvision detector exported to ONNX (issue 27's done-when: "a torchvision
detector ONNX runs in app detect on vtest.avi with boxes equal to the reference decoder's").

The model is torchvision's own ``ssdlite320_mobilenet_v3_large`` with its postprocess (box decoding, score threshold,
per-class NMS, top-k) inside the exported graph, so its outputs are the ``torchvision`` layout (boxes [K, 4] in input
pixels, scores [K], labels [K]) a user gets from ``torch.onnx.export`` of such a model.  No trained detection weights
are reachable offline, so it is made deterministic and non-degenerate instead: seeded initial weights, BatchNorm
statistics taken from eight vtest.avi frames (an untrained network's activations otherwise die out and every frame
gives the same boxes) and a head scaled so that scores spread.  Its boxes mean nothing; what is tested is that the
user's path (``export-sidecar --decoder torchvision``, then ``app detect``) reads them exactly.

The reference decoder is written here from the layout's definition, independently of jetforge's decoder: the ONNX
run through ONNX Runtime (opened with the app's session options) on the input the app feeds (the sidecar contract's batch, checked against one made here with
OpenCV from the sidecar's numbers: stretch to 320x320 bilinear, BGR -> RGB, / 255), detections scoring above the sidecar's threshold kept, best first, at most ``max_detections``,
each box scaled from the input to the frame per axis and clipped.  Equal scores have no defined order, so each
frame's detections are compared as sets (each event row matched to one reference detection, then removed).  Tolerance: the events round boxes to 0.1 px and scores to
0.001, so half a step plus 1e-3 px and 1e-6.
"""

import json
import warnings

import numpy as np
import pytest

from jetforge.cli.main import main

cv2 = pytest.importorskip("cv2")
torch = pytest.importorskip("torch")
tv_detection = pytest.importorskip("torchvision.models.detection")
pytest.importorskip("onnxruntime")

SIZE = 320
FRAMES = 6
CLASSES = "__background__,person,bicycle"  # torchvision's label 0 is the background
SCORE_THRESHOLD = 0.3  # ~180 detections a frame, their number and boxes following the frame


def vtest_frames(n):
    from jetforge.assets import asset_path

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    frames = []
    for _ in range(n):
        ok, frame = cap.read()
        assert ok
        frames.append(frame)
    cap.release()
    return frames


def model_input(frame):
    """The input the sidecar describes, made here with OpenCV: stretch, RGB, x / 255, NCHW."""
    rgb = cv2.cvtColor(cv2.resize(frame, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    return (rgb.astype(np.float32) / np.float32(255)).transpose(2, 0, 1)[None]


@pytest.fixture(scope="module")
def torchvision_onnx(tmp_path_factory):
    """The exported detector with its sidecar written by the user's command (see the module docstring)."""
    torch.manual_seed(0)
    model = tv_detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3)
    batch = torch.from_numpy(np.concatenate([model_input(f) for f in vtest_frames(8)]))
    with torch.no_grad():
        model.train()  # BatchNorm statistics of real frames (no gradient step: the weights stay as initialised)
        for _ in range(3):
            features = model.backbone((batch - 0.5) / 0.5)
            model.head(list(features.values()))
        for name, p in model.head.named_parameters():
            if p.dim() == 4:  # logits that spread: scores far enough apart to rank
                p.mul_(40.0 if "classification" in name else 4.0)
    model.eval()

    class Outputs(torch.nn.Module):
        def __init__(self, detector):
            super().__init__()
            self.detector = detector

        def forward(self, images):
            out = self.detector(list(images))[0]
            return out["boxes"], out["scores"], out["labels"]

    path = tmp_path_factory.mktemp("tv") / "ssdlite_tv.onnx"
    with warnings.catch_warnings():  # torchvision's detection export warns about traced Python values
        warnings.simplefilter("ignore")
        torch.onnx.export(Outputs(model).eval(), (batch[:1],), str(path), input_names=["images"],
                          output_names=["boxes", "scores", "labels"], opset_version=17, dynamo=False)
    assert main(["export-sidecar", str(path), "--decoder", "torchvision", "--classes", CLASSES,
                 "--resize", "stretch", "--score-threshold", str(SCORE_THRESHOLD), "-q"]) == 0
    return path


def reference(session, frame, max_detections, contract):
    """The layout's decoding, written from its definition (module docstring): (boxes in frame pixels, scores,
    class indices).  The input is the sidecar contract's own batch (what the app feeds), checked here against the
    one OpenCV makes from the sidecar's numbers: this model's amplified head is so sensitive that float32 rounding
    differences between two resizes flip detections near its NMS and threshold, so the decoding is what is compared
    exactly, on one input."""
    x = contract.batch([frame])
    np.testing.assert_allclose(x, model_input(frame), rtol=0, atol=2e-6)  # the same pixels to float32 rounding
    outputs = session.infer({"images": x})
    boxes, scores, labels = outputs["boxes"], outputs["scores"], outputs["labels"]
    keep = np.flatnonzero(scores > SCORE_THRESHOLD)
    keep = keep[np.argsort(-scores[keep], kind="stable")][:max_detections]
    h, w = frame.shape[:2]
    scale = np.array([w / SIZE, h / SIZE, w / SIZE, h / SIZE])
    mapped = np.clip(boxes[keep].astype(np.float64) * scale, 0, [w, h, w, h])
    return mapped, scores[keep].astype(np.float64), labels[keep].astype(np.int64)


def test_a_torchvision_detector_onnx_in_detect_gives_the_reference_decoders_boxes(torchvision_onnx, tmp_path):
    sidecar = json.loads(torchvision_onnx.with_name(torchvision_onnx.name + ".json").read_text())
    decoder = sidecar["extra"]["decoder"]
    assert decoder["name"] == "torchvision" and sidecar["input"]["resize"] == "stretch"
    max_detections = decoder["options"]["max_detections"]
    out = tmp_path / "tv"
    assert main(["app", "detect", "--model", str(torchvision_onnx), "--max-frames", str(FRAMES), "--no-video",
                 "--no-plots", "--out", str(out), "-q"]) == 0
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    frames = [e for e in events if "tracks" in e]
    assert [e["frame"] for e in frames] == list(range(FRAMES))
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.session import open_session
    from jetforge.runtime.sidecar import read_sidecar

    contract = input_contract(read_sidecar(torchvision_onnx), "image")
    # ONNX Runtime with the session options the app's detector opens it with (same threads, graph optimisation):
    # this model's amplified head would turn another configuration's last-bit differences into other detections
    session = open_session(torchvision_onnx, threads=None, spinning=False)
    names = CLASSES.split(",")
    compared = 0
    for event, frame in zip(frames, vtest_frames(FRAMES)):
        boxes, scores, labels = reference(session, frame, max_detections, contract)
        want = [(names[c], b, sc) for b, sc, c in zip(boxes, scores, labels)]
        got = event["detections"]
        for row in got:  # each detection is one of the reference's, to the events' rounding (matched, then removed)
            match = next((k for k, (name, b, sc) in enumerate(want) if name == row[5]
                          and np.abs(np.asarray(row[:4]) - b).max() <= 0.05 + 1e-3 and abs(row[4] - sc) <= 0.0005 + 1e-6),
                         None)
            assert match is not None, (row, min(((np.abs(np.asarray(row[:4]) - b).max(), n, b.round(2).tolist(), round(sc, 4)) for n, b, sc in want), key=lambda t: t[0]))
            want.pop(match)
        assert not want, "reference detections the app lacks: %s" % want[:3]
        compared += len(got)
    assert compared >= FRAMES  # detections on every frame on average: not a comparison of empty frames
    # and they follow the frames (the BatchNorm statistics keep the network alive): not one constant answer
    assert len({len(e["detections"]) for e in frames}) > 1
    session.close()
