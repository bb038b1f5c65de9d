"""The GLib key-file reader and the documented nvinfer / deepstream-app key tables.

The reader must accept what GLib accepts and refuse what it refuses; each case names the GLib rule
(docs.gtk.org/glib/struct.KeyFile.html, gkeyfile.c) and is also given to the real GLib parser
(libglib-2.0 through ctypes, tests/deploy/glib_keyfile.py; skipped where GLib is absent).
configparser is shown to differ on the same inputs, which is why it is not used.
"""

import configparser

import pytest

from jetforge.deploy.deepstream.keys import NVINFER_PROPERTY, validate_deepstream_app, validate_nvinfer
from jetforge.deploy.keyfile import KeyFileError, escape_value, parse_keyfile, read_keyfile, render_keyfile, string_value
from jetforge.errors import ConfigError

from glib_keyfile import GLibError, GLibKeyFile  # noqa: E402  (tests/deploy is on sys.path under pytest)

GLIB_EXAMPLE = """# this is just an example
# there can be comments before the first group

[First Group]

Name=Key File Example\\tthis value shows\\nescaping

# localized strings are stored in multiple key-value pairs
Welcome=Hello
Welcome[de]=Hallo
Welcome[fr_FR]=Bonjour

[Another Group]

Numbers=2;20;-200;0

Booleans=true;false;true;true
"""


def test_the_glib_documentation_example_reads_as_documented():
    kf = parse_keyfile(GLIB_EXAMPLE)
    assert list(kf.groups) == ["First Group", "Another Group"]
    assert kf.get_string("First Group", "Name") == "Key File Example\tthis value shows\nescaping"
    assert kf.get_string("First Group", "Welcome[de]") == "Hallo"
    assert kf.get_integer_list("Another Group", "Numbers") == [2, 20, -200, 0]
    assert [v == "true" for v in kf.get_string_list("Another Group", "Booleans")] == [True, False, True, True]
    with pytest.raises(KeyFileError, match="boolean"):
        kf.get_boolean("Another Group", "Booleans")  # a list is not one boolean


REFUSED = [
    ("key=1\n[g]\n", "does not start with a group"),              # pairs only inside a group
    ("[g]\njust words\n", "not a key-value pair, group, or comment"),
    ("[g]\n=1\n", "not a key-value pair"),                       # the key must not be empty
    ("[g[x]]\n", "not a key-value pair"),                         # text after the first ] is not a header
    ("[g[x]\n", "invalid group name"),                             # a group name holds no bracket
    ("[g]\nk]x=1\n", "invalid key name"),
    ("[g]\nk[de=1\n", "locale suffix"),
    ("[g]\n; c\n", "not a key-value pair"),                      # ';' is no comment in GLib
]


@pytest.mark.parametrize("text, match", REFUSED)
def test_lines_glib_refuses(text, match):
    with pytest.raises(KeyFileError, match=match):
        parse_keyfile(text)


@pytest.mark.parametrize("text", [text for text, _ in REFUSED])
def test_the_real_glib_parser_refuses_the_same_lines(text):
    with pytest.raises(GLibError):
        GLibKeyFile(text.encode("utf-8"))


@pytest.mark.parametrize("text", [
    GLIB_EXAMPLE,
    "[g]\nKey = 1\nkey=2\nkey=3\n  # indented comment\n[g]\nother= x \n",
    "[g]\r\nk=v\r\n[h]  \nx=\\sy\\\\z\nl=a\\;b;c;\nbad=a\\qb\nu=日本 é\n",
])
def test_the_reader_agrees_with_the_real_glib_parser(text):
    ours = parse_keyfile(text)
    with GLibKeyFile(text.encode("utf-8")) as kf:
        assert kf.groups() == list(ours.groups)
        for group, entries in ours.groups.items():
            # g_key_file_get_keys lists a repeated key once per line and leaves locale variants out
            assert list(dict.fromkeys(kf.keys(group))) == [k for k in entries if "[" not in k]
            for key in [k for k in entries if "[" not in k]:  # GLib looks locale variants up by locale
                assert kf.value(group, key) == ours.raw(group, key)
                try:
                    want = ours.get_string(group, key)
                except KeyFileError:
                    with pytest.raises(GLibError):
                        kf.string(group, key)
                else:
                    assert kf.string(group, key) == want


def test_escaped_values_read_back_through_the_real_glib_parser():
    values = [" lead", "trail ", "back\\slash", "semi;colon", "tab\there", "line\nbreak", "#hash", "[g]", "a=b", "日本",
              "\\s", "\\;"]
    body = "".join("k%d=%s\nl%d=%s;x;\n" % (i, escape_value(v), i, escape_value(v, in_list=True))
                   for i, v in enumerate(values))
    with GLibKeyFile(("[g]\n" + body).encode("utf-8")) as kf:
        for i, value in enumerate(values):
            assert kf.string("g", "k%d" % i) == value
            assert kf.string_list("g", "l%d" % i) == [value, "x"]
    assert string_value(" a\\b ", "v", "hint") == "\\sa\\\\b "
    for bad in ("a\nb", "a\rb", "a\x00b", "a\tb", "\ud800"):  # string_value refuses what escape_value would encode
        with pytest.raises(ConfigError, match="holds"):
            string_value(bad, "v", "hint")


def test_render_refuses_a_value_that_would_add_lines():
    assert render_keyfile([("g", [("k", "v")])], "head\r\x00er\nline 2") == "# head??er\n# line 2\n\n[g]\nk=v\n"
    for groups in ([("g", [("k", "v\n[evil]")])], [("g", [("k", "v\rx")])], [("g", [("k\nx", "v")])],
                   [("g]\n[h", [("k", "v")])], [("g", [("k", "v\x00")])]):
        with pytest.raises(KeyFileError):
            render_keyfile(groups)


def test_glib_rules_that_configparser_does_not_share():
    text = "[g]\nKey = 1\nkey=2\nkey=3\n  # indented comment\n[g]\nother= x \n"
    kf = parse_keyfile(text)
    # case-sensitive keys, the last of a repeated key wins, a repeated group is merged, spaces around '=' dropped
    assert kf.groups["g"] == {"Key": "1", "key": "3", "other": "x "}
    with pytest.raises(configparser.Error):  # configparser refuses the repeated key and the repeated group
        configparser.ConfigParser().read_string(text)
    # configparser takes ';' comments and 'key: value'; GLib does not
    assert configparser.ConfigParser().read_string("[g]\n; c\nk: v\n") is None
    with pytest.raises(KeyFileError):
        parse_keyfile("[g]\n; c\n")
    with pytest.raises(KeyFileError):
        parse_keyfile("[g]\nk: v\n")


def test_typed_values_as_glib_reads_them():
    kf = parse_keyfile("[g]\ni=42 \nneg=-7\nbig=2147483648\nd=1e-3\nh=0x1.8p1\nbad=1.5x\nb1=1\nb0=false\n"
                       "bT=True\nl=a\\;b;c;\ns=\\sx\\\\y\nesc=a\\qb\nend=a\\\n")
    assert kf.get_integer("g", "i") == 42 and kf.get_integer("g", "neg") == -7  # strtol; trailing space allowed
    with pytest.raises(KeyFileError, match="out of range"):
        kf.get_integer("g", "big")
    assert kf.get_double("g", "d") == 1e-3 and kf.get_double("g", "h") == 3.0  # g_ascii_strtod reads hex floats
    with pytest.raises(KeyFileError, match="float"):
        kf.get_double("g", "bad")
    with pytest.raises(KeyFileError, match="number"):
        kf.get_integer("g", "d")
    assert kf.get_boolean("g", "b1") is True and kf.get_boolean("g", "b0") is False
    with pytest.raises(KeyFileError, match="boolean"):
        kf.get_boolean("g", "bT")  # only lower-case true/false (and 1/0)
    assert kf.get_string_list("g", "l") == ["a;b", "c"]  # escaped separator kept, trailing ';' ends the list
    assert kf.get_string("g", "s") == " x\\y"
    with pytest.raises(KeyFileError, match="invalid escape"):
        kf.get_string("g", "esc")
    with pytest.raises(KeyFileError, match="end of line"):
        kf.get_string("g", "end")
    with pytest.raises(KeyFileError, match="invalid escape"):
        kf.get_string("g", "l")  # '\;' is an escape only inside a list


def test_escape_round_trip_and_encoding():
    value = " lead\ttab\nline\\back;semi"
    kf = parse_keyfile("[g]\nk=%s\nl=%s;x\n" % (escape_value(value), escape_value(value, in_list=True)))
    assert kf.get_string("g", "k") == value
    assert kf.get_string_list("g", "l") == [value, "x"]
    with pytest.raises(KeyFileError, match="not UTF-8"):
        read_keyfile(b"[g]\nk=\xff\n")


def test_nvinfer_validation_names_each_problem():
    good = parse_keyfile("[property]\nonnx-file=m.onnx\nbatch-size=4\nnetwork-mode=2\nnet-scale-factor=0.5\n"
                         "offsets=1;2;3\nenable-dla=1\n[class-attrs-all]\nnms-iou-threshold=0.5\n")
    assert validate_nvinfer(good) == []
    bad = parse_keyfile("[property]\nonnx-file=m.onnx\nbatch-sise=4\nnetwork-mode=5\nnet-scale-factor=abc\n"
                        "offsets=1;2;3;4;5\nenable-dla=yes\ninfer-dims=3;224\n[class-attrs-0]\nnms-iou-threshold=1.5\n"
                        "[classattrs]\n")
    problems = validate_nvinfer(bad)
    joined = "\n".join(problems)
    for expected in ("batch-sise is not a documented key", "network-mode=5 is not one of 0, 1, 2, 3",
                     "'abc' cannot be interpreted as a float", "offsets has 5 values", "'yes' cannot be interpreted "
                     "as a boolean", "infer-dims has 2 values", "nms-iou-threshold=1.5 is above", "[classattrs] is not"):
        assert expected in joined, expected
    assert len(problems) == 8
    assert "property" in validate_nvinfer(parse_keyfile("[other]\n"))[0]
    # every documented key has a type the checker knows
    assert {spec.type for spec in NVINFER_PROPERTY.values()} <= {"integer", "double", "boolean", "string",
                                                                 "integer list", "double list", "string list"}


def test_deepstream_app_validation():
    problems, notes = validate_deepstream_app(parse_keyfile(
        "[application]\nenable-perf-measurement=1\n[source0]\ntype=9\n[streammux]\nbatch-size=0\n"
        "[primary-gie]\nconfig-file=c.txt\nmystery=1\n[sink0]\ntype=1\n[tracker]\nenable=1\n"))
    assert "[source0] type=9 is not one of" in problems[0]
    assert "[streammux] batch-size=0 is below the documented minimum 1" in problems[1]
    assert len(problems) == 2
    assert "[primary-gie] mystery is not a documented key" in notes and "[tracker] is not a group jetforge checks" in notes
