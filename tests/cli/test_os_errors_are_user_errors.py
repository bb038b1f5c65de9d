"""OS errors a user causes are one line and exit 1, never "internal error" (issue 25: path components over 255
bytes in almost every command; a full disk in calibrate, bundle, app, bench, export-config, estimate and distill).

Names over 255 bytes are real (the file system refuses them); a full disk is the real ``OSError(ENOSPC)`` raised
where the bytes are written, since no test can fill a disk safely.
"""

import errno
import subprocess
import sys

import pytest

pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.errors import user_os_error  # noqa: E402

from tests.deploy.test_bundle import NX, make_model  # noqa: E402

LONG = "a" * 300


@pytest.fixture
def model(tmp_path):
    return make_model(tmp_path / "model.onnx")


@pytest.mark.parametrize("argv", [
    ["bundle", "create", "{model}", "--target", NX, "--out", "{tmp}/" + LONG],
    ["estimate", "{model}", "--target", NX, "--plot", "{tmp}/" + LONG + "/plot.png"],
    ["bench", "{model}", "--iterations", "2", "--out", "{tmp}/" + LONG],
    ["app", "classify", "--model", "{model}", "--source", "{tmp}", "--out", "{tmp}/" + LONG],
])
def test_a_name_over_255_bytes_is_one_line(argv, model, tmp_path):
    argv = [a.replace("{model}", str(model)).replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "jetforge.cli.main"] + argv, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("jetforge: ")]
    if proc.returncode == 2 or "unrecognized arguments" in proc.stderr:
        pytest.fail(proc.stderr)
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "too long" in lines[0] and "internal error" not in proc.stderr, proc.stderr


def test_a_full_disk_while_writing_is_one_line(model, tmp_path, monkeypatch, capsys):
    from jetforge import fileio

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(fileio.os, "replace", full)
    rc = main(["bundle", "create", str(model), "--target", NX, "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "no space left on the device holding" in err and "(fix: " in err


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left"), (errno.ENAMETOOLONG, "too long"),
                                         (errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_user_os_errors_name_the_path_and_the_fix(code, words):
    err = user_os_error(OSError(code, "x", "/data/out/\udcffname"))
    assert err is not None and words in err.one_line() and "\\udcff" in err.one_line() and "(fix: " in err.one_line()


def test_other_errors_stay_bugs():
    assert user_os_error(OSError(errno.EINVAL, "x")) is None and user_os_error(ValueError("x")) is None
