"""The real GLib key-file parser through ctypes: what DeepStream itself reads configuration files with.

jetforge checks its DeepStream files with its own strict reader (jetforge.deploy.keyfile); these tests
read the same bytes with ``libglib-2.0.so.0`` (``g_key_file_load_from_data``, ``g_key_file_get_*``), so a
difference between the two readers, or a value that GLib reads back differently from what was meant,
fails a test instead of a board.  :func:`glib` skips the test (with the reason) where GLib is absent.
"""

import ctypes
import ctypes.util
from typing import List, Optional

import pytest

_LIB = None


class _GError(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_uint32), ("code", ctypes.c_int), ("message", ctypes.c_char_p)]


def glib() -> ctypes.CDLL:
    """libglib-2.0 with the key-file functions' signatures set, or a skip naming what is missing."""
    global _LIB
    if _LIB is not None:
        return _LIB
    name = ctypes.util.find_library("glib-2.0") or "libglib-2.0.so.0"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        pytest.skip("libglib-2.0.so.0 is not installed: the key files are not read with the real GLib parser here "
                    "(apt-get install libglib2.0-0)")
    vp, cp, err = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(_GError))
    size = ctypes.POINTER(ctypes.c_size_t)
    for fn, args, res in (
            ("g_key_file_new", [], vp), ("g_key_file_free", [vp], None),
            ("g_key_file_load_from_data", [vp, cp, ctypes.c_size_t, ctypes.c_int, err], ctypes.c_int),
            ("g_key_file_get_groups", [vp, size], vp), ("g_key_file_get_keys", [vp, cp, size, err], vp),
            ("g_key_file_get_value", [vp, cp, cp, err], vp), ("g_key_file_get_string", [vp, cp, cp, err], vp),
            ("g_key_file_get_string_list", [vp, cp, cp, size, err], vp),
            ("g_free", [vp], None), ("g_strfreev", [vp], None), ("g_error_free", [ctypes.POINTER(_GError)], None)):
        getattr(lib, fn).argtypes = args
        getattr(lib, fn).restype = res
    _LIB = lib
    return lib


class GLibError(Exception):
    """GLib refused the file or the value (its GError message)."""


class GLibKeyFile:
    """A key file loaded by ``g_key_file_load_from_data``; the getters return str (UTF-8) as GLib gives them."""

    def __init__(self, data: bytes) -> None:
        self._lib = glib()
        self._kf = self._lib.g_key_file_new()
        self._call("g_key_file_load_from_data", self._kf, data, len(data), 0)

    def close(self) -> None:
        if self._kf:
            self._lib.g_key_file_free(self._kf)
            self._kf = None

    def __enter__(self) -> "GLibKeyFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: str, *args: object) -> object:
        error = ctypes.POINTER(_GError)()
        result = getattr(self._lib, fn)(*args, ctypes.byref(error))
        if error:
            message = error.contents.message.decode("utf-8", "replace")
            self._lib.g_error_free(error)
            raise GLibError(message)
        return result

    def _strv(self, pointer: Optional[int], length: int) -> List[str]:
        if not pointer:
            return []
        array = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_char_p))
        out = [array[i].decode("utf-8") for i in range(length)]
        self._lib.g_strfreev(pointer)
        return out

    def _str(self, pointer: Optional[int]) -> str:
        text = ctypes.string_at(pointer).decode("utf-8")
        self._lib.g_free(pointer)
        return text

    def groups(self) -> List[str]:
        n = ctypes.c_size_t()
        return self._strv(self._lib.g_key_file_get_groups(self._kf, ctypes.byref(n)), n.value)

    def keys(self, group: str) -> List[str]:
        n = ctypes.c_size_t()
        return self._strv(self._call("g_key_file_get_keys", self._kf, group.encode(), ctypes.byref(n)), n.value)

    def value(self, group: str, key: str) -> str:
        return self._str(self._call("g_key_file_get_value", self._kf, group.encode(), key.encode()))

    def string(self, group: str, key: str) -> str:
        return self._str(self._call("g_key_file_get_string", self._kf, group.encode(), key.encode()))

    def string_list(self, group: str, key: str) -> List[str]:
        n = ctypes.c_size_t()
        pointer = self._call("g_key_file_get_string_list", self._kf, group.encode(), key.encode(), ctypes.byref(n))
        return self._strv(pointer, n.value)
