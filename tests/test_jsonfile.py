"""The strict JSON reader every file-from-others reader uses (issue 25: duplicate keys silently took the last value,
sidecars nested 100,000 deep were an internal error, NaN/Infinity flowed into preprocessing and events)."""

import json

import pytest

from jetforge.errors import InputFileError, ModelError
from jetforge.jsonfile import (MAX_DEPTH, ValueRefused, expect, expect_number, expect_texts, parse_json, read_json,
                               read_text)


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
    ('{"scale": 1e999}', "reads as infinity"),
    ('{"mean": [-1e400]}', "reads as infinity"),
    ('{"labels": ["\\ud800"]}', "lone UTF-16 surrogate"),
    ('{"\\udcff": 1}', "lone UTF-16 surrogate"),
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


def test_a_surrogate_pair_and_the_largest_float_still_read():
    assert parse_json('{"a": "\\ud83d\\ude00", "b": 1.7e308}', "x") == {"a": "\U0001f600", "b": 1.7e308}


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"cat\x00dog\n", b"\xff\xfe\x00a"])
def test_a_binary_file_read_as_text_is_one_line(tmp_path, data):
    """Label and list files: an image or model named by mistake is refused, never a UnicodeDecodeError (exit 2)."""
    path = tmp_path / "labels.txt"
    path.write_bytes(data)
    with pytest.raises(InputFileError) as err:
        read_text(path, "label file")
    line = err.value.one_line()
    assert str(path) in line and ("not UTF-8" in line or "NUL byte" in line) and "\n" not in line


@pytest.mark.parametrize("value, kind, words", [
    (True, int, "must be an integer, not a boolean"),
    (None, str, "must be a string, not null"),
    (["a"], str, "must be a string, not a list"),
    ("7", float, "must be a number, not a string"),
    (1.5, int, "must be an integer, not a number"),
])
def test_values_are_never_coerced(value, kind, words):
    """``format: true`` was read as format 1 and a nested label as the label "None"; each is refused instead."""
    with pytest.raises(ValueRefused, match=words):
        expect(value, kind, "field")
    assert expect(3, float, "f") == 3.0 and isinstance(expect(3, float, "f"), float)
    with pytest.raises(ValueRefused, match=r"labels\[1\] must be a string, not a list"):
        expect_texts(["a", ["b"]], "labels")
    with pytest.raises(ValueRefused, match="height is 1000000000; it must be at least 1 and at most 8192"):
        expect_number(10 ** 9, "height", 1, 8192, integer=True)
    with pytest.raises(ValueRefused, match="above 0"):
        expect_number(0.0, "scale", 0, low_open=True)
