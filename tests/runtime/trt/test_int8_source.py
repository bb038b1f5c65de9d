"""Where a build takes INT8 from (cache or Q/DQ), by TensorRT version and device: the rules of int8_source.py."""

from jetforge.runtime.tensorrt.int8_source import choose_int8_source, source_order
from jetforge.runtime.tensorrt.version import TensorRTVersion


def test_int8_source_follows_the_tensorrt_rules():
    assert choose_int8_source("10.3.0", "dla", "int8", ["10.3.0"], True) == ("cache", "")
    assert choose_int8_source("10.3.0", "gpu", "int8", ["10.3.0"], True) == ("qdq", "")
    assert choose_int8_source("10.3.0", "gpu", "int8", ["10.3.0"], False) == ("cache", "")
    assert choose_int8_source("8.6.2", "gpu", "int8", ["8.6.2"], True) == ("cache", "")
    assert choose_int8_source("8.6.2", "gpu", "int8", [], True) == ("qdq", "")
    assert choose_int8_source("10.13.3", "gpu", "int8", ["10.13.3"], True) == ("qdq", "")
    assert choose_int8_source("11.0", "gpu", "int8", ["11.0.0"], False)[0] is None
    source, why = choose_int8_source("8.5.2", "dla", "int8", ["10.3.0"], True)
    assert source is None and "calibration cache for TensorRT 8.5.2" in why
    assert choose_int8_source("10.3", "gpu", "fp16", [], False) == (None, "")


def test_cache_versions_match_however_they_are_written():
    assert choose_int8_source("10.3", "dla", "int8", ["10.3.0.30"], False) == ("cache", "")
    assert choose_int8_source("10.3.0", "dla", "int8", ["10.4.0"], False)[0] is None


def test_best_without_scales_builds_fp16_and_says_so():
    assert choose_int8_source("10.3.0", "gpu", "best", [], False) == (None, "no INT8 scales for TensorRT 10.3.0: "
                                                                             "builds FP16")
    source, why = choose_int8_source("11.0", "gpu", "int8", ["11.0.0"], False)
    assert why == "INT8 on GPU with TensorRT 11.0.0 needs a Q/DQ model"


def test_source_order_per_version_and_device():
    assert source_order(TensorRTVersion(10, 3, 0), "dla") == ("cache",)
    assert source_order(TensorRTVersion(8, 5, 2), "dla") == ("cache",)
    assert source_order(TensorRTVersion(11, 0, 0), "gpu") == ("qdq",)
    assert source_order(TensorRTVersion(10, 3, 0), "gpu") == ("qdq", "cache")
    assert source_order(TensorRTVersion(8, 6, 2), "gpu") == ("cache", "qdq")
