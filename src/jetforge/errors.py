"""One error hierarchy for the whole toolkit.

Every error a user can cause (a wrong name, a missing file, an impossible build
option) is a :class:`JetforgeError` subclass carrying a message that names the
problem and, where one exists, a ``hint`` that names the fix.  The CLI prints
these as a single line and exits 1; anything else is a bug and exits 2.
"""

from typing import Iterable, Optional, Sequence
import difflib


class JetforgeError(Exception):
    """Base of every error jetforge raises on purpose."""

    def __init__(self, message: str, *, hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and the fix on one line, as the CLI prints it."""
        text = " ".join(self.message.split())
        if self.hint:
            text += " (fix: " + " ".join(self.hint.split()) + ")"
        return text

    def __str__(self) -> str:
        return self.one_line()

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Survive pickling (multiprocessing workers) whatever the subclass's __init__ signature is.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type, args: tuple, state: dict) -> "JetforgeError":
    err = Exception.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class ConfigError(JetforgeError):
    """A configuration file, ``--set`` override or option value is invalid."""


class UnknownNameError(ConfigError):
    """A name (target, asset, key, backend) is not one of the known ones."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, hint: Optional[str] = None,
                 prefix: str = "") -> None:
        # ``prefix`` ("input.") is shown before every name but not compared: a shared prefix would
        # make every known name look close.
        bare = sorted(set(known))
        close = [prefix + c for c in difflib.get_close_matches(name, bare, n=3, cutoff=0.5)]
        name = prefix + name
        known_list = [prefix + k for k in bare]
        message = "unknown %s %r" % (kind, name)
        if close:
            message += "; did you mean %s?" % " or ".join(repr(c) for c in close)
        if hint is None:
            hint = "choose one of: " + ", ".join(known_list) if 0 < len(known_list) <= 30 else None
        super().__init__(message, hint=hint)
        self.kind = kind
        self.name = name
        self.known = known_list
        self.suggestions: Sequence[str] = close


class InputFileError(JetforgeError):
    """A file the user named is missing, unreadable or not what it claims to be."""


class TargetError(JetforgeError):
    """A target profile is invalid, or an operation is impossible on the target."""


class AssetError(JetforgeError):
    """A bundled asset (weights, sample media) could not be fetched or verified."""


class DependencyError(JetforgeError):
    """An optional package needed for this operation is not installed."""


class ModelError(JetforgeError):
    """A model file (ONNX, checkpoint, engine) is corrupt or does not fit the operation."""


class BackendError(JetforgeError):
    """A runtime backend (ONNX Runtime, TensorRT, PyTorch) failed to load or run a model."""


class EngineBuildError(JetforgeError):
    """A TensorRT engine build plan is impossible, or TensorRT refused to build it."""


class CalibrationError(JetforgeError):
    """INT8 calibration data, caches or Q/DQ models are invalid."""


class CompressError(JetforgeError):
    """Pruning, distillation or QAT cannot proceed on this model."""


class StreamError(JetforgeError):
    """A video source or sink failed (distinct from a normal end of stream)."""


# OS errors a user causes (a full disk, a name too long for the file system, a read-only or foreign folder): each
# is one line naming the path and the fix, never an "internal error" with a traceback.
_USER_OS_ERRORS = {
    "ENOSPC": ("no space left on the device holding %s", "free space there, or write to another disk"),
    "EDQUOT": ("disk quota exceeded writing %s", "free space in your quota, or write elsewhere"),
    "ENAMETOOLONG": ("a file name in %s is too long for the file system (at most 255 bytes per name)",
                     "use a shorter name"),
    "EROFS": ("%s is on a read-only file system", "write to a writable folder"),
    "EACCES": ("permission denied for %s", "check its permissions, or choose a path you may write"),
    "EPERM": ("operation not permitted on %s", "check its permissions, or choose another path"),
    "EMFILE": ("too many open files while opening %s", "raise the limit (ulimit -n) or open fewer files"),
    "ENOTDIR": ("a part of %s is a file, not a folder", "check the path"),
    "EISDIR": ("%s is a folder, not a file", "name a file"),
    "ELOOP": ("%s has too many levels of symbolic links", "check the links in the path"),
    "EXDEV": ("%s cannot be moved across file systems", "write the output on the same disk as its folder"),
}


def user_os_error(err: BaseException) -> Optional[JetforgeError]:
    """The one-line :class:`InputFileError` for an OS error a user causes; None for any other exception."""
    import errno as errno_names

    if not isinstance(err, OSError) or err.errno is None:
        return None
    name = errno_names.errorcode.get(err.errno, "")
    if name not in _USER_OS_ERRORS:
        return None
    message, hint = _USER_OS_ERRORS[name]
    where = err.filename if err.filename is not None else "a file this command writes"
    if isinstance(where, bytes):
        where = where.decode("utf-8", "backslashreplace")
    where = str(where)
    if len(where) > 160:  # a 4000-byte path is not worth printing whole
        where = where[:70] + "..." + where[-70:]
    return InputFileError(message % where.encode("utf-8", "backslashreplace").decode("utf-8"), hint=hint)
