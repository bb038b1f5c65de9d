"""MTCNN in plain torch: facenet-pytorch's weights load strictly, and the ONNX exports compute the same as torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from jetforge.compress.models.mtcnn import (MTCNN_PREPROCESS, export_mtcnn_onnx, load_mtcnn,  # noqa: E402
                                            load_mtcnn_net)
from jetforge.errors import ModelError  # noqa: E402
from jetforge.runtime.session import open_session  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def weights_dir():
    from jetforge.assets import asset_path

    return asset_path("mtcnn", "pnet.pt").parent


@pytest.fixture(scope="module")
def nets(weights_dir):
    return load_mtcnn(weights_dir)


@pytest.fixture(scope="module")
def exported(nets, tmp_path_factory):
    return export_mtcnn_onnx(nets, tmp_path_factory.mktemp("mtcnn"))


def test_weights_load_strictly_with_the_published_sizes(nets, weights_dir):
    sizes = {n: sum(p.numel() for p in m.parameters()) for n, m in nets.items()}
    assert sizes == {"pnet": 6632, "rnet": 100178, "onet": 389040}
    state = torch.load(str(weights_dir / "onet.pt"), weights_only=True)
    assert list(state)[:2] == ["conv1.weight", "conv1.bias"] and "dense6_3.bias" in state
    assert all(torch.equal(nets["onet"].state_dict()[k], v) for k, v in state.items())


def test_wrong_file_is_refused(weights_dir):
    with pytest.raises(ModelError, match="not facenet-pytorch's pnet.pt"):
        load_mtcnn_net("pnet", weights_dir / "rnet.pt")


def _real_crops(size):
    """Real image patches (messi5.jpg), RGB, normalised as MTCNN wants them, NCHW."""
    import cv2

    from jetforge.assets import asset_path

    image = cv2.imread(str(asset_path("opencv_samples", "messi5.jpg")))[:, :, ::-1]
    crops = [cv2.resize(np.ascontiguousarray(image[y:y + 120, x:x + 120]), (size, size), interpolation=cv2.INTER_AREA)
             for x, y in ((0, 0), (200, 40), (330, 60))]
    x = (np.stack(crops).astype(np.float32) - 127.5) * 0.0078125
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def test_pnet_onnx_is_fully_convolutional_and_matches_torch(nets, exported):
    import cv2

    from jetforge.assets import asset_path

    image = cv2.imread(str(asset_path("opencv_samples", "messi5.jpg")))[:, :, ::-1]
    with open_session(exported["pnet"], threads=1) as s:
        for h, w in ((42, 67), (171, 274)):
            x = (cv2.resize(np.ascontiguousarray(image), (w, h), interpolation=cv2.INTER_AREA).astype(np.float32)
                 - 127.5) * 0.0078125
            x = np.ascontiguousarray(x.transpose(2, 0, 1)[None])
            got = s.infer({"input": x})
            with torch.no_grad():
                reg, prob = nets["pnet"](torch.from_numpy(x))
            assert got["prob"].shape == (1, 2, (h - 2) // 2 + (h - 2) % 2 - 4, (w - 2) // 2 + (w - 2) % 2 - 4)
            assert np.abs(got["prob"] - prob.numpy()).max() < 1e-5
            assert np.abs(got["reg"] - reg.numpy()).max() < 1e-4


@pytest.mark.parametrize("name,size", [("rnet", 24), ("onet", 48)])
def test_rnet_onet_onnx_match_torch_with_a_dynamic_batch(nets, exported, name, size):
    x = _real_crops(size)
    with open_session(exported[name], threads=1) as s:
        got = s.infer({"input": x})
    with torch.no_grad():
        ref = nets[name](torch.from_numpy(x))
    names = ["reg", "landmarks", "prob"] if name == "onet" else ["reg", "prob"]
    for n, r in zip(names, ref):
        assert got[n].shape == tuple(r.shape) and got[n].shape[0] == 3
        assert np.abs(got[n] - r.numpy()).max() < 1e-4


def test_sidecars_record_detect_task_and_mtcnn_preprocessing(exported):
    pre = read_sidecar(exported["pnet"])
    assert pre.task == "detect" and pre.labels == ["background", "face"]
    assert pre.inputs[0].shape == ["batch", 3, "height", "width"]
    # PNet's input is the image pyramid (format-1 convention: a nominal 12x12 preprocess block + family/stage)
    from jetforge.runtime.inputs import ImagePyramid, input_contract

    p = input_contract(pre, "image_pyramid")
    assert p == ImagePyramid(window=12, min_size=20.0, factor=0.709, color="rgb", scale=1.0, mean=(127.5,),
                             std=(128.0,))
    for name in ("rnet", "onet"):
        assert input_contract(read_sidecar(exported[name]), "image") == MTCNN_PREPROCESS[name]
    onet = read_sidecar(exported["onet"])
    assert [t.name for t in onet.outputs] == ["reg", "landmarks", "prob"]
    assert onet.inputs[0].shape == ["batch", 3, 48, 48]
    assert onet.produced_by["weights_sha256"].startswith("165bfbe4")
