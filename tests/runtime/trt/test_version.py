"""The one TensorRT version type: parsing, releases, ordering and the calibration-cache header number.

The header numbers are TensorRT's own (``getInferLibVersion()``): caches NVIDIA's tools wrote carry
TRT-7000 (TensorRT 7.0, sampleINT8), TRT-8502 (8.5.2, JetPack 5.1), TRT-100300 (10.3.0, JetPack 6.1).
"""

import types

import pytest

from jetforge.errors import CalibrationError, EngineBuildError
from jetforge.runtime.tensorrt.version import TensorRTVersion, major_of, version_text


@pytest.mark.parametrize("text,expected", [
    ("10.3", (10, 3, 0)), ("10.3.0", (10, 3, 0)), ("8.6.2.3", (8, 6, 2)), ("8.5.2.2", (8, 5, 2)),
    ("TRT-10.3", (10, 3, 0)), ("trt8.6.2", (8, 6, 2)), (" 10.13.3.9.post1 ", (10, 13, 3)), ("11", (11, 0, 0)),
    ((8, 6, 2), (8, 6, 2)), ([10, 3], (10, 3, 0)),
])
def test_parse_accepts_every_form_jetforge_meets(text, expected):
    version = TensorRTVersion.parse(text)
    assert version == expected and tuple(version) == expected
    assert str(version) == "%d.%d.%d" % expected


@pytest.mark.parametrize("text", ["", "abc", "10.3 (JetPack 6)", "ten.three", "10..3", "-1.0", (), (-1, 2)])
def test_parse_refuses_what_is_no_version_with_the_callers_error_and_fix(text):
    with pytest.raises(EngineBuildError) as err:
        TensorRTVersion.parse(text)
    assert "MAJOR.MINOR[.PATCH]" in err.value.message and err.value.hint == "write e.g. 10.3.0"
    with pytest.raises(CalibrationError) as err:
        TensorRTVersion.parse(text, error=CalibrationError, hint="give --trt 10.3")
    assert err.value.hint == "give --trt 10.3"


def test_it_compares_and_formats_like_the_tuples_it_replaces():
    assert TensorRTVersion.parse("8.6.2") < (10, 0, 0) < TensorRTVersion.parse("10.3") <= (10, 7, 99)
    assert {(8, 5, 2): "JetPack 5.1.x"}[TensorRTVersion(8, 5, 2)] == "JetPack 5.1.x"  # dict keys written as tuples
    assert "TensorRT %s" % (TensorRTVersion(10, 3, 0),) == "TensorRT 10.3.0"
    assert max(["8.6.2", "10.3.0", "10.13.3"], key=TensorRTVersion.parse) == "10.13.3"   # not text order
    assert version_text("10.3") == "10.3.0"


@pytest.mark.parametrize("text,expected", [
    ("10.3.0.30", (10, 3, 0)), ("1.0.0.21", (1, 0, 0)), ("8.6.2", (8, 6, 2)), ("abc", (0, 0, 0)),
    ("10.0rc1", (10, 0, 0)), ("10", (10, 0, 0)), ("", (0, 0, 0))])
def test_lenient_reads_any_text_without_raising(text, expected):
    assert TensorRTVersion.lenient(text) == expected
    assert major_of(text) == expected[0]


def test_of_module_reads_the_library_version():
    assert TensorRTVersion.of_module(types.SimpleNamespace(__version__="10.3.0.30")) == (10, 3, 0)
    assert TensorRTVersion.of_module(types.SimpleNamespace()) == (0, 0, 0)


def test_same_release_is_major_minor():
    v = TensorRTVersion.parse("10.3.0")
    assert v.same_release("10.3.0.30") and v.same_release((10, 3, 1)) and v.same_release("10.3")
    assert not v.same_release("10.4.0") and not v.same_release("8.6.2") and not v.same_release("garbage")
    assert v.release == (10, 3)


@pytest.mark.parametrize("version,number", [
    ((8, 5, 2), 8502), ((8, 6, 2), 8602), ((8, 6, 1), 8601), ((7, 0, 0), 7000), ((10, 3, 0), 100300),
    ((10, 7, 1), 100701), ((10, 13, 3), 101303), ((9, 3, 0), 9300)])
def test_cache_header_number_both_encodings(version, number):
    assert TensorRTVersion(*version).cache_header_number() == number
    assert TensorRTVersion.from_header_number(number) == version


def test_which_versions_can_stamp_a_cache():
    assert TensorRTVersion(7, 0, 0).writes_calibration_caches and TensorRTVersion(10, 3, 0).writes_calibration_caches
    assert not TensorRTVersion(6, 5, 0).writes_calibration_caches
    assert not TensorRTVersion(10, 100, 0).writes_calibration_caches   # 100 does not fit the header's two digits
