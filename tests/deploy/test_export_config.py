"""`jetforge export-config deepstream|triton` on the real exported MobileNetV2 and SSDLite person detector.

Real models (the session's MobileNetV2 export, the SSD body exported from its frozen graph), real
images (OpenCV's sample photos, vtest.avi frames), ONNX Runtime for every numeric check.  The
generated C++ parsers are compiled with g++ against the FakeDeepStreamHeader in
tests/deploy/fake_deepstream (DeepStream is not installed here) and compared with numpy.  Triton's
config.pbtxt files are parsed with Triton's own model_config.proto where the tritonclient package
is installed (the test says so where it is not).
"""

import importlib.util
import json
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import create_bundle, verify_bundle  # noqa: E402
from jetforge.deploy.deepstream.config import nvinfer_preprocess  # noqa: E402
from jetforge.deploy.keyfile import read_keyfile  # noqa: E402
from jetforge.runtime.inputs import Preprocess  # noqa: E402

NX = "orin-nx-16gb"
FAKE_DS = Path(__file__).parent / "fake_deepstream"
PHOTOS = ("baboon.jpg", "fruits.jpg", "apple.jpg", "butterfly.jpg", "building.jpg", "home.jpg")


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def make_cache(path, scales):
    lines = ["TRT-100300-EntropyCalibration2"] + ["%s: %s" % (n, struct.pack(">f", s).hex()) for n, s in scales.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from jetforge.assets import asset_path

    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        shutil.copyfile(str(asset_path("opencv_samples", name)), str(folder / name))
    return folder


@pytest.fixture(scope="module")
def cls_bundle(tmp_path_factory, mobilenet_onnx):
    """The real MobileNetV2 export in a bundle for Orin NX / TensorRT 10.3, with an INT8 cache (input + logits)."""
    root = tmp_path_factory.mktemp("cls")
    cache = make_cache(root / "model.calib", {"input": 2.64 / 127.0, "logits": 0.15})
    res = create_bundle(mobilenet_onnx, root / "bundle", [NX], calib=[cache], tensorrt_versions=["10.3.0"])
    return res.path


@pytest.fixture(scope="module")
def ssd_model(tmp_path_factory):
    pytest.importorskip("torch", reason="the detector export needs torch")
    from jetforge.assets import asset_path
    from jetforge.compress.models.ssdlite_export import export_person_detector

    out = tmp_path_factory.mktemp("ssd") / "ssd.onnx"
    export_person_detector(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"), out)
    return out


@pytest.fixture(scope="module")
def ssd_bundle(ssd_model):
    return create_bundle(ssd_model, ssd_model.parent / "bundle", [NX], tensorrt_versions=["10.3.0"]).path


@pytest.fixture(scope="module")
def vtest_frames():
    from jetforge.assets import asset_path
    from jetforge.apps.video import open_source

    with open_source(asset_path("opencv_samples", "vtest.avi")) as source:
        return [f.image for f in source if f.index in (40, 400)]


# ---- preprocessing in nvinfer's terms ------------------------------------------------------------
def test_imagenet_normalisation_is_approximated_with_its_error_stated():
    pre = Preprocess()  # torchvision ImageNet: scale 1/255, per-channel mean and std
    mapped = nvinfer_preprocess(pre)
    std = np.array([0.229, 0.224, 0.225])
    assert not mapped.exact_normalization
    # the best single factor leaves the smallest and largest per-channel factors equally far off:
    # error = (k_max - k_min) / (k_max + k_min) = (0.229 - 0.224) / (0.229 + 0.224)
    assert mapped.max_relative_scale_error == pytest.approx((0.229 - 0.224) / (0.229 + 0.224), rel=1e-9)
    ks = 1.0 / (255.0 * std)
    assert mapped.net_scale_factor == pytest.approx(2.0 / (1 / ks.min() + 1 / ks.max()), rel=1e-12)
    assert mapped.offsets == pytest.approx([0.485 * 255, 0.456 * 255, 0.406 * 255], rel=1e-12)
    assert "per-channel std" in mapped.notes[0] and "centre crop" in mapped.notes[1]


def test_an_expressible_normalisation_reproduces_the_sidecar_pixels_exactly():
    # the SSD detector's x * 2/255 - 1, in BGR order, letterboxed: nvinfer's y = k * (x - o) must give the
    # same tensor as the jetforge preprocessing (float32 rounding only)
    pre = Preprocess(height=4, width=5, resize="stretch", color="bgr", scale=2 / 255.0, mean=(1.0,), std=(1.0,))
    mapped = nvinfer_preprocess(pre)
    assert mapped.exact_normalization and mapped.model_color_format == 1
    image = np.random.default_rng(0).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    nvinfer = mapped.net_scale_factor * (image.astype(np.float64).transpose(2, 0, 1) -
                                         np.asarray(mapped.offsets)[:, None, None])
    assert np.max(np.abs(nvinfer - pre.apply(image))) < 1e-6  # float32 rounding of values in [-1, 1]
    letterbox = nvinfer_preprocess(Preprocess(resize="letterbox", mean=(0.5,), std=(0.5,)))
    assert letterbox.maintain_aspect_ratio and letterbox.symmetric_padding and "114" in letterbox.notes[0]


# ---- DeepStream ------------------------------------------------------------------------------------
def test_deepstream_classifier_configuration(cls_bundle, tmp_path, capsys):
    from jetforge.runtime.sidecar import read_sidecar

    out = tmp_path / "ds"
    rc, text, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", out, "--sources", 4,
                            "--precision", "fp16")
    assert rc == 0, err
    assert "approximate: up to 1.10% off" in text and "deepstream-app -c" in text
    nv = read_keyfile((out / "config_infer_primary_jetforge.txt").read_bytes())
    p = "property"
    assert nv.get_string(p, "onnx-file") == "model.onnx" and (out / "model.onnx").is_file()
    assert nv.get_integer(p, "batch-size") == 4 and nv.get_integer(p, "network-mode") == 2
    assert nv.get_integer(p, "network-type") == 1 and nv.get_integer_list(p, "infer-dims") == [3, 224, 224]
    assert nv.get_string(p, "model-engine-file") == "model.onnx_b4_gpu0_fp16.engine"
    assert nv.get_integer(p, "model-color-format") == 0 and not nv.has(p, "int8-calib-file")
    assert nv.get_string_list(p, "output-blob-names") == ["logits"]
    # logits, not probabilities: the generated softmax parser, not nvinfer's own
    assert nv.get_string(p, "parse-classifier-func-name") == "NvDsInferClassiferParseCustomJetforgeSoftmax"
    labels = (out / "labels.txt").read_text().rstrip("\n").split(";")
    assert labels == read_sidecar(cls_bundle / "model.onnx").labels and len(labels) == 1000
    app = read_keyfile((out / "deepstream_app_config.txt").read_bytes())
    assert app.get_integer("streammux", "batch-size") == 4 and app.get_integer("source0", "num-sources") == 4
    assert (app.get_integer("tiled-display", "rows"), app.get_integer("tiled-display", "columns")) == (2, 2)
    assert app.get_string("primary-gie", "config-file") == "config_infer_primary_jetforge.txt"
    assert verify_bundle(cls_bundle).ok and not verify_bundle(cls_bundle).unexpected  # the bundle is untouched
    # an existing folder is refused without --force, with one line
    rc, _, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", out)
    assert rc == 1 and "already exists" in err and len(err.strip().splitlines()) == 1


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["deepstream", "triton"])
def test_export_config_force_never_deletes_what_it_did_not_write(cls_bundle, tmp_path, capsys, kind):
    """--force replaced any folder (issue 25: '--force must never remove anything it did not create')."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "thesis.tex").write_text("months of work\n")
    before = _snapshot(project)
    rc, _, err = run_cli(capsys, "export-config", kind, cls_bundle, "--out", project, "--force")
    assert rc == 1 and "not one" in err and len(err.strip().splitlines()) == 1 and _snapshot(project) == before
    out = tmp_path / "exported"
    assert run_cli(capsys, "export-config", kind, cls_bundle, "--out", out)[0] == 0
    (out / "model.onnx_b1_gpu0_fp16.engine").write_bytes(b"built on the board")  # a product of what it wrote
    assert run_cli(capsys, "export-config", kind, cls_bundle, "--out", out, "--force")[0] == 0
    (out / "notes.md").write_text("mine\n")
    before = _snapshot(out)
    rc, _, err = run_cli(capsys, "export-config", kind, cls_bundle, "--out", out, "--force")
    assert rc == 1 and "notes.md" in err and _snapshot(out) == before


def test_int8_configuration_uses_the_bundles_cache(cls_bundle, tmp_path, capsys):
    out = tmp_path / "ds"
    rc, _, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", out, "--dla-core", 1)
    assert rc == 0, err
    nv = read_keyfile((out / "config_infer_primary_jetforge.txt").read_bytes())
    assert nv.get_integer("property", "network-mode") == 1 and nv.get_string("property", "int8-calib-file") == "calib.table"
    assert (out / "calib.table").read_bytes() == (cls_bundle / "calib" / "trt-10.3.0.calib").read_bytes()
    assert nv.get_boolean("property", "enable-dla") and nv.get_integer("property", "use-dla-core") == 1
    assert nv.get_string("property", "model-engine-file") == "model.onnx_b1_dla1_int8.engine"


def test_normalize_in_model_is_exact_on_real_images(cls_bundle, photos, tmp_path, capsys):
    from jetforge.runtime.sidecar import read_sidecar
    from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache

    out = tmp_path / "ds"
    rc, text, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", out, "--normalize-in-model",
                            "--check-images", photos, "--json")
    assert rc == 0, err
    summary = json.loads(text)
    check = summary["normalization"]
    assert check["images"] == len(PHOTOS) and check["ok"] and check["top1_agreement"] == 1.0
    assert check["relative"] <= 1e-4  # tolerance derived in normalize_onnx.RELATIVE_TOLERANCE
    model = onnx.load(str(out / "model.onnx"))
    original = onnx.load(str(cls_bundle / "model.onnx"))
    assert [n.op_type for n in model.graph.node[:2]] == ["Sub", "Mul"]
    assert model.graph.input[0].name == original.graph.input[0].name == "input"
    # not folded: every convolution weight is the original's, bit for bit
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in original.graph.initializer}
    for init in model.graph.initializer:
        if init.name in weights:
            assert np.array_equal(onnx.numpy_helper.to_array(init), weights[init.name])
    mean = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "input_pixel_mean"))
    assert mean.reshape(-1) == pytest.approx([123.675, 116.28, 103.53], rel=1e-6)
    side = read_sidecar(out / "model.onnx")
    assert (side.preprocess.scale, tuple(side.preprocess.mean), tuple(side.preprocess.std)) == (1.0, (0.0,), (1.0,))
    nv = read_keyfile((out / "config_infer_primary_jetforge.txt").read_bytes())
    assert nv.get_double("property", "net-scale-factor") == 1.0
    assert nv.get_double_list("property", "offsets") == [0.0, 0.0, 0.0]
    # INT8: the cache's input scale moves to the normalised tensor; the raw input gets 255/127
    cache = parse_calibration_cache((out / "calib.table").read_bytes())
    assert cache.scales["input"] == pytest.approx(255 / 127.0, rel=1e-6)
    assert cache.scales["input_normalized"] == pytest.approx(2.64 / 127.0, rel=1e-6)
    assert cache.scales["input_centered"] == pytest.approx((255 - 103.53) / 127.0, rel=1e-6)
    # --check-images without --normalize-in-model is one clear error
    rc, _, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", tmp_path / "x", "--check-images",
                         photos)
    assert rc == 1 and "--normalize-in-model" in err


def _compile(tmp_path, source):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the generated C++ parser cannot be compiled here")
    exe = tmp_path / "driver"
    subprocess.run(["g++", "-std=c++14", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
                    "-I", str(FAKE_DS), str(source), str(FAKE_DS / "driver.cpp"), "-o", str(exe)], check=True)
    return exe


def test_generated_softmax_parser_matches_numpy(cls_bundle, photos, tmp_path, capsys):
    import cv2

    from jetforge.runtime.session import open_session

    out = tmp_path / "ds"
    assert run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", out, "--precision", "fp16")[0] == 0
    exe = _compile(tmp_path, out / "parsers" / "nvdsinfer_jetforge_parsers.cpp")
    labels = (out / "labels.txt").read_text().rstrip("\n").split(";")
    with open_session(cls_bundle / "model.onnx", backend="onnxruntime") as s:
        logits = s.infer({"input": s.sidecar.preprocess.batch([cv2.imread(str(photos / "fruits.jpg"))])})["logits"][0]
    (tmp_path / "logits.bin").write_bytes(logits.astype("<f4").tobytes())
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    line = subprocess.run([str(exe), "softmax", "logits", str(tmp_path / "logits.bin"), "0.01"], check=True,
                          capture_output=True, text=True).stdout.strip()
    index, prob, label = line.split(" ", 2)
    assert int(index) == int(np.argmax(logits)) and label == labels[int(index)]
    assert float(prob) == pytest.approx(p.max(), rel=1e-6)  # float32 result of a float64 sum
    above = subprocess.run([str(exe), "softmax", "logits", str(tmp_path / "logits.bin"), str(p.max() + 1e-3)],
                           check=True, capture_output=True, text=True).stdout
    assert above == ""  # below classifier-threshold: no attribute


@pytest.mark.slow
def test_deepstream_detector_configuration_and_parser(ssd_bundle, vtest_frames, tmp_path, capsys):
    from jetforge.vision.ssd import convert_scores, decode_boxes, spec_from_sidecar
    from jetforge.runtime.session import open_session

    out = tmp_path / "ds"
    rc, text, err = run_cli(capsys, "export-config", "deepstream", ssd_bundle, "--out", out, "--threshold", "0.3")
    assert rc == 0, err
    nv = read_keyfile((out / "config_infer_primary_jetforge.txt").read_bytes())
    p = "property"
    assert nv.get_integer(p, "network-type") == 0 and nv.get_integer(p, "num-detected-classes") == 1
    assert nv.get_integer(p, "cluster-mode") == 2 and nv.get_string(p, "parse-bbox-func-name") == "NvDsInferParseCustomJetforgeSSD"
    assert nv.get_string_list(p, "output-blob-names") == ["box_encodings", "class_logits"]
    assert nv.get_double(p, "net-scale-factor") == pytest.approx(2 / 255.0, rel=1e-7)
    assert nv.get_double_list(p, "offsets") == pytest.approx([127.5] * 3, rel=1e-7)
    assert nv.get_double("class-attrs-all", "nms-iou-threshold") == 0.6 and nv.get_integer("class-attrs-all", "topk") == 100
    assert (out / "labels.txt").read_text() == "person\n"
    exe = _compile(tmp_path, out / "parsers" / "nvdsinfer_jetforge_parsers.cpp")
    with open_session(ssd_bundle / "model.onnx", backend="onnxruntime") as s:
        spec = spec_from_sidecar(s.sidecar)
        for i, frame in enumerate(vtest_frames):
            res = s.infer({"input": s.sidecar.preprocess.batch([frame])})
            enc, logits = res["box_encodings"][0], res["class_logits"][0]
            (tmp_path / "b.bin").write_bytes(enc.astype("<f4").tobytes())
            (tmp_path / "l.bin").write_bytes(logits.astype("<f4").tobytes())
            lines = subprocess.run([str(exe), "ssd", "box_encodings", str(tmp_path / "b.bin"), "class_logits",
                                    str(tmp_path / "l.bin"), "300", "300", "0.3"], check=True, capture_output=True,
                                   text=True).stdout.split("\n")
            got = np.array([[float(v) for v in line.split()[1:]] for line in lines if line], dtype=np.float64)
            # numpy reference: the runtime's decoder and sigmoid, the same threshold, clipped, as x, y, w, h pixels
            boxes = np.clip(decode_boxes(enc[None], spec.anchors(), spec.scale_factors)[0], 0, 1)
            scores = convert_scores(logits[None], spec.score_converter, spec.logit_scale)[0, :, 1]
            keep = (scores >= np.float32(0.3)) & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
            b = boxes[keep].astype(np.float64) * 300
            want = np.stack([b[:, 1], b[:, 0], b[:, 3] - b[:, 1], b[:, 2] - b[:, 0], scores[keep]], axis=1)
            assert len(want) >= 3, "frame %d should show people" % i
            assert got.shape == want.shape
            # the same float32 operations in the same order; exp may differ by an ulp between libm and numpy
            assert np.max(np.abs(got - want)) < 1e-3


# ---- Triton -----------------------------------------------------------------------------------------
def model_config_pb2():
    """Triton's ModelConfig message, from the tritonclient package (grpc/model_config_pb2.py needs protobuf only)."""
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("tritonclient is not installed: config.pbtxt is not parsed with Triton's schema in this run "
                    "(pip install tritonclient into a throwaway venv; see the test's docstring)")
    path = Path(list(spec.submodule_search_locations)[0]) / "grpc" / "model_config_pb2.py"
    loader = importlib.util.spec_from_file_location("jetforge_test_model_config_pb2", str(path))
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def parse_pbtxt(path):
    from google.protobuf import text_format

    return text_format.Parse(path.read_text(), model_config_pb2().ModelConfig())


def test_triton_classifier_repository(cls_bundle, tmp_path, capsys):
    out = tmp_path / "repo"
    rc, _, err = run_cli(capsys, "export-config", "triton", cls_bundle, "--out", out, "--max-batch", 16)
    assert rc == 0, err
    script = (out / "build_engines.sh").read_text()
    assert ("trtexec --onnx=onnx/mobilenet_v2.onnx --saveEngine=mobilenet_v2/1/model.plan "
            "--minShapes=input:1x3x224x224 --optShapes=input:8x3x224x224 --maxShapes=input:16x3x224x224 --fp16 --int8 "
            "--calib=onnx/mobilenet_v2.calib") in script
    assert (out / "onnx" / "mobilenet_v2.calib").read_bytes() == (cls_bundle / "calib" / "trt-10.3.0.calib").read_bytes()
    config = parse_pbtxt(out / "mobilenet_v2" / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 16
    assert [(t.name, list(t.dims)) for t in config.input] == [("input", [3, 224, 224])]
    assert config.output[0].name == "logits" and list(config.output[0].dims) == [1000]
    assert config.output[0].label_filename == "labels.txt" and config.input[0].data_type == 11  # TYPE_FP32
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.instance_group[0].kind == 1 and config.instance_group[0].count == 1  # KIND_GPU


class FakeTritonPythonBackendUtils(types.ModuleType):
    """Stands in for Triton's triton_python_backend_utils (it exists only inside the Triton server)."""

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

        def as_numpy(self):
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors):
            self.output_tensors = output_tensors

    @staticmethod
    def get_input_tensor_by_name(request, name):
        return request[name]


@pytest.mark.slow
def test_triton_detector_ensemble_runs_the_runtime_postprocess(ssd_bundle, vtest_frames, tmp_path, capsys, monkeypatch):
    from jetforge.deploy.triton.config import check_ensemble
    from jetforge.vision.ssd import postprocess, spec_from_sidecar
    from jetforge.runtime.session import open_session

    out = tmp_path / "repo"
    rc, _, err = run_cli(capsys, "export-config", "triton", ssd_bundle, "--out", out, "--platform", "onnxruntime_onnx")
    assert rc == 0, err
    name = "ssdlite_mobilenet_v2_person"
    assert (out / (name + "_body") / "1" / "model.onnx").read_bytes() == (ssd_bundle / "model.onnx").read_bytes()
    assert (out / name / "1").is_dir()  # an ensemble needs a version folder too
    try:
        ens = parse_pbtxt(out / name / "config.pbtxt")
        assert ens.platform == "ensemble" and [s.model_name for s in ens.ensemble_scheduling.step] == [
            name + "_body", name + "_postprocess"]
        post = parse_pbtxt(out / (name + "_postprocess") / "config.pbtxt")
        assert post.backend == "python" and post.parameters["score_threshold"].string_value == "0.01"
    except pytest.skip.Exception:
        pass  # the Python-backend check below does not need tritonclient
    # the postprocess model, loaded as Triton would, on real body outputs
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", FakeTritonPythonBackendUtils("pb_utils"))
    loader = importlib.util.spec_from_file_location("triton_model", str(out / (name + "_postprocess") / "1" / "model.py"))
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_repository": str(out / (name + "_postprocess")), "model_version": "1",
                      "model_config": json.dumps({"parameters": {"score_threshold": {"string_value": "0.01"}}})})
    with open_session(ssd_bundle / "model.onnx", backend="onnxruntime") as s:
        spec = spec_from_sidecar(s.sidecar)
        raw = s.infer({"input": s.sidecar.preprocess.batch(vtest_frames)})
    pb = FakeTritonPythonBackendUtils
    responses = model.execute([{k: pb.Tensor(k, raw[k]) for k in ("box_encodings", "class_logits")}])
    arrays = {t.name: t.array for t in responses[0].output_tensors}
    want = postprocess(raw["box_encodings"], raw["class_logits"], spec, score_threshold=0.01)
    for i, det in enumerate(want):
        n = len(det)
        assert arrays["num_detections"][i, 0] == n and n > 3
        assert np.array_equal(arrays["detection_boxes"][i, :n], det.boxes)
        assert np.array_equal(arrays["detection_scores"][i, :n], det.scores)
        assert not arrays["detection_scores"][i, n:].any()  # padding
    assert arrays["detection_boxes"].shape == (2, 100, 4) and arrays["detection_classes"].dtype == np.int32
    # the tensor-flow check catches a body whose output was renamed
    from jetforge.deploy.triton import config as tr

    body = tr.model_config("b", "onnxruntime_onnx", tr.TritonOptions(), [tr.tensor("input", "float32", [3, 300, 300])],
                           [tr.tensor("boxes", "float32", [1917, 4]), tr.tensor("class_logits", "float32", [1917, 2])])
    posted = tr.postprocess_config("p", tr.TritonOptions(), spec, s.sidecar.outputs)
    problems = check_ensemble([body, posted, tr.ensemble_config("e", tr.TritonOptions(), body, posted)])
    assert any("reads box_encodings before anything produces it" in p for p in problems)


def test_export_config_errors_are_one_line(cls_bundle, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(str(cls_bundle), str(broken))
    (broken / "model.onnx").write_bytes(b"not a model")
    rc, _, err = run_cli(capsys, "export-config", "triton", broken, "--out", tmp_path / "o")
    assert rc == 1 and "corrupt" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(capsys, "export-config", "triton", cls_bundle, "--out", tmp_path / "o", "--max-batch", 4,
                         "--preferred-batch", 8)
    assert rc == 1 and "preferred batch size 8 is outside 1..4" in err
    rc, _, err = run_cli(capsys, "export-config", "deepstream", cls_bundle, "--out", cls_bundle / "inside")
    assert rc == 1 and "overlaps the bundle" in err
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*partial*"))
