"""Build plans: every impossible combination is a one-line EngineBuildError naming the fix.

The rules are listed in runtime/tensorrt/plan_steps.py and docs/architecture.md ("The TensorRT package").

Targets are the real profiles of ``jetforge.targets``; models are small ONNX graphs made with onnx.helper.
"""

import json
import struct

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.config import load_config  # noqa: E402
from jetforge.errors import CalibrationError, ConfigError, EngineBuildError, InputFileError  # noqa: E402
from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache  # noqa: E402
from jetforge.runtime.tensorrt.plan import (BuildOptions, BuildPlan, ShapeRange, load_build_options,  # noqa: E402
                                            make_plan, parse_shape)
from jetforge.runtime.tensorrt.version import TensorRTVersion  # noqa: E402
from jetforge.runtime.tensorrt.engine_sidecar import (EngineSidecar, read_engine_sidecar,  # noqa: E402
                                            write_engine_sidecar)
from jetforge.runtime.sidecar import TensorSpec  # noqa: E402
from jetforge.targets import get_target  # noqa: E402


def _save(path, batch=1, qdq=False):
    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), dtype=np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    inits = [w]
    if qdq:
        nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["xq"]),
                 helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"]),
                 helper.make_node("Conv", ["xd", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["y"])]
        inits.append(numpy_helper.from_array(np.asarray(0.02, dtype=np.float32), "s"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _cache(path, header):
    lines = [header] + ["%s: %s" % (n, struct.pack(">f", s).hex()) for n, s in (("x", 1 / 127.0), ("y", 0.05))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def static_onnx(tmp_path):
    return _save(tmp_path / "model.onnx")


@pytest.fixture
def dynamic_onnx(tmp_path):
    return _save(tmp_path / "dyn.onnx", batch="N")


@pytest.fixture
def qdq_onnx(tmp_path):
    return _save(tmp_path / "model.qdq.onnx", qdq=True)


ORIN = "agx-orin-64gb"


def _fails(onnx_path, target, fix_word, **opts):
    with pytest.raises(EngineBuildError) as err:
        make_plan(onnx_path, get_target(target), BuildOptions(**opts))
    text = err.value.one_line()
    assert "\n" not in text and err.value.hint, text
    assert fix_word in text, text
    return text


def test_fp16_gpu_plan_from_the_jetpack_table(static_onnx):
    plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="fp16"))
    assert (plan.tensorrt_version, plan.device, plan.flags, plan.dla_core) == ("10.3.0", "gpu", ["FP16"], None)
    assert plan.inputs == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert plan.outputs[0]["name"] == "y" and len(plan.onnx_sha256) == 64
    assert any("JetPack table" in n for n in plan.notes)
    again = BuildPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan


def test_fp16_dla_plan_with_fallback_and_pools(static_onnx):
    plan = make_plan(static_onnx, get_target("orin-nx-16gb"),
                     BuildOptions(precision="fp16", dla_core=1, dla_sram_bytes=1 << 19, workspace_mib=256))
    assert plan.device == "dla" and plan.dla_core == 1 and plan.gpu_fallback
    assert plan.flags == ["FP16", "GPU_FALLBACK"]
    assert plan.memory_pools == {"workspace": 256 << 20, "dla_managed_sram": 1 << 19}


def test_int8_dla_plan_with_a_matching_cache(static_onnx, tmp_path):
    cache = _cache(tmp_path / "model.calib", "TRT-100300-EntropyCalibration2")
    plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="int8", dla_core=0,
                                                                   calibration_cache=str(cache)))
    assert plan.int8_source == "cache" and plan.calibration_header == "TRT-100300-EntropyCalibration2"
    assert plan.flags == ["FP16", "INT8", "GPU_FALLBACK"]
    xavier = make_plan(static_onnx, get_target("agx-xavier"),
                       BuildOptions(precision="int8", dla_core=0,
                                    calibration_cache=str(_cache(tmp_path / "x.calib", "TRT-8502-EntropyCalibration2"))))
    assert xavier.tensorrt_version == "8.5.2" and xavier.int8_source == "cache"


def test_cache_header_numbers_and_parser():
    number = lambda text: TensorRTVersion.parse(text).cache_header_number()  # noqa: E731
    assert number("8.5.2") == 8502 and number("8.6.2") == 8602
    assert number("10.3.0") == 100300 and number("10.3") == 100300
    info = parse_calibration_cache(b"TRT-8600-EntropyCalibration2\nimages: 3c00f9f4\nprob: 3c010a14\n")
    assert info.version_number == 8600 and info.algorithm == "EntropyCalibration2"
    assert info.scales["images"] == pytest.approx(0.0078721, rel=1e-4)     # the value NVIDIA cuDLA-samples ship
    assert info.scales["prob"] == pytest.approx(1 / 127.0, rel=1e-3)
    # the planner reads caches with the one reader (tests/runtime/trt/test_calib_cache.py has its rules)
    with pytest.raises(CalibrationError):
        parse_calibration_cache(b"not a cache\n")
    with pytest.raises(CalibrationError):
        parse_calibration_cache(b"TRT-8502-EntropyCalibration2\nx: zz\n")


@pytest.mark.parametrize("body,fragment", [
    (b"x: 3c010a14\nlogits: 2db8\n", "line 3: the scale is subnormal"),      # the last value cut short
    (b"x: 7fc00000\n", "line 2: the scale is not a number"),
    (b"x: 7f800000\n", "line 2: the scale is infinite"),
    (b"x: 0\n", "line 2: the scale is zero"),
    (b"x: bf800000\n", "line 2: the scale is negative"),
    (b"x: 3c010a14\nx: 3d000000\n", "line 3 names the tensor of line 2 again"),
    (b"\xff\xfe: 3c010a14\n", "is not ASCII"),
])
def test_plan_refuses_caches_no_calibration_writes(static_onnx, tmp_path, body, fragment):
    """The build side used to accept NaN, Inf, zero, negative and cut scales, non-ASCII and duplicates."""
    cache = tmp_path / "bad.calib"
    cache.write_bytes(b"TRT-100300-EntropyCalibration2\n" + body)
    with pytest.raises(CalibrationError) as err:
        make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="int8", dla_core=0,
                                                              calibration_cache=str(cache)))
    assert fragment in err.value.one_line() and str(cache) in err.value.one_line()


# ---------------------------------------------------------------- impossible combinations
def test_dla_on_boards_without_dla(static_onnx):
    for name in ("orin-nano-8gb", "jetson-thor", "desktop-ampere"):
        _fails(static_onnx, name, "has no DLA", dla_core=0, tensorrt_version=None if "desktop" not in name else "10.3")


@pytest.mark.parametrize("target,core,ok", [("agx-orin-64gb", 1, True), ("agx-orin-64gb", 2, False),
                                            ("orin-nx-8gb", 0, True), ("orin-nx-8gb", 1, False),
                                            ("agx-orin-64gb", -1, False)])
def test_dla_core_index_within_the_targets_count(static_onnx, target, core, ok):
    if ok:
        assert make_plan(static_onnx, get_target(target), BuildOptions(dla_core=core)).dla_core == core
    else:
        _fails(static_onnx, target, "does not exist", dla_core=core)


def test_dla_needs_fp16_or_int8(static_onnx):
    _fails(static_onnx, ORIN, "FP16 or INT8", precision="fp32", dla_core=0)
    assert make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="fp32")).flags == []


def test_int8_needs_scales(static_onnx):
    _fails(static_onnx, ORIN, "calibration cache", precision="int8", dla_core=0)
    _fails(static_onnx, ORIN, "--calib", precision="int8")
    best = make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="best"))
    assert best.precision == "fp16" and best.flags == ["FP16"] and any("INT8 disabled" in n for n in best.notes)


def test_dla_rejects_qdq_and_qdq_plus_cache(qdq_onnx, tmp_path):
    _fails(qdq_onnx, ORIN, "Q/DQ", precision="int8", dla_core=0)
    cache = _cache(tmp_path / "m.calib", "TRT-100300-EntropyCalibration2")
    _fails(qdq_onnx, ORIN, "drop --calib", precision="int8", calibration_cache=str(cache))
    plan = make_plan(qdq_onnx, get_target(ORIN), BuildOptions(precision="int8"))
    assert plan.int8_source == "qdq" and "INT8" in plan.flags


def test_tensorrt_11_rejects_implicit_int8_and_takes_qdq(static_onnx, qdq_onnx, tmp_path):
    cache = _cache(tmp_path / "m.calib", "TRT-110000-EntropyCalibration2")
    _fails(static_onnx, "desktop-ampere", "Q/DQ", precision="int8", calibration_cache=str(cache),
           tensorrt_version="11.0.0")
    _fails(static_onnx, "desktop-ampere", "Q/DQ", precision="int8", tensorrt_version="11.0.0")
    plan = make_plan(qdq_onnx, get_target("desktop-ampere"), BuildOptions(precision="int8", tensorrt_version="11.0"))
    assert plan.strongly_typed and plan.flags == [] and plan.int8_source == "qdq"
    fp16 = make_plan(static_onnx, get_target("desktop-ampere"), BuildOptions(tensorrt_version="11.0"))
    assert fp16.flags == [] and any("no FP16/INT8 builder flags" in n for n in fp16.notes)
    _fails(static_onnx, "desktop-ampere", "strongly typed", tensorrt_version="11.0",
           layer_precisions={"conv": "fp32"})


def test_cache_header_must_match_the_plans_tensorrt(static_onnx, tmp_path):
    old = _cache(tmp_path / "old.calib", "TRT-8502-EntropyCalibration2")
    text = _fails(static_onnx, ORIN, "TRT-100300", precision="int8", dla_core=0, calibration_cache=str(old))
    assert "8502" in text
    minmax = _cache(tmp_path / "mm.calib", "TRT-100300-MinMaxCalibration")
    _fails(static_onnx, ORIN, "EntropyCalibration2", precision="int8", calibration_cache=str(minmax))
    with pytest.raises(InputFileError):
        make_plan(static_onnx, get_target(ORIN), BuildOptions(precision="int8", calibration_cache="missing.calib"))


@pytest.mark.parametrize("value,ok", [(4096, True), (1 << 20, True), (2048, False), (4097, False), (3 << 20, False)])
def test_dla_pools_power_of_two_at_least_4k(static_onnx, value, ok):
    if ok:
        plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(dla_core=0, dla_local_dram_bytes=value))
        assert plan.memory_pools["dla_local_dram"] == value
    else:
        _fails(static_onnx, ORIN, "power of two", dla_core=0, dla_local_dram_bytes=value)


def test_tensorrt_version_must_ship_for_the_target(static_onnx):
    _fails(static_onnx, ORIN, "does not ship", tensorrt_version="9.0")
    plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(tensorrt_version="8.6.2"))
    assert plan.tensorrt_version == "8.6.2"
    _fails(static_onnx, "jetson-nano", "8.5")                     # JetPack 4.6: TensorRT 8.2
    _fails(static_onnx, "desktop-ampere", "tensorrt_version")     # any TensorRT, none named


def test_a_dynamic_batch_alone_is_planned_at_batch_1_as_dla_check_and_bundle_do(dynamic_onnx, tmp_path):
    """Issue 25: the README's `jetforge build model.onnx ... --dla-core 0` needed --shape for an exported model
    whose only dynamic axis is the batch, although dla-check and bundle create assume batch 1.  Any other dynamic
    axis is a real choice and still asks for --shape."""
    for opts in ({}, {"dla_core": 0, "precision": "fp16"}):
        plan = make_plan(dynamic_onnx, get_target(ORIN), BuildOptions(**opts))
        assert plan.profiles == [{"x": {"min": [1, 3, 32, 32], "opt": [1, 3, 32, 32], "max": [1, 3, 32, 32]}}]
        assert any(n.startswith("assumed x=1x3x32x32 (the dynamic batch axis set to 1") for n in plan.notes)
    free_height = _save(tmp_path / "free_h.onnx", batch="N")
    model = onnx.load(str(free_height))
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    onnx.save(model, str(free_height))
    _fails(free_height, ORIN, "--shape x=1x3x1x32")


def test_dynamic_shapes(dynamic_onnx):
    gpu = make_plan(dynamic_onnx, get_target(ORIN), BuildOptions(
        profiles=[{"x": ShapeRange([1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32])}]))
    assert gpu.profiles == [{"x": {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [8, 3, 32, 32]}}]
    _fails(dynamic_onnx, ORIN, "min = opt = max", dla_core=0,
           profiles=[{"x": ShapeRange([1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32])}])
    dla = make_plan(dynamic_onnx, get_target(ORIN), BuildOptions(dla_core=0, input_shapes={"x": [2, 3, 32, 32]}))
    assert dla.profiles[0]["x"]["min"] == dla.profiles[0]["x"]["max"] == [2, 3, 32, 32]
    _fails(dynamic_onnx, ORIN, "4096", dla_core=0, input_shapes={"x": [4097, 3, 32, 32]})
    _fails(dynamic_onnx, ORIN, "fixed to 3", input_shapes={"x": [1, 4, 32, 32]})
    _fails(dynamic_onnx, ORIN, "does not have", input_shapes={"images": [1, 3, 32, 32]})
    _fails(dynamic_onnx, ORIN, "min <= opt <= max",
           profiles=[{"x": ShapeRange([4, 3, 32, 32], [1, 3, 32, 32], [8, 3, 32, 32])}])


def test_layer_precision_fp32_on_dla(static_onnx):
    plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(dla_core=0, layer_precisions={"conv": "fp32"}))
    assert "PREFER_PRECISION_CONSTRAINTS" in plan.flags and any("runs on the GPU" in n for n in plan.notes)
    _fails(static_onnx, ORIN, "gpu_fallback", dla_core=0, gpu_fallback=False, layer_precisions={"conv": "fp32"})


def test_options_from_yaml(tmp_path):
    cfg = tmp_path / "build.yaml"
    cfg.write_text("precision: int8\ndla_core: 1\nprofiles:\n  - x: {min: [1,3,8,8], opt: [1,3,8,8], max: [1,3,8,8]}\n"
                   "dla_sram_bytes: 524288\n")
    opts = load_build_options(cfg, ["workspace_mib=512"])
    assert (opts.precision, opts.dla_core, opts.workspace_mib) == ("int8", 1, 512)
    assert opts.profiles[0]["x"].opt == [1, 3, 8, 8]
    cfg.write_text("precison: fp16\n")
    with pytest.raises(ConfigError) as err:
        load_build_options(cfg)
    assert "precision" in err.value.one_line()
    with pytest.raises(ConfigError):
        load_config(BuildOptions, None, ["precision=fp8"])
    assert parse_shape("input=1x3x224x224") == ("input", [1, 3, 224, 224])
    with pytest.raises(EngineBuildError):
        parse_shape("1x3x224x224")


def test_engine_sidecar_round_trip_and_checks(static_onnx, tmp_path):
    plan = make_plan(static_onnx, get_target(ORIN), BuildOptions(dla_core=0))
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"plan bytes")
    sidecar = EngineSidecar(tensorrt_version="10.3.0", target=plan.target, precision=plan.precision,
                            device=plan.device, dla_core=0, inputs=[TensorSpec("x", [1, 3, 32, 32])],
                            outputs=[TensorSpec("y", [1, 8, 32, 32])],
                            source_onnx={"path": plan.onnx_path, "sha256": plan.onnx_sha256}, plan=plan.to_dict())
    write_engine_sidecar(engine, sidecar)
    back = read_engine_sidecar(engine, tensorrt_version="10.3.0.26")
    assert back.dla_core == 0 and back.inputs[0].shape == [1, 3, 32, 32] and back.plan["flags"] == plan.flags
    from jetforge.errors import ModelError
    with pytest.raises(ModelError):
        read_engine_sidecar(engine, tensorrt_version="8.6.2")
    engine.write_bytes(b"another plan")
    with pytest.raises(ModelError):
        read_engine_sidecar(engine)


def test_cli_build_without_tensorrt_writes_the_plan_and_says_so(static_onnx, tmp_path, capsys):
    pytest.importorskip("onnx")
    from jetforge.optional import is_available
    if is_available("tensorrt"):
        pytest.skip("TensorRT is installed here: the CLI would build")
    out = tmp_path / "out" / "m.engine"
    rc = main(["build", str(static_onnx), "--target", ORIN, "--dla-core", "0", "-o", str(out)])
    captured = capsys.readouterr()
    assert rc == 1 and "TensorRT is not installed" in captured.err and "python3-libnvinfer" in captured.err
    plan = BuildPlan.read(str(out) + ".plan.json")
    assert plan.device == "dla" and not out.exists()
    rc = main(["build", str(static_onnx), "--target", ORIN, "--plan-only", "--json", "-o", str(out)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["flags"] == ["FP16"] and data["files"]["plan"].endswith(".plan.json")
    rc = main(["build", str(static_onnx), "--target", "orin-nano-8gb", "--dla-core", "0", "--plan-only"])
    assert rc == 1 and "has no DLA" in capsys.readouterr().err
