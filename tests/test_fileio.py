"""jetforge.fileio: paths named for what they are, outputs checked up front, and temporary files of
killed writers removed at the next write to the same target (and nothing else removed)."""

import os
import subprocess
import sys
import time

import pytest

from jetforge.errors import InputFileError
from jetforge.fileio import (STALE_PART_AGE_S, atomic_output, check_output_path, remove_stale_parts, require_dir,
                             require_file, write_text_atomic)
from jetforge import fileio


def test_require_file_names_a_folder_as_a_folder(tmp_path):
    with pytest.raises(InputFileError) as err:
        require_file(tmp_path, "ONNX model")
    assert err.value.one_line() == ("ONNX model %s is a folder, not a file (fix: name the file itself, not the folder "
                                    "that holds it)" % tmp_path)
    with pytest.raises(InputFileError, match="model .*nope.onnx does not exist"):
        require_file(tmp_path / "nope.onnx", "model")
    (tmp_path / "m.onnx").write_bytes(b"x")
    assert require_file(tmp_path / "m.onnx") == tmp_path / "m.onnx"


def test_require_dir_names_a_file_as_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputFileError, match="image folder .*f is a file, not a folder"):
        require_dir(tmp_path / "f", "image folder")
    with pytest.raises(InputFileError, match="does not exist"):
        require_dir(tmp_path / "nope")
    assert require_dir(tmp_path) == tmp_path


def test_an_output_that_cannot_be_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "report.json").write_text("{}")
    with pytest.raises(InputFileError, match="cannot write .*: it is a folder"):
        check_output_path(tmp_path)
    with pytest.raises(InputFileError, match=r"cannot write .*report.json/x/bench.json: .*report.json is a file"):
        check_output_path(tmp_path / "report.json" / "x" / "bench.json")
    assert check_output_path(tmp_path / "new" / "bench.json") == tmp_path / "new" / "bench.json"
    with pytest.raises(InputFileError, match="is a file, not a folder"):
        write_text_atomic(tmp_path / "report.json" / "bench.json", "{}")
    assert (tmp_path / "report.json").read_text() == "{}"  # nothing was touched


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_temporary_file_names_its_writer(tmp_path):
    with atomic_output(tmp_path / "clip.mp4") as tmp:
        assert tmp.name.startswith(".clip.mp4.%d.%s." % (os.getpid(), fileio._host_tag()))
        assert tmp.name.endswith(".part.mp4")
        assert fileio._part_pattern("clip.mp4").match(tmp.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_stale_temporary_files_are_removed_at_the_next_write_and_live_ones_kept(tmp_path):
    host = fileio._host_tag()
    dead = _dead_pid()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead writer": ".events.jsonl.%d.%s.Ab3_x9Qz.part.jsonl" % (dead, host),
            "running writer": ".events.jsonl.%d.%s.k2Jd8s0a.part.jsonl" % (alive.pid, host),
            "this process": ".events.jsonl.%d.%s.q8Wm2n1b.part.jsonl" % (os.getpid(), host),
            "other host, fresh": ".events.jsonl.%d.%s.z7Xc4v5b.part.jsonl" % (dead, "0badf00d" if host != "0badf00d"
                                                                                else "0badf00e"),
            "other host, old": ".events.jsonl.%d.0000abcd.m3Nb6v7c.part.jsonl" % dead,
            "unnamed writer, fresh": ".events.jsonl.u1I2o3P4.part.jsonl",
            "unnamed writer, old": ".events.jsonl.y5T6r7E8.part.jsonl",
            "another target": ".metrics.json.%d.%s.h6G7f8D9.part.json" % (dead, host),
            "a user's file": "events.jsonl.part",
        }
        for name in names.values():
            (tmp_path / name).write_text("partial\n")
        two_days_ago = time.time() - 2 * STALE_PART_AGE_S
        for key in ("other host, old", "unnamed writer, old"):
            os.utime(str(tmp_path / names[key]), (two_days_ago, two_days_ago))
        link = tmp_path / (".events.jsonl.%d.%s.L1nk0000.part.jsonl" % (dead, host))
        link.symlink_to(tmp_path / "a user's target")  # a link of our pattern is not ours to delete
        write_text_atomic(tmp_path / "events.jsonl", "{}\n")
        left = {p.name for p in tmp_path.iterdir()}
        removed = {k for k, n in names.items() if n not in left}
        assert removed == {"dead writer", "other host, old", "unnamed writer, old"}
        assert link.name in left and "events.jsonl" in left
        assert remove_stale_parts(tmp_path / "events.jsonl") == []  # nothing stale is left
    finally:
        alive.kill()
        alive.wait()


def test_write_png_atomic_writes_the_figure_and_keeps_the_old_file_on_failure(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2.0, 1.5))
    FigureCanvasAgg(fig)
    fig.add_subplot(1, 1, 1).plot([0, 1], [1, 0])
    target = tmp_path / "plot.png"
    assert fileio.write_png_atomic(fig, target, dpi=50) == target
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (100, 75)  # 2 x 1.5 inches at 50 dpi

    class Broken:
        def tight_layout(self):
            pass

        def savefig(self, path, **_):
            with open(path, "wb") as f:
                f.write(b"half a pic")
            raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        fileio.write_png_atomic(Broken(), target)
    assert target.read_bytes() == data  # the earlier plot is still whole
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]  # no temporary file left


def test_an_output_is_never_an_input_or_an_inputs_sidecar(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    fileio.check_not_input(tmp_path / "m.calib", [model])  # a plain new output is fine
    with pytest.raises(InputFileError, match="also an input"):
        fileio.check_not_input(tmp_path / "sub" / ".." / "m.onnx", [model])
    with pytest.raises(InputFileError, match="sidecar of the input"):  # m.onnx.json describes m.onnx
        fileio.check_not_input(tmp_path / "m.onnx.json", [model])
    link = tmp_path / "alias.onnx"
    link.symlink_to(model)
    with pytest.raises(InputFileError, match="sidecar of the input"):  # through a link, the same sidecar
        fileio.check_not_input(tmp_path / "m.onnx.json", [link])


def test_a_replaced_folder_never_holds_an_input(tmp_path):
    inputs = tmp_path / "in" / "deep" / "m.onnx"
    inputs.parent.mkdir(parents=True)
    inputs.write_bytes(b"model")
    fileio.check_not_input(tmp_path / "in", [inputs])  # a file output named like the folder: only equality counts
    for folder in (tmp_path / "in", tmp_path / "in" / "deep", tmp_path):
        with pytest.raises(InputFileError, match="holds the input"):
            fileio.check_not_input(folder, [inputs], replaces_folder=True)
    fileio.check_not_input(tmp_path / "out", [inputs], replaces_folder=True)
