"""Hostile bundles: links, manifest paths, path-naming build options and names are refused, never followed.

Each test first builds the attack the way an attacker would: a real bundle from `bundle create`,
then edited, with the bundle hash recomputed (the hash detects accidents, not attackers, so a
check that relies on it proves nothing).  Then it runs the real commands (`bundle verify`,
`build --plan-only`, the on-board build) and asserts exit 1 with one clear line, that nothing
outside the bundle was read into the output or written, and that the file outside is unchanged.
The SSH side (`jetforge deploy`) is in test_deploy_ssh.py, against a real sshd.
"""

import json
import os
import stat
import tarfile

import pytest

pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import (BUNDLE_FORMAT, Bundle, BundleError, Manifest, create_bundle,  # noqa: E402
                                         open_bundle, read_manifest, verify_bundle, write_tar)
from jetforge.runtime.tensorrt.engine_cache import EngineCache  # noqa: E402
from jetforge.deploy.onboard import Board, build_bundle, select  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

from test_bundle import NX, make_cache, make_model  # noqa: E402  (tests/apps is on sys.path under pytest)

SECRET = "SECRET-TOKEN-5f3a first line of a private file"


@pytest.fixture
def bundle(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model = make_model(src / "model.onnx")
    cache = make_cache(src / "model.calib")
    return create_bundle(model, tmp_path / "cam", [NX], calib=[cache], tensorrt_versions=["10.3.0"]).path


@pytest.fixture
def outside(tmp_path):
    """A folder beside the bundle with a private file an attacker wants read, echoed or overwritten."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET + "\nsecond line\n")
    return folder


def tamper(bundle_dir, edit):
    """Edit the manifest and recompute its hash, as an attacker can."""
    data = json.loads((bundle_dir / "manifest.json").read_text())
    edit(data)
    data["bundle_hash"] = Manifest.from_dict(data).compute_hash()
    (bundle_dir / "manifest.json").write_text(json.dumps(data))


def run_cli(capsys, *args):
    """(exit code, stdout, the one `jetforge: error:` line) of the real CLI."""
    rc = main(list(args))
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("jetforge: error:")]
    assert len(errors) == (1 if rc == 1 else 0), err
    assert "Traceback" not in err
    return rc, out, errors[0] if errors else ""


def plan_only(bundle_dir):
    # INT8 on DLA takes its scales from the calibration cache: the build really opens calibration[].file
    return ("build", str(bundle_dir), "--target", NX, "--tensorrt", "10.3.0", "--precision", "int8", "--dla-core", "0",
            "--plan-only", "--json")


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- item 2: links inside a bundle ---------------------------------------------------------------
def test_symlinked_model_is_refused_by_verify_and_build(bundle, outside, capsys):
    # the attack: model.onnx replaced by a link to a file outside with the same bytes (so the hashes match)
    real = outside / "model.onnx"
    os.replace(str(bundle / "model.onnx"), str(real))
    os.symlink(str(real), str(bundle / "model.onnx"))
    before = snapshot(outside)
    rc, _, line = run_cli(capsys, "bundle", "verify", str(bundle))
    assert rc == 1 and "model.onnx is a symbolic link: a bundle holds no links" in line
    rc, out, line = run_cli(capsys, *plan_only(bundle))
    assert rc == 1 and "model.onnx is a symbolic link" in line and out == ""
    with pytest.raises(BundleError):
        open_bundle(bundle)
    assert snapshot(outside) == before


def test_symlinked_folder_and_unlisted_links_are_refused(bundle, outside, capsys):
    os.replace(str(bundle / "calib"), str(outside / "calib"))
    os.symlink(str(outside / "calib"), str(bundle / "calib"))          # a listed file reached through a link
    os.symlink(str(outside / "secret.txt"), str(bundle / "notes.txt"))  # a link the manifest does not list
    report = verify_bundle(bundle)
    assert not report.ok
    assert "calib is a symbolic link: a bundle holds no links" in report.errors
    assert "notes.txt is a symbolic link: a bundle holds no links" in report.errors
    rc, out, line = run_cli(capsys, *plan_only(bundle))
    assert rc == 1 and "symbolic link" in line and SECRET not in out + line


def test_hard_linked_file_is_refused(bundle, outside, capsys):
    copy = outside / "model.onnx"
    os.replace(str(bundle / "model.onnx"), str(copy))
    os.link(str(copy), str(bundle / "model.onnx"))  # same inode: the bundle would read (and rsync send) that file
    rc, _, line = run_cli(capsys, "bundle", "verify", str(bundle))
    assert rc == 1 and "model.onnx is a hard link (2 names share its data)" in line
    rc, _, line = run_cli(capsys, *plan_only(bundle))
    assert rc == 1 and "hard link" in line


def test_manifest_itself_may_not_be_a_link(bundle, outside, capsys):
    data = (bundle / "manifest.json").read_bytes()
    (outside / "manifest.json").write_bytes(data)
    (bundle / "manifest.json").unlink()
    os.symlink(str(outside / "manifest.json"), str(bundle / "manifest.json"))
    rc, _, line = run_cli(capsys, "bundle", "verify", str(bundle))
    assert rc == 1 and "manifest.json is a symbolic link" in line


def test_bundle_create_never_puts_a_link_in(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model = make_model(src / "real.onnx")
    cache = make_cache(src / "real.calib")
    # the user's inputs are links (a common layout: latest.onnx -> run-42/model.onnx): their content is copied
    os.symlink(str(model), str(tmp_path / "latest.onnx"))
    os.symlink(str(src / "real.onnx.json"), str(tmp_path / "latest.onnx.json"))
    os.symlink(str(cache), str(tmp_path / "latest.calib"))
    res = create_bundle(tmp_path / "latest.onnx", tmp_path / "b", [NX], calib=[tmp_path / "latest.calib"],
                        tensorrt_versions=["10.3.0"], tar=tmp_path / "b.tar")
    for path in sorted(res.path.rglob("*")):
        st = os.lstat(str(path))
        assert stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1), path
    assert (res.path / "model.onnx").read_bytes() == model.read_bytes()
    with tarfile.open(str(res.tar)) as tar:
        assert all(m.isfile() or m.isdir() for m in tar.getmembers())
    assert verify_bundle(res.path).ok
    # a bundle folder that gained a link is not packed
    os.symlink(str(cache), str(res.path / "extra.calib"))
    with pytest.raises(BundleError, match="holds symbolic links"):
        write_tar(res.path, tmp_path / "again.tar")


def test_tar_members_that_are_links_or_escape_are_refused(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "cache"))
    for name, kind in (("cam/model.onnx", tarfile.SYMTYPE), ("cam/model.onnx", tarfile.LNKTYPE),
                       ("cam/../../escape.onnx", tarfile.REGTYPE), ("/tmp/abs.onnx", tarfile.REGTYPE)):
        evil = tmp_path / "evil.tar"
        with tarfile.open(str(evil), "w") as tar:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/hostname"
            tar.addfile(info, open(str(bundle / "model.onnx"), "rb") if kind == tarfile.REGTYPE else None)
        with pytest.raises(BundleError) as err:
            open_bundle(evil)
        assert "links are refused" in err.value.one_line() or "escapes the destination" in err.value.one_line()
    assert not (tmp_path / "escape.onnx").exists()


# ---- item 3: every manifest path is checked, and errors never echo files ---------------------------
@pytest.mark.parametrize("where,value,why", [
    ("calibration", "ABSOLUTE", "is absolute"),
    ("calibration", "../../private/secret.txt", "climbs out with '..'"),
    ("calibration", "calib/../../private/secret.txt", "climbs out with '..'"),
    ("calibration", "./calib/trt-10.3.0.calib", "is not normalised"),
    ("calibration", "model.onnx.json", "is not one of the bundle's checked calibration files"),
    ("files", "ABSOLUTE", "is absolute"),
    ("files", "../private/secret.txt", "climbs out with '..'"),
    ("files", "calib//trt-10.3.0.calib", "is not normalised"),
])
def test_every_manifest_path_is_checked_and_errors_never_echo_files(bundle, outside, capsys, where, value, why):
    target = str(outside / "secret.txt") if value == "ABSOLUTE" else value

    def edit(data):
        if where == "calibration":
            data["calibration"][0]["file"] = target
        else:
            entry = next(f for f in data["files"] if f["role"] == "calib")
            entry["path"] = target
    tamper(bundle, edit)
    rc, out, line = run_cli(capsys, "bundle", "verify", str(bundle))
    assert rc == 1 and why in line and SECRET not in out + line
    rc, out, line = run_cli(capsys, *plan_only(bundle))
    assert rc == 1 and why in line
    assert SECRET not in out + line and "second line" not in out + line  # never the private file's text


def test_a_damaged_cache_inside_a_bundle_is_not_echoed(bundle, capsys):
    cache = bundle / "calib" / "trt-10.3.0.calib"
    cache.write_text(SECRET + "\n")

    def edit(data):
        import hashlib

        entry = next(f for f in data["files"] if f["role"] == "calib")
        entry["bytes"], entry["sha256"] = cache.stat().st_size, hashlib.sha256(cache.read_bytes()).hexdigest()
    tamper(bundle, edit)
    rc, out, line = run_cli(capsys, *plan_only(bundle))
    assert rc == 1 and "does not start with a TensorRT header" in line and SECRET not in out + line


def test_malformed_manifest_values_are_not_echoed(bundle):
    data = json.loads((bundle / "manifest.json").read_text())
    data["files"][0]["bytes"] = SECRET
    (bundle / "manifest.json").write_text(json.dumps(data))
    report = verify_bundle(bundle)
    assert not report.ok and "a field has the wrong type" in report.errors[0] and SECRET not in report.errors[0]


def test_old_format_bundles_say_to_re_create(bundle):
    data = json.loads((bundle / "manifest.json").read_text())
    data["format"] = 1
    (bundle / "manifest.json").write_text(json.dumps(data))
    report = verify_bundle(bundle)
    assert "bundle format 1; this jetforge reads format %d" % BUNDLE_FORMAT in report.errors[0]


# ---- item 4: options from a bundle may not name paths ------------------------------------------------
class FakeJetsonBuilder:
    """Stands in for TensorRT on a Jetson: writes the engine and, like the TensorRT builder, the timing cache."""

    def __init__(self):
        self.calls = 0

    def __call__(self, plan, engine_path):
        self.calls += 1
        engine_path.write_bytes(b"engine")
        if plan.timing_cache:
            with open(plan.timing_cache, "wb") as f:
                f.write(b"timing cache")


@pytest.mark.parametrize("key", ["timing_cache", "calibration_cache"])
def test_bundle_build_options_cannot_name_paths(bundle, outside, tmp_path, capsys, key):
    victim = outside / "secret.txt"
    tamper(bundle, lambda data: data["build_options"].__setitem__(key, str(victim)))
    before = snapshot(outside)
    rc, _, line = run_cli(capsys, "bundle", "verify", str(bundle))
    assert rc == 1 and "build option %s names a path" % key in line
    board = Board(target=get_target(NX), how="test", tensorrt_installed="10.3.0", tensorrt_version="10.3.0",
                  device_name="Jetson Orin NX")
    builder = FakeJetsonBuilder()
    with pytest.raises(BundleError) as err:
        build_bundle(bundle, board=board, builder=builder, cache=EngineCache(tmp_path / "engines"))
    assert "build option %s names a path" % key in err.value.one_line()
    # the planner refuses it even for a bundle opened without verification
    unverified = Bundle(path=bundle, manifest=read_manifest(bundle), source=bundle)
    with pytest.raises(BundleError, match="names a path"):
        select(unverified, get_target(NX), "10.3.0")
    assert builder.calls == 0 and snapshot(outside) == before and victim.read_text().startswith(SECRET)


# ---- item 5 (local half): the name is sanitised, hashed and checked --------------------------------
def test_bundle_name_is_sanitised_hashed_and_checked(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    model = make_model(src / "model.onnx")
    res = create_bundle(model, tmp_path / "my cam;$(reboot)", [NX], tensorrt_versions=["10.3.0"])
    assert res.manifest.name == "my_cam_reboot_" and verify_bundle(res.path).ok
    # editing the name without the hash is caught as an edit
    data = json.loads((res.path / "manifest.json").read_text())
    data["name"] = "other"
    (res.path / "manifest.json").write_text(json.dumps(data))
    assert "edited" in verify_bundle(res.path).errors[0]
    # a hostile name with a matching hash is refused by name
    for name in ("../../.ssh", ".ssh", "a/b", "-rf", "", "x" * 200):
        tamper(res.path, lambda d: d.__setitem__("name", name))
        rc, _, line = run_cli(capsys, "bundle", "verify", str(res.path))
        assert rc == 1 and "the bundle name" in line, name


def test_every_build_option_that_names_a_file_is_kept_out_of_bundles():
    """A new path-valued BuildOptions field must join PATH_OPTIONS, or a manifest could aim the builder at it."""
    import dataclasses

    from jetforge.deploy.bundle import PATH_OPTIONS
    from jetforge.runtime.tensorrt.plan import BuildOptions

    named = {f.name for f in dataclasses.fields(BuildOptions) if f.name.endswith(("_cache", "_path", "_file", "_dir"))}
    assert named == {"calibration_cache", "timing_cache"} and named <= set(PATH_OPTIONS)
