"""NVRTC: CUDA C source -> cubin for one GPU architecture, cached in memory and on disk.

Why NVRTC: JetPack has no torch (and no CuPy wheel to rely on), but it always has the CUDA toolkit's
``libnvrtc``, reachable from cuda-python (``cuda.bindings.nvrtc``, ``cuda.nvrtc`` before 12.6).
NVRTC needs no GPU: CI compiles every kernel for Xavier (sm_72), Orin (sm_87) and the H200 (sm_90)
on a CPU-only machine, so a typo in a kernel fails CI, not a board.  An NVRTC release compiles only
the architectures it lists (:func:`supported_archs`; CUDA 13 dropped sm_72, which JetPack 5's
NVRTC 11.4 has).

Compiled cubins are kept per (source hash, options, arch, NVRTC version) in memory and, unless
``disk_cache=False``, under ``<jetforge cache>/kernels/`` (written atomically), so a restarted app
does not compile again (about 0.1-0.5 s per kernel).
"""

import hashlib
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from jetforge.errors import BackendError, DependencyError
from jetforge.runtime.cuda.bindings import load_binding

_NVRTC: Optional[Any] = None
_MEMORY: Dict[str, bytes] = {}
CUBIN_MAGIC = b"\x7fELF"


def nvrtc_api() -> Any:
    """cuda-python's NVRTC module (``cuda.bindings.nvrtc``, else ``cuda.nvrtc``), imported once."""
    global _NVRTC
    if _NVRTC is None:
        api = load_binding("nvrtc", "nvrtc", "compiling the GPU kernels")
        try:
            api.nvrtcVersion()  # loads libnvrtc: cuda-python raises (not returns) when it cannot be found
        except Exception as err:
            raise DependencyError("libnvrtc (CUDA's runtime compiler) cannot be loaded: %s" % str(err).splitlines()[0],
                                  hint="install the NVRTC of your CUDA (pip: nvidia-cuda-nvrtc; Jetson: JetPack's "
                                       "cuda-nvrtc package), or use the CPU path (--decode cpu)") from None
        _NVRTC = api
    return _NVRTC


def _check(result: Any, call: str, log: str = "") -> Any:
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if int(err) != 0:
        name = getattr(err, "name", "nvrtcResult %d" % int(err))
        raise BackendError("%s failed: %s%s" % (call, name, ("\n" + log) if log else ""),
                           hint="the NVRTC library could not be loaded or rejected the kernel; check that "
                                "libnvrtc of your CUDA (nvidia-cuda-nvrtc, or JetPack's) is installed")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def nvrtc_version() -> Tuple[int, int]:
    """(major, minor) of the loaded libnvrtc."""
    major, minor = _check(nvrtc_api().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def supported_archs() -> Tuple[int, ...]:
    """The SM versions (e.g. 87 for sm_87) this NVRTC can compile cubins for."""
    archs = _check(nvrtc_api().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def cache_key(source: str, arch: int, options: Sequence[str]) -> str:
    text = "\0".join([source, "sm_%d" % arch, "nvrtc %d.%d" % nvrtc_version()] + list(options))
    return hashlib.sha256(text.encode()).hexdigest()


def _disk_path(key: str) -> Path:
    from jetforge.assets.store import cache_root

    return cache_root() / "kernels" / ("%s.cubin" % key)


def compile_cubin(source: str, arch: int, options: Sequence[str] = (), name: str = "jetforge_kernel.cu",
                  disk_cache: bool = True) -> bytes:
    """The cubin (ELF) of ``source`` for ``sm_<arch>``; a compile error is a BackendError with NVRTC's log."""
    if arch not in supported_archs():
        raise BackendError("NVRTC %d.%d cannot compile for sm_%d (it supports %s)"
                           % (nvrtc_version() + (arch, ", ".join("sm_%d" % a for a in supported_archs()))),
                           hint="use the NVRTC of a CUDA release that supports this GPU (JetPack's own on a board)")
    key = cache_key(source, arch, options)
    cubin = _MEMORY.get(key)
    if cubin is not None:
        return cubin
    path = _disk_path(key) if disk_cache else None
    if path is not None and path.is_file():
        data = path.read_bytes()
        if data.startswith(CUBIN_MAGIC):
            _MEMORY[key] = data
            return data
    cubin = _compile(source, arch, options, name)
    _MEMORY[key] = cubin
    if path is not None:
        _store(path, cubin)
    return cubin


def _compile(source: str, arch: int, options: Sequence[str], name: str) -> bytes:
    api = nvrtc_api()
    prog = _check(api.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [b"--gpu-architecture=sm_%d" % arch, b"--std=c++14"] + [o.encode() for o in options]
        result = api.nvrtcCompileProgram(prog, len(opts), opts)
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            _check(result, "nvrtcCompileProgram (sm_%d)" % arch, _log(api, prog))
        size = _check(api.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        buf = b" " * int(size)
        _check(api.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        return bytes(buf)
    finally:
        api.nvrtcDestroyProgram(prog)


def _log(api: Any, prog: Any) -> str:
    try:
        size = _check(api.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * int(size)
        _check(api.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        return buf.decode(errors="replace").rstrip("\0 \n")
    except BackendError:  # the log is decoration; the compile error is raised by the caller
        return ""


def _store(path: Path, cubin: bytes) -> None:
    """Write the cubin to the disk cache; a read-only or full cache only costs a compile next time."""
    from jetforge.fileio import write_bytes_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, cubin)
    except OSError:
        pass


def clear_memory_cache() -> None:
    _MEMORY.clear()


__all__ = ["CUBIN_MAGIC", "cache_key", "clear_memory_cache", "compile_cubin", "nvrtc_api", "nvrtc_version",
           "supported_archs"]
