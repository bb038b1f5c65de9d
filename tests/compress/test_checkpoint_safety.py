"""Checkpoints from strangers never run code, and every malformed one is a one-line error (exit 1).

Each malicious file here is a real ``torch.save`` checkpoint (or a real ``torch.export`` archive)
whose pickle calls ``exec`` on code that writes a marker file -- what the reproduced attack did
with a shell command, made harmless.  A test passes only if the command refuses the file, exits 1
with one line naming the fix, and the marker was never written.
"""

import io
import subprocess
import sys
import warnings
import zipfile

import pytest

torch = pytest.importorskip("torch")

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.checkpoint import read_weights  # noqa: E402
from jetforge.errors import InputFileError, JetforgeError, ModelError  # noqa: E402


class Payload:
    """Unpickling this calls exec(code): the code writes the marker file."""

    def __init__(self, marker):
        self.code = "open(%r, 'w').write('code from the checkpoint ran')" % str(marker)

    def __reduce__(self):
        return (exec, (self.code,))


def malicious_checkpoint(path, marker, legacy=False):
    """A checkpoint that looks like weights (it holds a real tensor) and carries the payload."""
    obj = {"conv.weight": torch.zeros(4, 3, 3, 3), "payload": Payload(marker)}
    torch.save(obj, str(path), _use_new_zipfile_serialization=not legacy)
    return path


@pytest.fixture(scope="module")
def export_archive(tmp_path_factory):
    """A genuine torch.export archive of a small CNN (made once)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2)).eval()
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(1, 3, 8, 8),)), str(path))
    return path


def malicious_export_archive(good, path, marker):
    """The genuine archive with its example inputs replaced by the payload.

    torch.export.load reads the example inputs weights-only, and on failure falls back to full
    unpickling (torch 2.14): this is the route the payload takes.
    """
    evil = io.BytesIO()
    torch.save((Payload(marker),), evil)
    with zipfile.ZipFile(str(good)) as src, zipfile.ZipFile(str(path), "w") as dst:
        names = src.namelist()
        assert any(n.endswith("sample_inputs/model.pt") for n in names), names  # the layout this attack needs
        for name in names:
            dst.writestr(name, evil.getvalue() if name.endswith("sample_inputs/model.pt") else src.read(name))
    return path


def run_cli(argv, capsys):
    """``jetforge ARGV`` in-process: (exit code, stderr lines)."""
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def assert_one_line_error(code, lines, *needles):
    assert code == 1, lines
    assert len(lines) == 1 and lines[0].startswith("jetforge: error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "MARKER"
    yield path
    assert not path.exists(), "code stored in a checkpoint ran"


# ------------------------------------------------------------------------------------ code execution
def test_export_never_unpickles_a_checkpoint_from_a_stranger(tmp_path, marker, capsys):
    evil = malicious_checkpoint(tmp_path / "evil.pt", marker)
    code, lines = run_cli(["export", "--model", str(evil), "--out", str(tmp_path / "m.onnx")], capsys)
    assert_one_line_error(code, lines, "evil.pt", "builtins.exec", "--trust-pickle", "--weights")
    assert not (tmp_path / "m.onnx").exists()


def test_prune_never_unpickles_a_checkpoint_from_a_stranger(tmp_path, marker, capsys):
    evil = malicious_checkpoint(tmp_path / "evil.pth", marker, legacy=True)  # the pre-1.6 format too
    code, lines = run_cli(["prune", "--model", str(evil), "--ratio", "0.3", "--out", str(tmp_path / "out")], capsys)
    assert_one_line_error(code, lines, "evil.pth", "exec", "--trust-pickle")


def test_weights_flag_reads_weights_only(tmp_path, marker, capsys):
    evil = malicious_checkpoint(tmp_path / "weights.pt", marker)
    code, lines = run_cli(["export", "--model", "resnet18", "--weights", str(evil), "--out", str(tmp_path / "m.onnx")],
                          capsys)
    assert_one_line_error(code, lines, "weights.pt", "builtins.exec")


def test_distill_and_qat_recipes_never_unpickle_their_checkpoints(tmp_path, marker, fmnist_root, capsys):
    """model.checkpoint and teacher.checkpoint are read weights-only; the fix names the recipe key."""
    from jetforge.compress.models.fashion import build_model

    evil = malicious_checkpoint(tmp_path / "evil.pt", marker)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("out_dir: %s\ndata: {root: %s, train_limit: 64, val_limit: 64}\n"
                      "model: {arch: fashion_cnn, checkpoint: %s}\ntrain: {epochs: 1, progress: false}\n"
                      % (tmp_path / "run", fmnist_root, evil))
    for command in ("distill", "qat"):
        code, lines = run_cli([command, "--config", str(recipe)], capsys)
        assert_one_line_error(code, lines, "evil.pt", "model.trust_pickle: true")
    ok = tmp_path / "ok.pt"
    torch.save(build_model("fashion_cnn").state_dict(), str(ok))
    code, lines = run_cli(["distill", "--config", str(recipe), "--set", "model.checkpoint=%s" % ok,
                           "--set", "teacher.arch=fashion_cnn", "--set", "teacher.checkpoint=%s" % evil], capsys)
    assert_one_line_error(code, lines, "evil.pt", "teacher.trust_pickle: true")
    cut = tmp_path / "cut.pt"
    cut.write_bytes(evil.read_bytes()[:400])
    code, lines = run_cli(["distill", "--config", str(recipe), "--set", "model.checkpoint=%s" % cut], capsys)
    assert_one_line_error(code, lines, "cut.pt", "damaged")
    assert not (tmp_path / "run").exists()


def test_torch_export_archives_are_not_opened_without_trust(tmp_path, marker, export_archive, capsys):
    evil = malicious_export_archive(export_archive, tmp_path / "evil.pt2", marker)
    code, lines = run_cli(["export", "--model", str(evil), "--out", str(tmp_path / "m.onnx")], capsys)
    assert_one_line_error(code, lines, "evil.pt2", "torch.export", "--trust-pickle")


def test_torch_export_load_itself_runs_code_from_an_archive(tmp_path, export_archive):
    """Why .pt2 archives need --trust-pickle: torch.export.load runs the payload of the archive above.

    If this fails, a newer torch stopped doing so: reconsider opening .pt2 files without the flag.
    """
    marker = tmp_path / "MARKER"
    evil = malicious_export_archive(export_archive, tmp_path / "evil.pt2", marker)
    try:
        torch.export.load(str(evil))
    except Exception:  # noqa: BLE001 - whatever torch does afterwards, the question is whether the code ran
        pass
    assert marker.read_text() == "code from the checkpoint ran"


def test_trusting_a_pickle_is_explicit_and_warned(tmp_path, capsys, caplog):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3)).eval()
    whole = tmp_path / "whole.pt"
    torch.save(net, str(whole))
    out = tmp_path / "m.onnx"
    code, lines = run_cli(["export", "--model", str(whole), "--input-shape", "1x6", "--out", str(out)], capsys)
    assert_one_line_error(code, lines, "torch.nn.modules", "--trust-pickle")
    with caplog.at_level("WARNING"):
        assert main(["export", "--model", str(whole), "--input-shape", "1x6", "--trust-pickle", "--out", str(out)]) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "--trust-pickle" in r.getMessage()]
    assert len(warned) == 1 and "runs now" in warned[0]
    import numpy as np
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    # float32 matmuls of width 6 and 4: ORT and torch differ by a few ulps of values of order 1
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_help_names_the_safe_route_and_the_opt_in(capsys):
    for command in ("export", "prune"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for flag in ("--weights", "--prune-plan", "--trust-pickle", "runs code", "weights-only"):
            assert flag in text, (command, flag)
    for command in ("distill", "qat"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "trust_pickle" in " ".join(capsys.readouterr().out.split()), command


# ------------------------------------------------------------------------------------ malformed files
def _bad_files(tmp_path, marker):
    evil = malicious_checkpoint(tmp_path / "evil_source.pt", marker).read_bytes()
    good = io.BytesIO()
    torch.save({"w": torch.arange(1000, dtype=torch.float32)}, good)
    scripted = tmp_path / "scripted.pt"
    with warnings.catch_warnings():  # torch.jit is deprecated; users still have such files
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(scripted))
    files = {
        "truncated": evil[: len(evil) // 2],  # the malicious file cut in half: neither loads nor runs
        "truncated_weights": good.getvalue()[:-200],
        "random": bytes(__import__("random").Random(3).getrandbits(8) for _ in range(4096)),
        "empty": b"",
        "text": b"these are not the weights you are looking for\n" * 20,
        "zip_not_torch": _zip_bytes(),
        "torchscript": scripted.read_bytes(),
    }
    paths = {}
    for kind, data in files.items():
        paths[kind] = tmp_path / (kind + ".pt")
        paths[kind].write_bytes(data)
    (tmp_path / "folder.pt").mkdir()
    paths["folder"] = tmp_path / "folder.pt"
    return paths


def _zip_bytes():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "hello")
    return buf.getvalue()


EXPECTED = {"truncated": "damaged", "truncated_weights": "damaged", "random": "damaged", "empty": "empty",
            "text": "damaged", "zip_not_torch": "damaged", "torchscript": "TorchScript", "folder": "folder"}


def test_every_malformed_checkpoint_is_one_line_and_exit_1(tmp_path, marker, capsys):
    paths = _bad_files(tmp_path, marker)
    assert set(paths) == set(EXPECTED)
    for kind, path in paths.items():
        for argv in (["export", "--model", str(path), "--out", str(tmp_path / "m.onnx")],
                     ["prune", "--model", str(path), "--ratio", "0.3", "--out", str(tmp_path / "out")],
                     ["export", "--model", "resnet18", "--weights", str(path), "--out", str(tmp_path / "m.onnx")]):
            code, lines = run_cli(argv, capsys)
            assert_one_line_error(code, lines, path.name, EXPECTED[kind])
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "out").exists()


def test_malformed_checkpoint_library_errors_are_model_errors(tmp_path, marker):
    for kind, path in _bad_files(tmp_path, marker).items():
        with pytest.raises(JetforgeError) as err:  # nothing else escapes: ModelError, InputFileError for the folder
            read_weights(path, "weights file")
        assert isinstance(err.value, ModelError if kind != "folder" else InputFileError), kind
        assert path.name in str(err.value) and EXPECTED[kind] in str(err.value) and "\n" not in str(err.value)


def test_the_installed_command_prints_one_line_and_exits_1(tmp_path, marker):
    """The real process (logging and warnings as a user sees them), not main() in-process."""
    evil = malicious_checkpoint(tmp_path / "evil.pt", marker)
    launcher = "import sys; from jetforge.cli.main import main; sys.exit(main())"
    argv = ["export", "--model", str(evil), "--out", str(tmp_path / "m.onnx")]
    proc = subprocess.run([sys.executable, "-c", launcher] + argv, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "--trust-pickle" in lines[0], (proc.returncode, proc.stderr)
