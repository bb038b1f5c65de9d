"""The strict JSON reader every file-from-others reader uses (issue 25: duplicate keys silently took the last value,
sidecars nested 100,000 deep were an internal error, NaN/Infinity flowed into preprocessing and events)."""

import json

import pytest

from jetforge.errors import InputFileError, ModelError
from jetforge.jsonfile import MAX_DEPTH, parse_json, read_json


def test_plain_json_reads_as_json_does():
    text = '{"a": [1, 2.5, {"b": null}], "c": "\\u00e9", "d": true}'
    assert parse_json(text, "x") == json.loads(text)


@pytest.mark.parametrize("text, words", [
    ('{"mean": 1, "mean": 2}', "appears twice"),
    ('{"a": {"k": 1, "k": 1}}', "appears twice"),
    ('{"scale": NaN}', "NaN"),
    ('{"scale": Infinity}', "Infinity"),
    ('{"scale": -Infinity}', "-Infinity"),
    ("[" * 100000 + "]" * 100000, "more than %d deep" % MAX_DEPTH),
    ('{"a": 1', "not valid JSON"),
    ('{"a": 1' + "0" * 5000 + "}", "cannot convert"),
])
def test_what_json_accepts_and_no_file_of_ours_holds_is_one_line(text, words):
    with pytest.raises(ModelError) as err:
        parse_json(text, "sidecar m.onnx.json", ModelError, hint="re-export the model")
    line = err.value.one_line()
    assert words in line and line.startswith("sidecar m.onnx.json") and "(fix: re-export" in line and "\n" not in line


def test_brackets_inside_strings_do_not_count_as_depth():
    text = json.dumps({"label": "[" * 500})
    assert parse_json(text, "x") == {"label": "[" * 500}


def test_errors_never_quote_the_file(tmp_path):
    path = tmp_path / "creds.json"
    path.write_text('{"password": "Hunter2Sekr1t", "password": "Hunter2Sekr1t", "x": ')
    with pytest.raises(InputFileError) as err:
        read_json(path, "sidecar")
    assert "Hunter2" not in err.value.one_line()
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputFileError, match="not UTF-8"):
        read_json(path, "sidecar")


def test_a_hostile_sidecar_is_refused_by_the_model_reader(tmp_path):
    from jetforge.runtime.sidecar import read_sidecar

    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    for text in ('{"task": "classify", "task": "detect"}', '{"task": "classify", "preprocess": {"mean": [NaN]}}',
                 "[" * 100000 + "]" * 100000):
        (tmp_path / "m.onnx.json").write_text(text)
        with pytest.raises(ModelError):
            read_sidecar(model)
