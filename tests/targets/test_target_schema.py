"""The profile loader refuses bad profiles with one clear error naming the file and the key."""

import copy

import pytest
import yaml

from jetforge.errors import TargetError
from jetforge.targets.loader import PROFILES_DIR, load_profile


@pytest.fixture
def orin():
    """The shipped orin-nx-16gb profile as a plain dict, to be broken one way per test."""
    return yaml.safe_load((PROFILES_DIR / "orin-nx-16gb.yaml").read_text(encoding="utf-8"))


def _write(tmp_path, data, name=None):
    path = tmp_path / ("%s.yaml" % (name or data["name"]))
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _error(tmp_path, data, name=None):
    with pytest.raises(TargetError) as info:
        load_profile(_write(tmp_path, data, name))
    text = info.value.one_line()
    assert "\n" not in text
    return text


def test_unmodified_copy_loads(tmp_path, orin):
    t = load_profile(_write(tmp_path, orin))
    assert t.name == "orin-nx-16gb" and t.dla_cores == 2


def test_missing_source_is_refused(tmp_path, orin):
    del orin["specs"]["memory_bandwidth_gbs"]["source"]
    text = _error(tmp_path, orin)
    assert "orin-nx-16gb.yaml" in text and "specs.memory_bandwidth_gbs" in text and "no 'source'" in text


def test_bare_number_is_refused(tmp_path, orin):
    orin["specs"]["sm_count"] = 8
    assert "specs.sm_count" in _error(tmp_path, orin)


def test_unknown_spec_key_suggests(tmp_path, orin):
    orin["specs"]["memory_bandwith_gbs"] = {"value": 1, "source": "x" * 20}
    text = _error(tmp_path, orin)
    assert "unknown key 'memory_bandwith_gbs'" in text and "did you mean 'memory_bandwidth_gbs'" in text


def test_unknown_top_level_key_suggests(tmp_path, orin):
    orin["power_mode"] = orin.pop("power_modes")
    assert "did you mean 'power_modes'" in _error(tmp_path, orin)


def test_unknown_key_inside_a_value(tmp_path, orin):
    orin["specs"]["sm_count"]["uncertian"] = True
    assert "did you mean 'uncertain'" in _error(tmp_path, orin)


@pytest.mark.parametrize("bad", ["8", "eight.seven", "8.7.1", 8.7, 87, "99.0"])
def test_bad_compute_capability(tmp_path, orin, bad):
    orin["specs"]["compute_capability"]["value"] = bad
    text = _error(tmp_path, orin)
    assert "compute_capability" in text


def test_wrong_value_type(tmp_path, orin):
    orin["specs"]["dla_cores"]["value"] = 2.5
    assert "specs.dla_cores.value: expected an integer" in _error(tmp_path, orin)


def test_dla_cores_without_dla_precisions(tmp_path, orin):
    orin["precisions"]["dla"] = {"value": [], "note": "oops"}
    assert "lists no DLA precision" in _error(tmp_path, orin)


def test_dla_precision_that_dla_cannot_run(tmp_path, orin):
    orin["precisions"]["dla"]["value"] = ["fp16", "fp32"]
    assert "not a DLA precision" in _error(tmp_path, orin)


def test_missing_precision_is_refused(tmp_path, orin):
    del orin["precisions"]["gpu"]["fp8"]
    assert "missing 'fp8'" in _error(tmp_path, orin)


def test_dla_fields_on_a_target_without_dla(tmp_path, orin):
    orin["specs"]["dla_cores"]["value"] = 0
    orin["precisions"]["dla"] = []
    assert "set on a target with dla_cores: 0" in _error(tmp_path, orin)


def test_unknown_jetpack_release(tmp_path, orin):
    orin["jetpack"]["releases"].append("6.3")
    assert "unknown JetPack release '6.3'" in _error(tmp_path, orin)


def test_power_mode_without_any_source(tmp_path, orin):
    del orin["power_modes"]["source"]
    assert "power_modes.MAXN" in _error(tmp_path, orin)


def test_unknown_clock_key(tmp_path, orin):
    orin["power_modes"]["modes"][1]["clocks"]["gpu_mhz"] = 1
    assert "unknown key 'gpu_mhz'" in _error(tmp_path, orin)


def test_name_must_match_file(tmp_path, orin):
    assert "does not match the file name" in _error(tmp_path, orin, name="orin-nx-99gb")


def test_desktop_target_cannot_have_dla(tmp_path, orin):
    data = copy.deepcopy(orin)
    data["kind"] = "desktop"
    assert "only Jetson targets have DLA cores" in _error(tmp_path, data)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nspecs: {a: [1, 2\n", encoding="utf-8")
    with pytest.raises(TargetError, match="not valid YAML at line"):
        load_profile(path)
