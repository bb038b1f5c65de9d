"""A bundle archive that expands far beyond its size is refused before it fills the disk (issue 25: a 1 MB .tar.gz
expanding to 1 GiB was accepted, and its 1.1 GB stayed in the bundle cache)."""

import io
import tarfile

import pytest

from jetforge.cli.main import main
from jetforge.deploy.bundle import BundleError
from jetforge.deploy.bundle.tar import expansion_limit, unpack_tar


class Zeros(io.RawIOBase):
    """``size`` zero bytes, streamed (the test never holds the expanded file in memory)."""

    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buf):
        n = min(len(buf), self.left)
        buf[:n] = b"\0" * n
        self.left -= n
        return n


def bomb(path, expanded):
    with tarfile.open(str(path), "w:gz") as tar:
        info = tarfile.TarInfo("cam/model.onnx")
        info.size = expanded
        tar.addfile(info, io.BufferedReader(Zeros(expanded)))
    return path


def test_a_decompression_bomb_is_refused_and_nothing_stays_in_the_cache(tmp_path):
    archive = bomb(tmp_path / "cam.tar.gz", 512 << 20)  # 512 MiB of zeros: about 0.5 MB compressed
    assert archive.stat().st_size * 20 + (64 << 20) < 512 << 20
    cache = tmp_path / "cache"
    with pytest.raises(BundleError, match="decompression bomb"):
        unpack_tar(archive, cache_dir=cache)
    left = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    assert left == 0


def test_bundle_verify_of_a_bomb_is_one_line(tmp_path, capsys):
    archive = bomb(tmp_path / "cam.tar.gz", 512 << 20)
    assert main(["bundle", "verify", str(archive)]) == 1
    assert "decompression bomb" in capsys.readouterr().err


def test_real_bundle_sizes_are_far_below_the_limit():
    # weights compress by about 1.1x; even an archive of pure JSON (~5x) is below 20x
    assert expansion_limit(10 << 20) >= 5 * (10 << 20) and expansion_limit(0) == 64 << 20
