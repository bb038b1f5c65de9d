"""jetforge.config: dataclass options from YAML files plus ``--set key=value`` overrides."""

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from jetforge.config import from_dict, load_config, parse_override, read_yaml, to_dict
from jetforge.errors import ConfigError, InputFileError, UnknownNameError

try:
    from typing import Literal
except ImportError:  # pragma: no cover - Python 3.7
    from typing_extensions import Literal  # type: ignore


class Device(enum.Enum):
    GPU = "gpu"
    DLA = "dla"


@dataclass
class Input:
    size: int = 224
    mean: Tuple[float, float, float] = (0.485, 0.456, 0.406)
    names: List[str] = field(default_factory=lambda: ["input"])


@dataclass
class Build:
    precision: Literal["fp32", "fp16", "int8"] = "fp16"
    device: Device = Device.GPU
    dla_core: Optional[int] = None
    workspace_gb: float = 2.0
    verbose: bool = False
    calib_cache: Optional[Path] = None
    shapes: Dict[str, List[int]] = field(default_factory=dict)
    input: Input = field(default_factory=Input)
    extra: Optional[Input] = None
    layers: List[Input] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.dla_core is not None and self.dla_core < 0:
            raise ValueError("dla_core must be >= 0")


def _yaml(tmp_path, text, name="build.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_or_overrides():
    assert load_config(Build) == Build()


def test_yaml_then_overrides_with_nested_and_typed_values(tmp_path):
    path = _yaml(tmp_path, """
precision: int8
device: dla
dla_core: 1
calib_cache: out/model.calib
shapes: {images: [1, 3, 224, 224]}
input:
  size: 320
  names: [images]
layers:
  - {size: 1}
  - {size: 2}
""")
    cfg = load_config(Build, path, ["input.size=256", "workspace_gb=1e-3", "verbose=true", "extra.size=8"])
    assert cfg.precision == "int8"
    assert cfg.device is Device.DLA
    assert cfg.dla_core == 1
    assert cfg.calib_cache == Path("out/model.calib")
    assert cfg.shapes == {"images": [1, 3, 224, 224]}
    assert cfg.input == Input(size=256, names=["images"])
    assert cfg.workspace_gb == 0.001  # PyYAML reads 1e-3 as a string; a float field accepts it
    assert cfg.verbose is True
    assert cfg.extra == Input(size=8)
    assert [layer.size for layer in cfg.layers] == [1, 2]


def test_tuple_fields_convert_each_item():
    cfg = from_dict(Build, {"input": {"mean": [0.5, 0.5, 1]}})
    assert cfg.input.mean == (0.5, 0.5, 1.0)
    assert all(isinstance(v, float) for v in cfg.input.mean)
    with pytest.raises(ConfigError, match=r"input.mean: expected 3 values, got 2"):
        from_dict(Build, {"input": {"mean": [0.5, 0.5]}})
    with pytest.raises(ConfigError, match=r"input.mean\[1\]: expected a number, got 'x'"):
        from_dict(Build, {"input": {"mean": [0.5, "x", 1.0]}})


def test_optional_accepts_null_and_its_type():
    assert from_dict(Build, {"dla_core": None}).dla_core is None
    assert from_dict(Build, {"calib_cache": None}).calib_cache is None
    with pytest.raises(ConfigError, match="dla_core: expected an integer, got 'one'"):
        from_dict(Build, {"dla_core": "one"})


def test_unknown_top_level_key_suggests_the_close_one():
    with pytest.raises(UnknownNameError) as info:
        load_config(Build, overrides=["precison=int8"])
    err = info.value
    assert "unknown configuration key 'precison'; did you mean 'precision'?" in err.message
    assert "valid keys here:" in err.hint and "precision" in err.hint
    assert isinstance(err, ConfigError)


def test_unknown_nested_key_is_named_with_its_path(tmp_path):
    path = _yaml(tmp_path, "input:\n  sise: 3\n")
    with pytest.raises(UnknownNameError, match=r"unknown configuration key 'input.sise'; did you mean 'input.size'\?"):
        load_config(Build, path)


def test_unknown_key_inside_optional_dataclass_keeps_the_suggestion():
    with pytest.raises(UnknownNameError, match=r"'extra.sise'; did you mean 'extra.size'\?"):
        from_dict(Build, {"extra": {"sise": 3}})


def test_unknown_key_in_list_of_dataclasses():
    with pytest.raises(UnknownNameError, match=r"'layers\[1\].sise'"):
        from_dict(Build, {"layers": [{"size": 1}, {"sise": 2}]})


def test_literal_rejects_other_values():
    with pytest.raises(ConfigError, match=r"precision: 'int4' is not one of 'fp32', 'fp16', 'int8'"):
        load_config(Build, overrides=["precision=int4"])


def test_enum_rejects_other_values_with_suggestion():
    with pytest.raises(UnknownNameError, match=r"did you mean 'dla'\?"):
        load_config(Build, overrides=["device=dlaa"])


@pytest.mark.parametrize("override, message", [
    ("verbose=maybe", "verbose: expected true or false, got 'maybe'"),
    ("workspace_gb=lots", "workspace_gb: expected a number, got 'lots'"),
    ("input.size=2.5", "input.size: expected an integer, got 2.5"),
    ("input.size=true", "input.size: expected an integer, got True"),
    ("calib_cache=[1]", "calib_cache: expected a path, got [1]"),
    ("shapes=3", "shapes: expected a mapping, got 3"),
    ("input=3", "input: expected a mapping for Input, got 3"),
])
def test_wrong_types_are_named(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(Build, overrides=[override])
    assert message in info.value.message


def test_post_init_validation_becomes_config_error():
    with pytest.raises(ConfigError, match="dla_core must be >= 0"):
        load_config(Build, overrides=["dla_core=-1"])


@pytest.mark.parametrize("text, keys, value", [
    ("a=1", ["a"], 1),
    ("a.b.c=x y", ["a", "b", "c"], "x y"),
    ("list=[1, 2]", ["list"], [1, 2]),
    ("s=", ["s"], ""),
    ("path=a=b", ["path"], "a=b"),
    ("bad=[unclosed", ["bad"], "[unclosed"),
])
def test_parse_override(text, keys, value):
    assert parse_override(text) == (keys, value)


@pytest.mark.parametrize("text", ["novalue", "=3"])
def test_parse_override_rejects_malformed(text):
    with pytest.raises(ConfigError, match="--set"):
        parse_override(text)


def test_malformed_yaml_names_the_line(tmp_path):
    path = _yaml(tmp_path, "precision: fp16\ninput:\n  size: [1, 2\nverbose: true\n")
    with pytest.raises(ConfigError) as info:
        read_yaml(path)
    message = info.value.message
    assert str(path) in message and "is not valid YAML at line" in message
    line = int(message.split("at line ")[1].split(",")[0])
    assert line in (3, 4)


def test_yaml_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="must hold a mapping of keys to values, not a list"):
        read_yaml(_yaml(tmp_path, "- a\n- b\n"))
    assert read_yaml(_yaml(tmp_path, "# only a comment\n", "empty.yaml")) == {}


def test_missing_and_binary_files_are_input_errors(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        load_config(Build, tmp_path / "nope.yaml")
    binary = tmp_path / "model.onnx"
    binary.write_bytes(b"\x08\xff\xfe\x00\x81binary")
    with pytest.raises(InputFileError, match="is not UTF-8 text"):
        load_config(Build, binary)


def test_overrides_do_not_modify_the_callers_base():
    base = {"input": {"size": 100}}
    cfg = load_config(Build, overrides=["input.size=7"], base=base)
    assert cfg.input.size == 7
    assert base == {"input": {"size": 100}}


def test_file_merges_over_base_and_overrides_win(tmp_path):
    path = _yaml(tmp_path, "input:\n  names: [x]\n")
    cfg = load_config(Build, path, ["precision=fp32"], base={"precision": "int8", "input": {"size": 64}})
    assert cfg.precision == "fp32" and cfg.input.size == 64 and cfg.input.names == ["x"]


def test_to_dict_round_trips():
    cfg = load_config(Build, overrides=["device=dla", "calib_cache=a/b.calib", "extra.size=3"])
    data = to_dict(cfg)
    assert data["device"] == "dla" and data["calib_cache"] == "a/b.calib" and data["input"]["mean"] == [
        0.485, 0.456, 0.406]
    assert from_dict(Build, data) == cfg


@dataclass
class _Checked:
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.high <= self.low:
            raise ValueError("band.high must be above band.low" if self.low >= 0 else "low must be >= 0")


@dataclass
class _Outer:
    band: _Checked = field(default_factory=_Checked)


def test_a_validation_message_names_its_section_once():
    # the message already says where (``band.high``): not prefixed again; one that does not say gets the prefix
    with pytest.raises(ConfigError) as err:
        from_dict(_Outer, {"band": {"low": 2.0, "high": 1.0}})
    assert str(err.value).startswith("band.high must be above band.low")
    with pytest.raises(ConfigError) as err:
        from_dict(_Outer, {"band": {"low": -1.0, "high": -2.0}})
    assert str(err.value).startswith("band: low must be >= 0")
