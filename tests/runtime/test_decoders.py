"""Which video decoders exist (doctor, --decode): the choice logic and the GStreamer element query."""

import os
import stat

import pytest

from jetforge.errors import ConfigError
from jetforge.runtime.decoders import DECODERS, choose_decoder, gst_element_exists, probe_decoders


def test_probe_lists_every_decoder_in_order_and_finds_opencv():
    found = probe_decoders()
    assert [d.name for d in found] == list(DECODERS)
    assert found[-1].found  # OpenCV is a core dependency


@pytest.mark.parametrize("wanted, have, want", [
    ("auto", {"nvdec": True, "opencv": True}, "nvdec"),
    ("auto", {"jetson-utils": True, "opencv": True}, "jetson-utils"),
    ("auto", {"opencv": True}, "opencv"),
    ("cpu", {"nvdec": True, "opencv": True}, "opencv"),
    ("gpu", {"nvdec": False, "jetson-utils": True}, "jetson-utils"),
])
def test_choose_decoder(wanted, have, want):
    assert choose_decoder(wanted, have) == want


def test_gpu_decode_without_a_gpu_decoder_is_one_clear_error():
    with pytest.raises(ConfigError, match="no GPU decoder") as info:
        choose_decoder("gpu", {"opencv": True})
    assert "pynvvideocodec" in info.value.hint
    with pytest.raises(ConfigError, match="gpu, cpu or auto"):
        choose_decoder("fast", {})


def test_gst_element_query_reads_gst_inspect_exit_status(tmp_path, monkeypatch):
    # a stand-in gst-inspect-1.0 that knows one element: the real tool answers --exists with its exit status
    tool = tmp_path / "gst-inspect-1.0"
    tool.write_text("#!/bin/sh\n[ \"$3\" = nvv4l2decoder ]\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    assert gst_element_exists("nvv4l2decoder") is True
    assert gst_element_exists("nvjpegdec") is False
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert gst_element_exists("nvv4l2decoder") is None
