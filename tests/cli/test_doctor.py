"""`jetforge doctor`: the table with marks and fixes, and the --json report, on this machine.

Missing packages are simulated with ``sys.modules[name] = None`` (what ``import name``
sees when the package is absent); everything else is this machine as it is.
"""

import io
import json
import os
import subprocess
import sys

from jetforge.cli import cmd_doctor
from jetforge.cli.main import main
from jetforge.runtime.environment import Probe


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_doctor_json_reports_this_machine(capsys):
    code, out, err = _run(capsys, "doctor", "--json")
    assert code == 0, err
    data = json.loads(out)
    import jetforge

    assert data["jetforge"] == jetforge.__version__
    probes = data["probes"]
    ort = probes["onnxruntime"]
    assert ort["found"] is True and "CPUExecutionProvider" in ort["info"]["providers"]
    trt = probes["tensorrt"]
    assert trt["found"] is False and "JetPack" in trt["hint"]
    assert probes["dla"]["detail"].startswith("unknown: needs TensorRT")
    assert set(probes["python"]) == {"name", "found", "version", "detail", "hint", "info"}
    for name, probe in probes.items():
        assert probe["name"] == name
        if not probe["found"]:
            assert probe["hint"], name


def test_doctor_table_has_marks_and_fixes():
    probes = [Probe("onnxruntime", True, "1.2", "providers: CPUExecutionProvider"),
              Probe("tensorrt", False, None, "not installed", hint="sudo apt install python3-libnvinfer")]
    text = cmd_doctor.render(probes, stream=io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    lines = text.splitlines()
    row = [l for l in lines if "onnxruntime" in l][0]
    assert row.startswith("\u2713") and "1.2" in row and "CPUExecutionProvider" in row
    row = [l for l in lines if l.startswith("\u2717") and "tensorrt" in l][0]
    assert "not installed" in row
    fixes = lines[lines.index("missing, and how to get it:") + 1:]
    assert fixes == ["  \u2717 tensorrt  sudo apt install python3-libnvinfer"]


def test_doctor_table_falls_back_to_ascii_marks():
    probes = [Probe("numpy", True, "2.0"), Probe("pycuda", False, hint="pip install pycuda")]
    text = cmd_doctor.render(probes, stream=io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    text.encode("ascii")
    assert any(l.startswith("ok") and "numpy" in l for l in text.splitlines())
    assert "  -- pycuda  pip install pycuda" in text


def test_doctor_names_missing_packages_with_their_install_step(capsys, monkeypatch):
    for name in ("onnxruntime", "cv2", "pycuda", "pynvml"):
        monkeypatch.setitem(sys.modules, name, None)
    code, out, err = _run(capsys, "doctor")
    assert code == 0, err
    fixes = out.split("missing, and how to get it:")[1]
    assert "onnxruntime" in fixes and "pip install onnxruntime" in fixes
    assert "opencv-python-headless" in fixes
    assert "pip install pycuda" in fixes
    assert "pip install nvidia-ml-py" in fixes
    assert "JetPack" in fixes  # tensorrt, really missing here


def test_doctor_help_has_examples(capsys):
    try:
        main(["doctor", "--help"])
    except SystemExit as exit:
        assert exit.code == 0
    out = capsys.readouterr().out
    assert "--json" in out and "examples:" in out and "jetforge doctor --json" in out


def test_doctor_into_a_closed_pipe_is_quiet(tmp_path):
    """`jetforge doctor --json | head -1`: the reader has left; exit 141 like a shell, no internal error."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "jetforge", "doctor", "--json"], cwd=str(tmp_path),
                              stdout=write_end, stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""
