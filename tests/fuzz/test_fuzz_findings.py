"""The inputs the parser fuzzers found, kept as plain tests named after what they protect.

Each input raised something other than a JetforgeError (or was parsed into a wrong structure,
or took minutes) before its fix; each now ends in one clear error naming the problem.  The inputs
go through the same public entry points as the fuzzers (parser_fuzz.PUBLIC).
"""

import json

import pytest

import parser_fuzz
from jetforge.errors import ConfigError, EngineBuildError, JetforgeError, ModelError, TargetError
from parser_fuzz import public


# ---- tegrastats ---------------------------------------------------------------------------------------
def test_tegrastats_line_with_a_5000_digit_number_is_not_a_sample():
    # int() of more than 4300 digits raises ValueError; the monitor thread would have died on such a line
    parse_line = public("tegrastats_line")
    assert parse_line("RAM %s/3964MB SWAP 5/1982MB" % ("9" * 5000)) is None
    assert parse_line("RAM 534/3964MB VDD_IN %s/1/1" % ("9" * 400)) is None  # would be an infinite power
    sample = parse_line(parser_fuzz.TEGRASTATS_SEEDS[1])
    assert sample.ram_used_mb == 6334 and sample.rails["VDD_IN"].current_mw == 5299.0  # real lines still parse


@pytest.mark.parametrize("line", ["RAM 0/0MB:GR3D_FREQ 0%@[0 0]", "RAM 0/0MB:GR3D_FREQ 0%@[0\r0]"])
def test_tegrastats_gpu_frequencies_not_separated_by_commas_are_no_frequency(line):
    # found by the long fuzz run on the H200 host: "[0 0]" reached int("0 0") (ValueError) in parse_line
    sample = public("tegrastats_line")(line)
    assert sample.ram_used_mb == 0 and sample.gpu_load == 0 and sample.gpu_freq_mhz == []  # no frequency read
    assert public("tegrastats_line")("RAM 1/2MB GR3D_FREQ 7%@[305, 306]").gpu_freq_mhz == [305, 306]


# ---- YAML: target profiles and configurations ----------------------------------------------------------
def test_target_profile_that_is_not_utf8_is_one_target_error(tmp_path):
    path = tmp_path / "orin-nx-16gb.yaml"
    path.write_bytes(b"\xa3 name: orin-nx-16gb\n")  # UnicodeDecodeError escaped before
    with pytest.raises(TargetError) as err:
        public("target_profile")(path)
    assert "not UTF-8" in err.value.one_line() and "byte 0" in err.value.one_line()


@pytest.mark.parametrize("text", ["[" * 3000 + "]" * 3000, "{a: " * 2000 + "1" + "}" * 2000])
def test_deeply_nested_yaml_is_refused_before_yaml_reads_it(tmp_path, text):
    # PyYAML's scanner takes time growing with the square of the flow depth: 3000 '[' took > 20 s here,
    # then a RecursionError; both readers now refuse the text up front
    profile = tmp_path / "orin-nx-16gb.yaml"
    profile.write_text(text)
    with pytest.raises(TargetError) as err:
        public("target_profile")(profile)
    assert "deep" in err.value.one_line()
    with pytest.raises(ConfigError) as err:
        public("build_options")(profile)
    assert "deep" in err.value.one_line()


def test_yaml_nested_in_block_style_past_the_recursion_limit_is_one_config_error(tmp_path):
    path = tmp_path / "build.yaml"
    path.write_text("- " * 1500 + "1\n")  # RecursionError inside yaml.safe_load escaped before
    with pytest.raises(ConfigError):
        public("build_options")(path)


def test_yaml_number_of_5000_digits_is_one_clear_error(tmp_path):
    # PyYAML converts it with int(), which refuses more than 4300 digits with a ValueError (found by the long run)
    path = tmp_path / "orin-nx-16gb.yaml"
    path.write_text("9" * 5000 + "\n")
    with pytest.raises(ConfigError) as err:
        public("build_options")(path)
    assert "cannot convert" in err.value.one_line()
    path.write_text("name: orin-nx-16gb\nkind: %s\n" % ("1" * 5000))
    with pytest.raises(TargetError) as err:
        public("target_profile")(path)
    assert "cannot convert" in err.value.one_line()


def test_yaml_escape_past_the_last_unicode_character_is_one_clear_error(tmp_path):
    # PyYAML's chr() of "\U80000000" raised OverflowError (of "\U00110000": ValueError), found on the H200 host
    path = tmp_path / "orin-nx-16gb.yaml"
    for escape in ("\\U80000000", "\\U00110000"):
        path.write_text('precision: "%s"\n' % escape)
        with pytest.raises(ConfigError) as err:
            public("build_options")(path)
        assert "cannot convert" in err.value.one_line()
        path.write_text('name: orin-nx-16gb\nkind: "%s"\n' % escape)
        with pytest.raises(TargetError) as err:
            public("target_profile")(path)
        assert "cannot convert" in err.value.one_line()


def test_set_override_with_such_an_escape_stays_text_for_the_type_check():
    from jetforge.config import parse_override

    assert parse_override('name="\\U80000000"') == (["name"], '"\\U80000000"')


def test_flow_nesting_real_configurations_use_is_accepted(tmp_path):
    path = tmp_path / "build.yaml"
    path.write_text("profiles: [{x: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}]\n")
    options = public("build_options")(path)
    assert options.profiles[0]["x"].max == [4, 3, 8, 8]


# ---- sidecars --------------------------------------------------------------------------------------------
def _write_sidecar(tmp_path, edit):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"model")
    seed = parser_fuzz._sidecar_seeds()[1]
    seed["content_sha256"] = ""
    edit(seed)
    (tmp_path / "model.onnx.json").write_text(json.dumps(seed))
    return model


@pytest.mark.parametrize("shape", [[[3]], [1.5, 3], [True, 3], "abc", None, {"a": 1}])
def test_sidecar_shape_that_is_not_sizes_or_names_is_refused(tmp_path, shape):
    # [[3]] and [1.5] were read as shapes and reached the builder; "abc" became ['a', 'b', 'c']
    model = _write_sidecar(tmp_path, lambda d: d["inputs"][0].update(shape=shape))
    with pytest.raises(ModelError) as err:
        public("model_sidecar")(model)
    assert "malformed" in err.value.one_line()


@pytest.mark.parametrize("edit", [
    lambda d: d.update(format=float("inf")),     # int(inf): OverflowError escaped
    lambda d: d.update(preprocess=[1]),          # from_dict of a list: AttributeError escaped
    lambda d: d.update(produced_by=["ab"]),      # dict(["ab"]) == {"a": "b"} was accepted
    lambda d: d.update(labels="person"),         # became ['p', 'e', 'r', ...]
    lambda d: d.update(extra=[["k", "v"]]),
])
def test_sidecar_fields_of_the_wrong_type_are_one_clear_error(tmp_path, edit):
    model = _write_sidecar(tmp_path, edit)
    with pytest.raises(JetforgeError) as err:
        public("model_sidecar")(model)
    assert err.value.one_line().strip()


@pytest.mark.parametrize("field,value", [("int8_source", [""]), ("notes", "one note"), ("build_seconds", "1"),
                                         ("source_onnx", {"path": [""]}), ("plan", ["x"]), ("format", float("inf"))])
def test_engine_sidecar_fields_of_the_wrong_type_are_refused(tmp_path, field, value):
    target = parser_fuzz.make_target("engine_sidecar", tmp_path)
    valid = _engine_seed(tmp_path)
    assert target.parse(json.dumps(valid).encode()).target == "orin-nx-16gb"  # the seed itself parses
    valid[field] = value
    with pytest.raises(ModelError):
        target.parse(json.dumps(valid).encode())


def _engine_seed(tmp_path):
    from jetforge.runtime.tensorrt.engine_sidecar import EngineSidecar
    from jetforge.runtime.sidecar import TensorSpec

    return EngineSidecar(tensorrt_version="10.3.0", target="orin-nx-16gb", precision="fp16", device="gpu",
                         dla_core=None, inputs=[TensorSpec("x", [1, 3, 8, 8])], outputs=[TensorSpec("y", [1, 2])],
                         source_onnx={"path": "m.onnx", "sha256": "0" * 64}).to_dict()


# ---- the engine inspector's JSON ---------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"Layers": {"a": 1}}', '{"Layers": [null]}',
                                  '{"Bindings": 3}', "[" * 100000 + "]" * 100000])
def test_inspector_output_of_another_shape_is_one_build_error(text):
    # json.loads errors, AttributeError ('list' has no 'get') and TypeError escaped after a finished build
    with pytest.raises(EngineBuildError):
        public("inspector_json")(text)


def test_inspector_layer_with_odd_tensor_lists_keeps_what_it_can():
    parsed = public("inspector_json")(json.dumps({"Layers": [
        {"Name": "conv", "Inputs": None, "Outputs": [{"Format/Datatype": ["x"]}, {"Format/Datatype": "Int8 NCHW"}]},
        {"Name": "{ForeignNode[dla]}", "LayerType": "DLA"}], "Bindings": []}))
    assert [l["device"] for l in parsed["layers"]] == ["GPU", "DLA"]
    assert parsed["layers"][0]["precisions"] == ["Int8 NCHW"] and parsed["summary"] == {"layers": 2, "dla": 1, "gpu": 1}


# ---- bundle manifests -------------------------------------------------------------------------------------------
@pytest.fixture
def manifest_target(tmp_path):
    return parser_fuzz.make_target("bundle_manifest", tmp_path)


def _tampered(tmp_path, edit):
    from jetforge.deploy.bundle import Manifest

    data = json.loads((tmp_path / "cam" / "manifest.json").read_text())
    edit(data)
    try:
        data["bundle_hash"] = Manifest.from_dict(data).compute_hash()  # as an attacker would
    except JetforgeError:
        pass
    return json.dumps(data).encode()


def test_manifest_path_with_a_lone_surrogate_is_reported_not_crashed(manifest_target, tmp_path):
    # os.lstat('\ud800') raised UnicodeEncodeError out of `bundle verify`; the strict JSON reader now refuses a lone
    # surrogate anywhere in a file before any field is looked at
    report, manifest = manifest_target.parse(_tampered(tmp_path, lambda d: d["files"][0].update(path="\ud800x")))
    assert not report.ok and any("lone UTF-16 surrogate" in p for p in report.problems())


@pytest.mark.parametrize("edit", [lambda d: d["files"][0].update(bytes=float("inf")),       # OverflowError
                                  lambda d: d["prepared"][0].update(int8_source=["cache"]),  # a list kept as str
                                  # dict([[None, None]]) == {None: None}: found by the long run on the H200 host
                                  lambda d: d.update(build_options=[[None, None]]),
                                  lambda d: d.update(model=[["task", "classify"]]),
                                  lambda d: d["targets"].__setitem__(0, [["name", "orin-nx-16gb"]])])
def test_manifest_field_of_the_wrong_type_is_one_bundle_error(manifest_target, tmp_path, edit):
    report, manifest = manifest_target.parse(_tampered(tmp_path, edit))
    assert manifest is None and not report.ok
    # Infinity is refused by the strict JSON reader before any field is looked at; the rest by the field checks
    assert any("wrong type" in p or "not a number JSON allows" in p for p in report.problems())


# ---- video source URIs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("uri", ["rtsp://[::1", "http://[", "A://["])
def test_video_source_with_an_unclosed_ipv6_bracket_is_one_config_error(uri):
    with pytest.raises(ConfigError) as err:  # urlparse's ValueError escaped
        public("video_source")(uri)
    assert "IPv6" in err.value.one_line()


@pytest.mark.parametrize("uri,kind", [("\u00b2", "file"), ("\u0663", "file"), ("12", "v4l2")])
def test_unicode_digits_are_not_camera_indexes(uri, kind):
    # "²".isdigit() is True: it became camera "²", and int("²") failed when the camera was opened
    assert public("video_source")(uri).kind == kind


def test_video_source_path_longer_than_the_file_system_allows_is_one_clear_error():
    # Path.is_dir() raised OSError ENAMETOOLONG out of the URI parser (found by the long run)
    with pytest.raises(JetforgeError) as err:
        public("video_source")("9" * 5000 + "clip.mp4")
    assert "cannot be a file or folder" in err.value.one_line()


@pytest.mark.parametrize("uri", ["v4l2:\u00b2", "V4L2:\u0660", "v4l2://\u0663"])
def test_v4l2_camera_index_in_unicode_digits_is_refused(uri):
    # "v4l2:²" was a camera "²" whose int() failed when the capture opened (found by the long run)
    with pytest.raises(ConfigError):
        public("video_source")(uri)
    assert public("video_source")("v4l2://1").location == "1"


def test_csi_sensor_in_unicode_digits_is_refused():
    with pytest.raises(ConfigError):
        public("video_source")("csi://\u0663")
    assert public("video_source")("csi://1").location == "1"


def test_the_invariant_rejects_a_parser_that_raises_something_else():
    # the harness itself: a stray exception is a failure, a JetforgeError is an outcome
    def bad(data):
        raise ValueError("boom")

    target = parser_fuzz.ParserTarget("bad", bad, lambda d, r: None, None)
    with pytest.raises(ValueError):
        parser_fuzz.run_one(target, b"")
    target = parser_fuzz.ParserTarget("ok", lambda d: (_ for _ in ()).throw(ModelError("clear")), None, None)
    assert parser_fuzz.run_one(target, b"") == "error"
