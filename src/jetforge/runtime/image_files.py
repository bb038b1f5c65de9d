"""Image files from others: their size is read from the header and judged before a pixel is decoded.

A PNG of a few kilobytes can declare 60000x60000 pixels: OpenCV then raises an assertion from inside ``imread``
(``calibrate --data`` and ``bundle create --samples`` ended in an internal error), and one declaring 30000x30000
decodes into 2.7 GB (5.3 GB resident in ``app``), after which the video writer fails on it (no video, 0 frames
counted, exit 0).  :func:`read_image` reads the width and height from the header (PNG IHDR, JPEG SOF, BMP, GIF,
WebP, TIFF, PNM), refuses an image above :data:`MAX_IMAGE_PIXELS` with one :class:`ImageTooLarge` line naming the
file and its size, and only then lets OpenCV decode it.  An unknown format or a header it cannot read is left to
OpenCV, whose own limit (2^30 pixels) still applies, as a ``None`` result rather than an exception.

Every reader of image files (the app's folder source, calibration images, ``export-config --check-images``) goes
through here.  numpy and OpenCV only; Python 3.8.
"""

import struct
from pathlib import Path
from typing import Any, BinaryIO, Optional, Tuple

from jetforge.errors import InputFileError
from jetforge.fileio import PathLike, opencv_path

#: 8192 x 8192: above every camera frame (8K UHD is 7680 x 4320) and photo (a 100-megapixel sensor is 11648 x 8736
#: in its largest mode -- refused: such a photo is resized first) a model sees; 192 MiB decoded as BGR.
MAX_IMAGE_PIXELS = 8192 * 8192
_HEAD = 64 * 1024


class ImageTooLarge(InputFileError):
    """An image whose header declares more pixels than :data:`MAX_IMAGE_PIXELS` (refused before decoding)."""


def image_size(path: PathLike) -> Optional[Tuple[int, int]]:
    """(width, height) as the file's header declares them; None for a format or header this reader does not know."""
    try:
        with open(str(path), "rb") as f:
            head = f.read(32)
            return _size(head, f)
    except (OSError, struct.error, ValueError):
        return None


def _size(head: bytes, f: BinaryIO) -> Optional[Tuple[int, int]]:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        return struct.unpack(">II", head[16:24])
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return struct.unpack("<HH", head[6:10])
    if head.startswith(b"BM") and len(head) >= 26:
        header_size = struct.unpack("<I", head[14:18])[0]
        if header_size == 12:  # OS/2 BITMAPCOREHEADER
            return struct.unpack("<HH", head[18:22])
        width, height = struct.unpack("<ii", head[18:26])
        return abs(width), abs(height)  # a negative height is a top-down bitmap
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return _webp(head + f.read(16))
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        f.seek(0)
        return _tiff(f.read(_HEAD))
    if head[:2] in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"):
        f.seek(0)
        return _pnm(f.read(1024))
    if head.startswith(b"\xff\xd8"):
        return _jpeg(f)
    return None


def _jpeg(f: BinaryIO) -> Optional[Tuple[int, int]]:
    """Walk the JPEG markers to the first start-of-frame (SOF0-SOF15 but DHT C4, JPG C8, DAC CC)."""
    f.seek(2)
    for _ in range(10000):
        byte = f.read(1)
        while byte == b"\xff":  # fill bytes
            byte = f.read(1)
        if not byte:
            return None
        marker = byte[0]
        if marker in (0x01,) or 0xD0 <= marker <= 0xD9:
            continue  # markers without a length
        length = struct.unpack(">H", f.read(2))[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">xHH", f.read(5))
            return width, height
        if length < 2:
            return None
        f.seek(length - 2, 1)
        if f.read(1) != b"\xff":
            return None
    return None


def _webp(head: bytes) -> Optional[Tuple[int, int]]:
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and head[20:21] == b"\x2f":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return None


def _tiff(data: bytes) -> Optional[Tuple[int, int]]:
    """ImageWidth (256) and ImageLength (257) of the first IFD."""
    order = "<" if data[:2] == b"II" else ">"
    offset = struct.unpack(order + "I", data[4:8])[0]
    count = struct.unpack(order + "H", data[offset:offset + 2])[0]
    found = {}
    for i in range(count):
        entry = data[offset + 2 + 12 * i:offset + 14 + 12 * i]
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag in (256, 257):
            found[tag] = struct.unpack(order + ("H" if kind == 3 else "I"), entry[8:10] if kind == 3 else entry[8:12])[0]
    return (found[256], found[257]) if len(found) == 2 else None


def _pnm(data: bytes) -> Optional[Tuple[int, int]]:
    words = []
    for line in data[2:].split(b"\n"):
        words += line.split(b"#", 1)[0].split()
        if len(words) >= 2:
            return int(words[0]), int(words[1])
    return None


def check_image_size(path: PathLike, what: str = "image") -> Optional[Tuple[int, int]]:
    """The declared (width, height); :class:`ImageTooLarge` when it is above :data:`MAX_IMAGE_PIXELS`."""
    size = image_size(path)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        raise ImageTooLarge("%s %s declares %dx%d pixels (%.0f megapixels), more than the %d megapixels jetforge "
                            "decodes" % (what, Path(path).name, size[0], size[1], size[0] * size[1] / 1e6,
                                         MAX_IMAGE_PIXELS // 10 ** 6),
                            hint="resize it first (e.g. convert IN -resize 4096x4096 OUT), or leave it out")
    return size


def read_image(path: PathLike, what: str = "image") -> Optional[Any]:
    """The image at ``path`` as OpenCV decodes it (BGR uint8), None when OpenCV cannot decode it; an image too large
    to decode (:func:`check_image_size`) or a name OpenCV cannot take is a one-line error, raised before decoding."""
    import cv2

    check_image_size(path, what)
    name = opencv_path(path, what)
    try:
        return cv2.imread(name, cv2.IMREAD_COLOR)
    except cv2.error:  # OpenCV asserts on some malformed headers instead of returning None
        return None


__all__ = ["ImageTooLarge", "MAX_IMAGE_PIXELS", "check_image_size", "image_size", "read_image"]
