import struct
from collections import OrderedDict

import numpy as np
import pytest

from jetforge.calibrate.cache.format import CalibrationCache, hex_to_scale, parse_trt_version, scale_to_hex
from jetforge.errors import CalibrationError

# lines of NVIDIA's sampleINT8 README (TensorRT 7), as TensorRT wrote them
SAMPLE_INT8 = """TRT-7000-EntropyCalibration2
data: 3c008912
conv1: 3c88edfc
pool1: 3c88edfc
conv2: 3ddc858b
prob: 3c010a14
"""


@pytest.mark.parametrize("version,number", [("8.5.2", 8502), ("8.6.2", 8602), ("8.6.1", 8601), ("10.3.0", 100300),
                                            ("10.3", 100300), ("7.0", 7000), ("10.7.1", 100701)])
def test_header_numbers(version, number):
    assert parse_trt_version(version).cache_header_number() == number
    assert CalibrationCache.from_amax({"x": 1.0}, version).header == "TRT-%d-EntropyCalibration2" % number


def test_decode_real_tensorrt_lines():
    assert hex_to_scale("3c010a14") == pytest.approx(0.0078759, abs=1e-7)
    assert hex_to_scale("3c010a14") * 127 == pytest.approx(1.0, abs=5e-4)  # softmax output, amax 1
    assert hex_to_scale("3c008912") == pytest.approx(0.0078452, abs=1e-7)
    # short hex (NVIDIA's qdq-translator does not zero-pad) and uppercase are accepted
    assert hex_to_scale("1") == struct.unpack(">f", bytes.fromhex("00000001"))[0]
    assert hex_to_scale("3C010A14") == hex_to_scale("3c010a14")
    assert scale_to_hex(hex_to_scale("3c010a14")) == "3c010a14"
    assert scale_to_hex(1.0 / 127) == struct.pack(">f", 1.0 / 127).hex() and len(scale_to_hex(1e-30)) == 8


def test_parse_tensorrt_written_cache():
    cache = CalibrationCache.from_text(SAMPLE_INT8.replace("\n", "\r\n") + "\n\n", source="sampleINT8")
    assert cache.trt_version == (7, 0, 0) and cache.algorithm == "EntropyCalibration2"
    assert list(cache.scales) == ["data", "conv1", "pool1", "conv2", "prob"]
    assert cache.scales["conv2"] == hex_to_scale("3ddc858b")
    assert cache.to_text() == SAMPLE_INT8  # byte-exact round trip of TensorRT's own file


def test_names_with_colons_and_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    amax = OrderedDict(("onnx::Conv_%d" % i, float(a)) for i, a in enumerate(rng.uniform(1e-3, 50, 40)))
    amax["/layer1/Relu_output_0"] = 0.0  # an always-zero tensor gets a valid placeholder scale
    cache = CalibrationCache.from_amax(amax, "8.6.2", "MinMaxCalibration")
    path = cache.write(tmp_path / "m.calib")
    text = path.read_text()
    assert text.splitlines()[0] == "TRT-8602-MinMaxCalibration"
    back = CalibrationCache.read(path)
    assert back.trt_version == (8, 6, 2) and back.algorithm == "MinMaxCalibration"
    assert back.scales == cache.scales  # exact float32 values
    for name, a in amax.items():
        expected = np.float32(a / 127.0) if a else np.float32(1.0 / 127)
        assert back.scales[name] == float(expected)
    assert back.to_text() == text


def test_cache_for_other_version_refused_then_retargeted(tmp_path):
    cache = CalibrationCache.from_amax({"input": 2.5, "conv": 7.0}, "8.6")
    assert cache.header == "TRT-8600-EntropyCalibration2"
    with pytest.raises(CalibrationError) as info:
        cache.check_version("10.3")
    msg = str(info.value)
    assert "TensorRT 8.6.0" in msg and "10.3.0" in msg and "--retarget" in msg and "\n" not in msg
    new = cache.retarget("10.3")
    assert new.header == "TRT-100300-EntropyCalibration2" and new.scales == cache.scales
    new.check_version("10.3.0")  # no error
    assert new.to_text().splitlines()[1:] == cache.to_text().splitlines()[1:]


def test_validate_against_model_names():
    cache = CalibrationCache.from_amax({"input": 1.0, "conv1": 2.0, "gone": 3.0,
                                        "(Unnamed Layer* 4) [Shuffle]_output": 1.0})
    v = cache.validate_against(["input", "conv1", "relu1"])
    assert v.matched == ["input", "conv1"] and v.not_in_model == ["gone"] and v.missing == ["relu1"]
    assert v.internal == ["(Unnamed Layer* 4) [Shuffle]_output"] and not v.ok


@pytest.mark.parametrize("text,fragment", [("", "empty"), ("hello\nx: 3c010a14\n", "header"),
                                           ("TRT-100300-EntropyCalibration2\nx 3c010a14\n", "line 2"),
                                           ("TRT-100300-EntropyCalibration2\nx: zz\n", "hex"),
                                           ("TRT-100300-EntropyCalibration2\nx: bf800000\n", "positive")])
def test_bad_caches_are_clear_errors(text, fragment):
    with pytest.raises(CalibrationError, match=fragment):
        CalibrationCache.from_text(text)


@pytest.mark.parametrize("body", [b"logits: 2db8\n", b"x: 7fc00000\n", b"x: 0\n", b"x: bf800000\n",
                                  b"x: 3c010a14\nx: 3c010a14\n", b"caf\xc3\xa9: 3c010a14\n"])
def test_calibrate_and_the_build_side_read_with_one_set_of_rules(tmp_path, body):
    """`calibrate --check-cache` (CalibrationCache.read) and the build planner refuse alike, word for word."""
    from jetforge.runtime.tensorrt.calib_cache import parse_calibration_cache

    path = tmp_path / "m.calib"
    path.write_bytes(b"TRT-100300-EntropyCalibration2\n" + body)
    with pytest.raises(CalibrationError) as calibrate_side:
        CalibrationCache.read(path)
    with pytest.raises(CalibrationError) as build_side:
        parse_calibration_cache(path.read_bytes(), "calibration cache %s" % path)
    assert calibrate_side.value.one_line() == build_side.value.one_line()


def test_an_amax_too_small_for_a_normal_scale_gets_the_placeholder():
    # amax / 127 below 2**-126 would be a subnormal scale, which every reader refuses
    cache = CalibrationCache.from_amax({"quiet": 1e-37, "zero": 0.0, "ok": 2.0 ** -100})
    assert cache.scales["quiet"] == cache.scales["zero"] == float(np.float32(1.0 / 127))
    assert cache.scales["ok"] == float(np.float32(2.0 ** -100 / 127))
    assert CalibrationCache.from_text(cache.to_text()).scales == cache.scales
