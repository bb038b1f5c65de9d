"""Folders assembled in hidden staging folders (bundle create, bundle tars unpacked on the board, the engine
cache) leave nothing behind for good: a folder left by a SIGKILLed writer is removed by the next run, a
folder of a writer still running is kept.  And a broken ``--qdq`` is reported under the user's file name.

The killed writer is real: a Python process creates its staging folder through jetforge.fileio, writes
into it and is SIGKILLed.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

onnx = pytest.importorskip("onnx")

from test_bundle import NX, make_cache, make_model  # noqa: E402  (tests/deploy is on sys.path under pytest)

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import create_bundle, unpack_tar  # noqa: E402
from jetforge.fileio import remove_stale_staging, replace_dir, staging_dir  # noqa: E402
from jetforge.runtime.tensorrt.engine_cache import ENGINE, EngineCache, EngineKey  # noqa: E402

WRITER = ("import sys, time\nfrom jetforge.fileio import staging_dir\n"
          "p = staging_dir(sys.argv[1])\n(p / 'half-written').write_bytes(b'x' * 1000)\n"
          "print(p, flush=True)\ntime.sleep(120)\n")


def killed_writer_leftover(final):
    """The staging folder of a process that was assembling ``final`` when it got SIGKILL."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final)], stdout=subprocess.PIPE,
                            universal_newlines=True)
    try:
        path = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert path and os.path.isdir(path), path
    return path


def test_stale_staging_rules_dead_writer_removed_live_writer_kept(tmp_path):
    final = tmp_path / "cam"
    mine = staging_dir(final)  # this process is alive: a concurrent writer's folder stays
    dead = killed_writer_leftover(final)
    legacy_old = tmp_path / ".cam.partial-1a2b3c4d"  # a name without a writer: only age decides
    legacy_new = tmp_path / ".cam.partial-5e6f7a8b"
    for folder in (legacy_old, legacy_new):
        folder.mkdir()
    os.utime(str(legacy_old), (time.time() - 2 * 86400,) * 2)
    other = tmp_path / ".camera.partial-1a2b3c4d"  # another target's
    other.mkdir()
    os.utime(str(other), (time.time() - 2 * 86400,) * 2)
    removed = {p.name for p in remove_stale_staging(final)}
    assert removed == {os.path.basename(dead), legacy_old.name}
    assert mine.is_dir() and legacy_new.is_dir() and other.is_dir()


def test_replace_dir_swaps_whole_folders_and_leaves_nothing(tmp_path):
    final = tmp_path / "out"
    for content in (b"first", b"second"):
        stage = staging_dir(final)
        (stage / "f").write_bytes(content)
        replace_dir(stage, final)
        assert (final / "f").read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.fixture
def model(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    return {"model": make_model(src / "model.onnx"), "qdq": make_model(src / "model.qdq.onnx", qdq=True),
            "cache": make_cache(src / "model.calib")}


def test_bundle_create_removes_a_killed_create_s_staging_folder(model, tmp_path):
    out = tmp_path / "bundles" / "cam"
    dead = killed_writer_leftover(out)
    create_bundle(model["model"], out, [NX], calib=[model["cache"]], tensorrt_versions=["10.3.0"])
    assert not os.path.exists(dead)
    assert sorted(p.name for p in out.parent.iterdir()) == ["cam"]


def test_unpacking_a_bundle_tar_removes_a_killed_unpack_s_staging_folder(model, tmp_path):
    res = create_bundle(model["model"], tmp_path / "cam", [NX], tensorrt_versions=["10.3.0"], tar=tmp_path / "cam.tar")
    cache = tmp_path / "board-cache"
    from jetforge.fileio import sha256_file

    dead = killed_writer_leftover(cache / sha256_file(res.tar)[:20])  # unpack_tar's folder: the tar's hash
    bundle = unpack_tar(res.tar, cache)
    assert (bundle / "manifest.json").is_file() and not os.path.exists(dead)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".")] == []


def test_engine_cache_removes_a_killed_build_s_staging_folder(tmp_path):
    cache = EngineCache(tmp_path / "engines")
    key = EngineKey(bundle_hash="b" * 64, onnx_sha256="o" * 64, tensorrt_version="10.3.0", device_name="Orin",
                    compute_capability="8.7", dla_core=None, target=NX)
    dead = killed_writer_leftover(cache.entry(key))

    def fake_trt_build(engine_path):  # stands in for TensorRT, which this machine does not have
        engine_path.write_bytes(b"engine")
        return "built"

    assert cache.store(key, fake_trt_build) == "built"
    assert (cache.entry(key) / ENGINE).read_bytes() == b"engine" and not os.path.exists(dead)
    assert sorted(p.name for p in cache.root.iterdir()) == [key.digest]


def test_bundle_create_reports_a_broken_qdq_under_the_users_file_name(model, tmp_path, capsys):
    broken = model["qdq"]
    broken.write_bytes(broken.read_bytes()[:200])  # cut short, as a failed copy leaves it
    rc = main(["bundle", "create", str(model["model"]), "--target", NX, "--qdq", str(broken),
               "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert str(broken) in err and "partial" not in err
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.*"))
