"""Stream priorities (``jetforge.runtime.cuda.Stream(priority=...)``): on the CPU behind the host-memory CUDA
stand-in (tests/standins/cuda_runtime_standin.py: CUDA's calls and its clamping rule, no GPU), and on a real GPU
(``-m gpu``) against the device's own priority range."""

import pytest

from jetforge.errors import ConfigError


@pytest.fixture
def standin_runtime():
    from jetforge.runtime.cuda import bindings
    from tests.standins import cuda_runtime_standin

    api = cuda_runtime_standin.make_module()
    previous = bindings.use_runtime_api(api)
    yield cuda_runtime_standin
    bindings.use_runtime_api(previous)


def test_a_high_priority_stream_gets_the_greatest_priority_and_a_default_one_does_not(standin_runtime):
    from jetforge.runtime.cuda.stream import Stream

    high, plain = Stream(priority="high"), Stream()
    try:
        assert high.priority == standin_runtime.GREATEST_PRIORITY  # -5: lower numbers are greater priorities
        assert plain.priority == standin_runtime.LEAST_PRIORITY == 0
        assert int(high) != int(plain)
    finally:
        high.close()
        plain.close()
    with pytest.raises(ValueError, match="destroyed"):
        high.priority  # noqa: B018 - a closed stream's handle is gone


def test_an_unknown_priority_is_refused_by_name(standin_runtime):
    from jetforge.runtime.cuda.stream import Stream

    with pytest.raises(ConfigError, match="'urgent' is not one of default, high"):
        Stream(priority="urgent")


@pytest.mark.gpu
def test_a_high_priority_stream_on_a_real_gpu_has_the_devices_greatest_priority():
    from jetforge.errors import JetforgeError
    from jetforge.runtime.cuda import device_count
    from jetforge.runtime.cuda.bindings import check, runtime_api
    from jetforge.runtime.cuda.stream import Stream

    try:
        if device_count() < 1:
            pytest.skip("no CUDA device")
    except JetforgeError as err:
        pytest.skip("no cuda-python: %s" % err.message)
    least, greatest = check(runtime_api().cudaDeviceGetStreamPriorityRange(), "range")
    high, plain = Stream(priority="high"), Stream()
    try:
        assert high.priority == greatest and plain.priority == least and greatest < least
    finally:
        high.close()
        plain.close()
