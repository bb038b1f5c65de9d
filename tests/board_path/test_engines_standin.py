"""Every shipped model kind, bundled and built by jetforge, runs through ``TrtSession`` with the TensorRT stand-in.

``bundle create`` -> ``jetforge build BUNDLE`` (the real builder code against the stand-in's builder API) -> the
engine opened with ``open_session(ENGINE)`` (the ``tensorrt`` backend: TrtSession's buffers, copies, shape binding,
CUDA-graph capture and replay over the stand-in's host memory) and compared, output by output, with the bundle's
ONNX model in ONNX Runtime on the same inputs.  Tolerance: both compute the same FP32 graph in ONNX Runtime and
differ only in the order of FP32 sums (conftest.py derives rtol = atol = 1e-4); measured differences are ~1e-6.
The stand-in's refusals are checked where TensorRT refuses (shape outside the profile, a plan of another kind,
INT8 and DLA builds, which cannot be shown here and are reported, never faked).
"""

import json

import numpy as np
import pytest

from tests.board_path.conftest import (ATOL, BATCH_PROFILE, MTCNN_PROFILES, RTOL, TARGET, TENSORRT, profile_config,
                                       run_cli)

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")



def bundle_and_build(model, tmp_path, name, *extra):
    bundle = tmp_path / ("bundle-" + name)
    assert run_cli(["-q", "bundle", "create", str(model), "--target", TARGET, "--tensorrt", TENSORRT,
                    "--out", str(bundle)] + list(extra)) == 0
    engine = tmp_path / (name + ".engine")
    assert run_cli(["-q", "build", str(bundle), "--target", TARGET, "--out", str(engine)]) == 0
    return bundle, engine


def compare_sessions(engine, onnx, feeds_list):
    """Each feed through the engine (TrtSession) and through ONNX Runtime; returns the largest difference."""
    from jetforge.runtime.session import open_session

    worst = 0.0
    with open_session(engine) as trt_session, open_session(onnx, backend="onnxruntime") as reference:
        assert trt_session.name == "tensorrt" and "stand-in" in trt_session.describe()
        for feeds in feeds_list:
            got, want = trt_session.infer(feeds), reference.infer(feeds)
            assert sorted(got) == sorted(want)
            for name in want:
                assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
                np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)
                worst = max(worst, float(np.max(np.abs(got[name] - want[name]), initial=0.0)))
        info = trt_session.info()
    return worst, info


def _inputs(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def test_classifier_engine_matches_onnx(standin, mobilenet_onnx, tmp_path):
    bundle, engine = bundle_and_build(mobilenet_onnx, tmp_path, "classifier")
    feeds = [{"input": _inputs((1, 3, 224, 224), s)} for s in range(3)]
    worst, info = compare_sessions(engine, bundle / "model.onnx", feeds)
    # the first call runs and captures a CUDA graph, the next two replay it
    assert info["cuda_graph"] == "on" and info["cuda_graph_captures"] == 1 and standin.launches == 2
    # one context, given the activation memory as TensorRT 10.1+ hands it out (USER_MANAGED, set_device_memory)
    assert info["cuda_graph_contexts"] == 1 and info["context_memory"].startswith("shared: one 65536-byte scratch")
    assert worst < 1e-4


def test_person_detector_engine_matches_onnx(standin, person_detector, tmp_path):
    bundle, engine = bundle_and_build(person_detector, tmp_path, "detector")
    spec = json.loads((bundle / "model.onnx.json").read_text())["inputs"][0]
    shape = [1 if isinstance(d, str) else int(d) for d in spec["shape"]]
    feeds = [{spec["name"]: _inputs(shape, s)} for s in range(2)]
    worst, _ = compare_sessions(engine, bundle / "model.onnx", feeds)
    assert worst < 1e-3


def test_action_engine_matches_onnx(standin, action_model, tmp_path):
    bundle, engine = bundle_and_build(action_model, tmp_path, "action", "--shape", "clip=1x3x8x112x112")
    worst, _ = compare_sessions(engine, bundle / "model.onnx", [{"clip": _inputs((1, 3, 8, 112, 112), s)}
                                                                 for s in range(2)])
    assert worst < 1e-4


def test_mtcnn_engines_match_onnx_over_the_pyramid_and_candidate_batches(standin, mtcnn_models, tmp_path):
    """PNet's input changes shape at every pyramid level (a context and a graph per level, buffers sized at the
    profile's max when the engine opens);
    RNet/ONet take candidate batches of varying size within the profile."""
    _, pnet = bundle_and_build(mtcnn_models / "pnet.onnx", tmp_path, "pnet",
                               *profile_config(tmp_path, "pnet", MTCNN_PROFILES["pnet"]))
    levels = [(86, 106), (61, 75), (43, 53), (31, 38), (22, 27), (15, 19), (86, 106)]
    _, info = compare_sessions(pnet, mtcnn_models / "pnet.onnx", [{"input": _inputs((1, 3) + hw, i)}
                                                                  for i, hw in enumerate(levels)])
    # a graph and a context per level, the first level's graph replayed when it comes back
    assert info["cuda_graph_captures"] == 6 and info["cuda_graph_contexts"] == 6 and standin.launches == 1
    for net, side in (("rnet", 24), ("onet", 48)):
        _, engine = bundle_and_build(mtcnn_models / ("%s.onnx" % net), tmp_path, net,
                                     *profile_config(tmp_path, net, MTCNN_PROFILES[net]))
        compare_sessions(engine, mtcnn_models / ("%s.onnx" % net),
                         [{"input": _inputs((n, 3, side, side), n)} for n in (1, 7, BATCH_PROFILE, 3)])


def test_the_engine_refuses_what_tensorrt_refuses(standin, mtcnn_models, tmp_path):
    from jetforge.errors import ModelError
    from jetforge.runtime.session import open_session

    shapes = {"min": [1, 3, 24, 24], "opt": [4, 3, 24, 24], "max": [8, 3, 24, 24]}
    _, engine = bundle_and_build(mtcnn_models / "rnet.onnx", tmp_path, "rnet", *profile_config(tmp_path, "rnet",
                                                                                                 shapes))
    with open_session(engine, cuda_graph=False) as session:
        with pytest.raises(ModelError, match="outside the engine's optimization profile"):
            session.infer({"input": _inputs((9, 3, 24, 24), 0)})
        ctx = session._context  # the stand-in itself refuses like TensorRT, not only jetforge's own check
        assert ctx.set_input_shape("input", (9, 3, 24, 24)) is False
        assert ctx.set_input_shape("input", (2, 3, 25, 24)) is False
        assert session.info()["cuda_graph"] == "off"
    other = tmp_path / "other.engine"
    data = engine.read_bytes()
    other.write_bytes(data.replace(b"10.3.0+stand-in", b"10.4.0+stand-in", 1))
    (tmp_path / "other.engine.json").write_text((tmp_path / "rnet.engine.json").read_text())
    with pytest.raises(ModelError, match="cannot load"):
        open_session(other, verify_sidecar=False)


def test_a_fresh_context_executes_only_with_every_address_and_shape_set(standin, mtcnn_models, tmp_path):
    from tests.standins import tensorrt_standin as trt

    _, engine = bundle_and_build(mtcnn_models / "onet.onnx", tmp_path, "onet",
                                 *profile_config(tmp_path, "onet", {"min": [1, 3, 48, 48], "opt": [1, 3, 48, 48],
                                                                    "max": [4, 3, 48, 48]}))
    logger = trt.ILogger()
    eng = trt.Runtime(logger).deserialize_cuda_engine(engine.read_bytes())
    ctx = eng.create_execution_context()
    assert ctx.get_tensor_shape(eng.get_tensor_name(1))[0] == -1  # outputs unknown until the inputs are
    assert ctx.execute_async_v3(0) is False  # the dynamic batch is not set
    assert ctx.set_input_shape("input", (2, 3, 48, 48))
    assert ctx.execute_async_v3(0) is False  # no addresses
    assert trt.Runtime(logger).deserialize_cuda_engine(b"\x00" * 64) is None  # not a plan


@pytest.mark.parametrize("flags,why", [(["--precision", "int8"], "INT8 is not executed by the stand-in"),
                                       (["--dla-core", "0"], "DLA")])
def test_int8_and_dla_builds_are_refused_not_faked(standin, mobilenet_onnx, tmp_path, capsys, flags, why):
    from jetforge.errors import EngineBuildError
    from jetforge.runtime.tensorrt.builder import build_engine
    from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan
    from jetforge.targets import get_target

    options = BuildOptions(precision="int8" if "int8" in flags else "fp16",
                           input_shapes={"input": [1, 3, 224, 224]},
                           dla_core=0 if "--dla-core" in flags else None,
                           calibration_cache=str(_cache(tmp_path)) if "int8" in flags else None)
    plan = make_plan(mobilenet_onnx, get_target("agx-orin-64gb"), options, installed_tensorrt="10.3.0+stand-in")
    with pytest.raises(EngineBuildError, match=why):
        build_engine(plan, tmp_path / "refused.engine")
    assert not (tmp_path / "refused.engine").exists()


def _cache(tmp_path):
    import struct

    path = tmp_path / "model.calib"
    path.write_text("TRT-100300-EntropyCalibration2\n" + "\n".join(
        "%s: %s" % (n, struct.pack(">f", s).hex()) for n, s in (("input", 2.64 / 127.0), ("logits", 0.15))) + "\n")
    return path
