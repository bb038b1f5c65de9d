"""NVRTC compiles every GPU kernel for the boards' architectures on a machine without a GPU.

cuda-python (cuda-bindings) and libnvrtc (nvidia-cuda-nvrtc) are in the development venv; where
they are missing the tests skip and say so.  An NVRTC release compiles only the architectures it
lists: CUDA 13 dropped Volta (sm_72, Jetson AGX Xavier), which JetPack 5's own NVRTC 11.4 compiles.
"""

import re
import struct

import pytest

from jetforge.errors import BackendError, DependencyError
from jetforge.optional import is_available

if not is_available("cuda.bindings.nvrtc"):
    pytest.skip("cuda-python's NVRTC bindings (cuda.bindings.nvrtc) are not installed", allow_module_level=True)

from jetforge.runtime.cuda.kernels import compiler  # noqa: E402
from jetforge.runtime.cuda.kernels.copy import CopyArgs  # noqa: E402
from jetforge.runtime.cuda.kernels.preprocess import PreArgs  # noqa: E402
from jetforge.runtime.cuda.kernels.sources import (COPY_KERNEL, PREPROCESS_KERNEL, SSD_KERNEL, copy_source,  # noqa: E402
                                                   preprocess_source, ssd_source)
from jetforge.runtime.cuda.kernels.ssd import SsdArgs  # noqa: E402

try:
    SUPPORTED = compiler.supported_archs()
except (BackendError, DependencyError) as err:  # the bindings are there but libnvrtc is not
    pytest.skip("libnvrtc cannot be loaded: %s" % err, allow_module_level=True)

BOARDS = {72: "Jetson AGX Xavier (JetPack 5)", 87: "Jetson Orin (JetPack 6)", 90: "H200"}
ELF_MACHINE_CUDA = 190
KERNELS = {  # name: (source, options, kernel symbol)
    "nv12->rgb nchw": (preprocess_source("nv12", "rgb", False), (), PREPROCESS_KERNEL),
    "nv12->bgr nhwc": (preprocess_source("nv12", "bgr", True), (), PREPROCESS_KERNEL),
    "nv12->gray": (preprocess_source("nv12", "gray", False), (), PREPROCESS_KERNEL),
    "rgb->rgb": (preprocess_source("rgb", "rgb", False), (), PREPROCESS_KERNEL),
    "bgr->rgb": (preprocess_source("bgr", "rgb", False), (), PREPROCESS_KERNEL),
    "ssd person": (ssd_source(2), ("--fmad=false",), SSD_KERNEL),
    "ssd 91 classes": (ssd_source(91), ("--fmad=false",), SSD_KERNEL),
    "nv12 copy": (copy_source(), (), COPY_KERNEL),
}


def cubin_arch(cubin: bytes) -> int:
    """The SM version an NVIDIA cubin was built for, read from its ELF header (e_flags; the field moved in ABI 8)."""
    assert cubin[:4] == compiler.CUBIN_MAGIC and struct.unpack_from("<H", cubin, 18)[0] == ELF_MACHINE_CUDA
    flags = struct.unpack_from("<I", cubin, 48)[0]
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


@pytest.mark.parametrize("arch", sorted(BOARDS))
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_kernel_compiles_for_every_board(arch, kernel):
    if arch not in SUPPORTED:
        pytest.skip("NVRTC %d.%d does not compile sm_%d (%s); that board's JetPack NVRTC does"
                    % (compiler.nvrtc_version() + (arch, BOARDS[arch])))
    source, options, symbol = KERNELS[kernel]
    cubin = compiler.compile_cubin(source, arch, options, disk_cache=False)
    assert cubin_arch(cubin) == arch
    assert symbol.encode() in cubin  # the extern "C" name the launcher looks up


def _ptx_param_bytes(source: str, kernel: str, options=()) -> int:
    api = compiler.nvrtc_api()
    err, prog = api.nvrtcCreateProgram(source.encode(), b"layout.cu", 0, [], [])
    try:
        opts = [b"--gpu-architecture=compute_%d" % max(a for a in SUPPORTED if a <= 90)] + [o.encode() for o in options]
        assert int(api.nvrtcCompileProgram(prog, len(opts), opts)[0]) == 0
        size = int(api.nvrtcGetPTXSize(prog)[1])
        buf = b" " * size
        api.nvrtcGetPTX(prog, buf)
    finally:
        api.nvrtcDestroyProgram(prog)
    match = re.search(r"\.param \.align \d+ \.b8 %s_param_0\[(\d+)\]" % kernel, buf.decode())
    assert match, "no struct parameter in the PTX of %s" % kernel
    return int(match.group(1))


def test_ctypes_argument_structs_have_the_kernels_layout():
    """The host structs are as large as the kernels' parameter (a field out of step would change it or crash)."""
    import ctypes

    assert _ptx_param_bytes(preprocess_source("nv12", "rgb", False), PREPROCESS_KERNEL) == ctypes.sizeof(PreArgs)
    assert _ptx_param_bytes(ssd_source(2), SSD_KERNEL, ("--fmad=false",)) == ctypes.sizeof(SsdArgs)
    assert _ptx_param_bytes(copy_source(), COPY_KERNEL) == ctypes.sizeof(CopyArgs)


def test_the_disk_cache_serves_a_compiled_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    arch = 87 if 87 in SUPPORTED else SUPPORTED[-1]
    source = preprocess_source("rgb", "bgr", False)
    compiler.clear_memory_cache()
    first = compiler.compile_cubin(source, arch)
    stored = list((tmp_path / "kernels").glob("*.cubin"))
    assert len(stored) == 1 and stored[0].read_bytes() == first
    compiler.clear_memory_cache()

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again instead of reading the disk cache")

    monkeypatch.setattr(compiler, "_compile", no_compile)
    assert compiler.compile_cubin(source, arch) == first
    # another source (or arch or option) is another key
    assert compiler.cache_key(source, arch, ()) != compiler.cache_key(source + " ", arch, ())
    assert compiler.cache_key(source, arch, ()) != compiler.cache_key(source, arch, ("--fmad=false",))


def test_a_compile_error_carries_nvrtcs_log():
    arch = SUPPORTED[-1]
    with pytest.raises(BackendError, match="nvrtcCompileProgram.*undefined_name"):
        compiler.compile_cubin('extern "C" __global__ void k() { undefined_name = 1; }', arch, disk_cache=False)


def test_an_architecture_nvrtc_lacks_is_one_clear_error():
    with pytest.raises(BackendError, match="cannot compile for sm_1"):
        compiler.compile_cubin("", 1, disk_cache=False)
