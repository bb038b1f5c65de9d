"""``bundle create --force`` never removes anything it did not create (issue 25, "data lost").

Found by a new user: ``bundle create in/model.onnx --out in/ --force`` replaced the folder that held the input
model and ~180 other files with the bundle.  Each test snapshots every byte of the user's folder first and
compares after the refused command; the refusal is one line on stderr with exit 1 (the CLI's contract).
"""

import tarfile

import pytest

pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import BundleError, create_bundle, verify_bundle  # noqa: E402

from tests.deploy.test_bundle import NX, make_cache, make_model  # noqa: E402


def snapshot(folder):
    """Every file under ``folder``: relative path -> bytes (what the user would lose)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path):
    """A user's project folder: the model, its sidecar, a cache and files jetforge never wrote."""
    folder = tmp_path / "in"
    folder.mkdir()
    make_model(folder / "model.onnx")
    make_cache(folder / "model.calib")
    (folder / "notes.txt").write_text("three weeks of notes\n")
    (folder / "data").mkdir()
    for i in range(5):
        (folder / "data" / ("frame%02d.jpg" % i)).write_bytes(bytes([i]) * 100)
    return folder


def run_cli(args, capsys):
    rc = main(args)
    captured = capsys.readouterr()
    return rc, captured.err.strip().splitlines()


def test_force_never_replaces_the_folder_holding_the_input_model(project, capsys):
    before = snapshot(project)
    rc, err = run_cli(["bundle", "create", str(project / "model.onnx"), "--target", NX, "--out", str(project),
                       "--force"], capsys)
    assert rc == 1 and len(err) == 1 and "holds the input" in err[0]
    assert snapshot(project) == before


def test_force_never_replaces_a_folder_holding_an_input_at_depth(project, capsys):
    before = snapshot(project.parent)
    rc, err = run_cli(["bundle", "create", str(project / "model.onnx"), "--target", NX, "--out",
                       str(project.parent), "--force", "--calib", str(project / "model.calib")], capsys)
    assert rc == 1 and len(err) == 1 and "holds the input" in err[0]
    assert snapshot(project.parent) == before


def test_force_never_replaces_a_folder_that_is_not_a_bundle(project, tmp_path, capsys):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    before = snapshot(other)
    rc, err = run_cli(["bundle", "create", str(project / "model.onnx"), "--target", NX, "--out", str(other),
                       "--force"], capsys)
    assert rc == 1 and len(err) == 1 and "not one" in err[0] and "holiday" not in err[0].split("(fix")[1]
    assert snapshot(other) == before


def test_force_never_deletes_files_added_to_a_bundle(project, tmp_path, capsys):
    out = tmp_path / "bundle"
    create_bundle(project / "model.onnx", out, [NX])
    (out / "my-results.csv").write_text("a,b\n1,2\n")
    before = snapshot(out)
    rc, err = run_cli(["bundle", "create", str(project / "model.onnx"), "--target", NX, "--out", str(out),
                       "--force", "--precision", "fp32"], capsys)
    assert rc == 1 and len(err) == 1 and "my-results.csv" in err[0] and "did not write" in err[0]
    assert snapshot(out) == before


def test_force_replaces_a_bundle_and_an_empty_folder(project, tmp_path):
    out = tmp_path / "bundle"
    first = create_bundle(project / "model.onnx", out, [NX])
    second = create_bundle(project / "model.onnx", out, [NX], calib=[project / "model.calib"], force=True)
    assert second.manifest.bundle_hash != first.manifest.bundle_hash and verify_bundle(out).ok
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verify_bundle(create_bundle(project / "model.onnx", empty, [NX], force=True).path).ok


def test_existing_tar_is_replaced_only_with_force_and_only_if_a_bundle_tar(project, tmp_path):
    out = tmp_path / "cam"
    tar = tmp_path / "cam.tar"
    tar.write_bytes(b"someone's archive, not a tar at all")
    with pytest.raises(BundleError) as err:
        create_bundle(project / "model.onnx", out, [NX], tar=tar)
    assert "already exists" in err.value.one_line() and tar.read_bytes().startswith(b"someone's")
    with pytest.raises(BundleError) as err:
        create_bundle(project / "model.onnx", out, [NX], tar=tar, force=True)
    assert "not one" in err.value.one_line() and tar.read_bytes().startswith(b"someone's") and not out.exists()
    tar.unlink()
    create_bundle(project / "model.onnx", out, [NX], tar=tar)
    again = create_bundle(project / "model.onnx", out, [NX], tar=tar, force=True, calib=[project / "model.calib"])
    with tarfile.open(str(again.tar)) as archive:
        assert "cam/calib" in {n.rsplit("/", 1)[0] for n in archive.getnames()}
