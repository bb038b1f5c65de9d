"""The one calibration-cache reader: what TensorRT writes is read exactly, what no calibration writes is refused.

Reference values are decoded independently here with ``struct`` from the big-endian float32 bit
patterns; the refusal rules (finite, positive, normal float32; ASCII; one value per tensor) are
checked over every float32 exponent, so no rule depends on a hand-picked example.
"""

import math
import struct

import pytest

from jetforge.errors import CalibrationError, InputFileError
from jetforge.runtime.tensorrt.calib_cache import (FLOAT32_MIN_NORMAL, format_calibration_cache,
                                                   parse_calibration_cache, read_calibration_cache_file)
from jetforge.runtime.tensorrt.version import TensorRTVersion

HEADER = "TRT-100300-EntropyCalibration2"


def f32(hex8: str) -> float:
    return struct.unpack(">f", bytes.fromhex(hex8.rjust(8, "0")))[0]


def one_line(value: str) -> str:
    return "%s\nconv: 3c010a14\nlogits: %s\n" % (HEADER, value)


def test_tensorrt_written_caches_are_read_exactly():
    # TensorRT 7's sampleINT8 lines and cuDLA-samples' 8.6 header, CRLF line ends, a name holding ':'
    text = ("TRT-8600-EntropyCalibration2\r\nimages: 3c00f9f4\r\nprob: 3c010a14\r\n"
            "(Unnamed Layer* 3) [Shuffle]_output: 3d8e5a2b\r\nonnx::Conv_7: 3ddc858b\r\n\r\n")
    info = parse_calibration_cache(text.encode("ascii"))
    assert info.header == "TRT-8600-EntropyCalibration2" and info.version == (8, 6, 0)
    assert info.algorithm == "EntropyCalibration2"
    assert list(info.scales) == ["images", "prob", "(Unnamed Layer* 3) [Shuffle]_output", "onnx::Conv_7"]
    assert info.scales["images"] == f32("3c00f9f4") and info.scales["onnx::Conv_7"] == f32("3ddc858b")
    assert info.scales["prob"] * 127 == pytest.approx(1.0, abs=5e-4)  # softmax output: amax 1


def test_short_hex_is_legitimate_when_it_is_a_normal_scale():
    # NVIDIA's tools drop leading zeros: "da24260" is 0x0da24260 (about 1e-30), a normal float32
    info = parse_calibration_cache(one_line("da24260"))
    assert info.scales["logits"] == f32("0da24260") and info.scales["logits"] >= FLOAT32_MIN_NORMAL
    assert parse_calibration_cache(one_line("0x3C010A14")).scales["logits"] == f32("3c010a14")


def test_a_value_cut_short_is_refused_not_read_as_a_tiny_scale():
    # the cache: "logits: 3c010a14" cut to "logits: 2db8" decodes to 1.6e-41, a subnormal
    assert 0 < f32("2db8") < FLOAT32_MIN_NORMAL
    with pytest.raises(CalibrationError) as err:
        parse_calibration_cache(one_line("2db8"), "calibration cache m.calib")
    text = err.value.one_line()
    assert "m.calib line 3" in text and "subnormal" in text and "2db8" not in text


@pytest.mark.parametrize("value,why", [("7fc00000", "NaN"), ("7f800000", "infinite"), ("ff800000", "infinite"),
                                       ("0", "zero"), ("00000000", "zero"), ("80000000", "zero"),
                                       ("bf800000", "negative"), ("00000001", "subnormal"), ("7fffff", "subnormal")])
def test_scales_no_calibration_writes_are_refused(value, why):
    with pytest.raises(CalibrationError, match="line 3: the scale is .*%s" % why):
        parse_calibration_cache(one_line(value))


def test_the_scale_rule_over_every_float32_exponent():
    """Accepted exactly when sign = 0 and 0 < exponent < 255 (positive, normal, finite), for every exponent."""
    for sign in (0, 1):
        for exponent in range(256):
            for mantissa in (0, 1, 0x400000, 0x7FFFFF):
                bits = (sign << 31) | (exponent << 23) | mantissa
                value = "%x" % bits  # unpadded, as NVIDIA's tools write it
                expected = f32("%08x" % bits)
                ok = sign == 0 and 0 < exponent < 255
                if ok:
                    assert parse_calibration_cache(one_line(value)).scales["logits"] == expected
                    assert math.isfinite(expected) and expected >= FLOAT32_MIN_NORMAL
                else:
                    with pytest.raises(CalibrationError):
                        parse_calibration_cache(one_line(value))


@pytest.mark.parametrize("data,fragment", [
    (b"", "is empty"), (b"\n \r\n", "is empty"),
    (b"SECRET-TOKEN first line\nx: 3c010a14\n", "line 1 is not one"),
    (HEADER.encode() + b"\nconv 3c010a14\n", "line 2 is not `tensor: hexscale`"),
    (HEADER.encode() + b"\n: 3c010a14\n", "line 2 is not `tensor: hexscale`"),
    (HEADER.encode() + b"\nconv: SECRET\n", "line 2: the value is not a hex float32 scale"),
    (HEADER.encode() + b"\nconv: 3c010a14aa\n", "line 2: the value is not a hex float32 scale"),
    (HEADER.encode() + b"\nconv: 3c010a14\n\nconv: 3c010a14\n", "line 4 names the tensor of line 2 again"),
    (HEADER.encode() + b"\ncaf\xc3\xa9: 3c010a14\n", "byte 34 is not ASCII"),
    (HEADER.encode() + b"\nco\x0bnv: 3c010a14\n", "line 2 holds a control character"),
    (b"TRT-5-EntropyCalibration2\n", "header number 5 is not a TensorRT version"),
    (b"TRT-12345-EntropyCalibration2\n", "header number 12345"),
    (b"TRT-" + b"9" * 5000 + b"-EntropyCalibration2\n", "line 1 is not one"),
])
def test_damaged_caches_are_one_clear_error_that_never_echoes_the_file(data, fragment):
    with pytest.raises(CalibrationError) as err:
        parse_calibration_cache(data, "calibration cache c.calib")
    text = err.value.one_line()
    assert fragment in text and "c.calib" in text and "(fix: " in text
    assert "SECRET" not in text and "caf" not in text and "\n" not in text


def test_header_numbers_both_encodings():
    for version, number in (((8, 5, 2), 8502), ((8, 6, 2), 8602), ((7, 0, 0), 7000), ((10, 3, 0), 100300),
                            ((10, 7, 1), 100701), ((10, 13, 3), 101303)):
        assert TensorRTVersion(*version).cache_header_number() == number
        assert TensorRTVersion.from_header_number(number) == version
    info = parse_calibration_cache("TRT-8502-MinMaxCalibration\n")  # a header alone: no tensors yet
    assert info.version == (8, 5, 2) and info.algorithm == "MinMaxCalibration" and info.scales == {}


def test_writer_output_reads_back_and_the_writer_refuses_what_the_reader_would():
    scales = {"input": f32("3c010204"), "onnx::Conv_3": f32("3d8e5a2b"), "tiny": f32("00800000")}
    text = format_calibration_cache(100300, "EntropyCalibration2", scales)
    assert text.splitlines() == [HEADER, "input: 3c010204", "onnx::Conv_3: 3d8e5a2b", "tiny: 00800000"]
    assert dict(parse_calibration_cache(text).scales) == scales
    for bad in ({"x": float("nan")}, {"x": 0.0}, {"x": -1.0}, {"x": 1e-41}, {" x": 1.0}, {"a\nb": 1.0}):
        with pytest.raises(CalibrationError):
            format_calibration_cache(100300, "EntropyCalibration2", bad)
    with pytest.raises(CalibrationError):
        format_calibration_cache(12345, "EntropyCalibration2", {})


def test_reading_a_folder_or_a_missing_file(tmp_path):
    with pytest.raises(InputFileError, match="is a folder, not a file"):
        read_calibration_cache_file(tmp_path)
    with pytest.raises(InputFileError, match="does not exist"):
        read_calibration_cache_file(tmp_path / "none.calib")
    (tmp_path / "ok.calib").write_bytes(one_line("3c010a14").encode())
    assert read_calibration_cache_file(tmp_path / "ok.calib").scales["logits"] == f32("3c010a14")
