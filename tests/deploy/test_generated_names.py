"""jetforge.deploy.generated_names: each format's rule, checked against the program that reads that format.

Shell words go through a real ``sh``; C string literals through g++ (when installed) and a run of the
program; paths through the file system, symbolic links included.  The end-to-end attacks through
``export-config`` are in test_export_config_names.py.
"""

import os
import shutil
import subprocess

import pytest

from jetforge.deploy import generated_names as gn
from jetforge.errors import ConfigError


def test_shell_words_reach_the_program_unchanged():
    words = ["$(id)", "`id`", "a'b", 'a"b', "a;b", "a b", "*", "~", "-n", "a\\b", "$HOME", "日本", "", "!x", "a&b|c"]
    result = subprocess.run(["sh", "-c", "printf '%s\\n' " + gn.shell_command(words)], capture_output=True,
                            check=True, timeout=30)
    assert result.stdout.decode("utf-8").split("\n")[:-1] == words
    for bad in ("a\nb", "a\rb", "a\x00b", "\ud800"):
        with pytest.raises(ConfigError, match="holds"):
            gn.shell_command(["ok", bad])


def test_tensor_names_for_scripts_and_sources():
    for good in ("input", "detection_boxes:0", "StatefulPartitionedCall/model/logits", "input.1", "onnx::Gemm_0", "a-b"):
        assert gn.tensor_name(good, "input", "x") == good
    for bad in ("", "a b", "a;b", "a,b", "a'b", 'a"b', "a\\b", "a$b", "a`b", "a\nb", "a??/", "é", "a\x00"):
        with pytest.raises(gn.GeneratedNameError, match="rename the tensor"):
            gn.tensor_name(bad, "input", "x")


def test_folder_names():
    for good in ("a", "my-model.v2", "A_1", "1x", "_x", "x" * 243):
        assert gn.folder_name(good, "--name", ("_postprocess",)) == good
    for bad in ("", ".", "..", ".x", "-x", "a/b", "a\\b", "../x", "/x", "a b", "é", "a\nb", "x" * 244):
        with pytest.raises(gn.GeneratedNameError, match="letters, digits"):
            gn.folder_name(bad, "--name", ("_postprocess",))
    assert gn.folder_name("x" * 255) == "x" * 255  # without suffixes, NAME_MAX itself
    with pytest.raises(gn.GeneratedNameError, match="256 bytes"):
        gn.folder_name("x" * 256)


def test_inside_refuses_every_way_out(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    os.symlink(str(tmp_path), str(root / "link"))  # a link inside the root that points above it
    assert gn.inside(root, "sub", "a.txt") == root / "sub" / "a.txt"
    assert gn.inside(root, "a..b") == root / "a..b"
    for parts in (("..",), ("../x",), ("sub", "..", "..", "x"), (str(tmp_path / "x"),), ("link", "x"), ("/etc",)):
        with pytest.raises(gn.GeneratedNameError, match="outside the output folder"):
            gn.inside(root, *parts)


def test_text_problems_name_the_character():
    assert gn.text_problem("café 日本 a;b\"\\") is None
    assert gn.text_problem("a\tb") == "a control character (U+0009)"
    assert gn.text_problem("a\x85") == "a control character (U+0085)"  # C1 (NEL)
    assert gn.text_problem("a\u2028") == "a line separator (U+2028)"
    assert "not UTF-8" in gn.text_problem("\udc80")
    assert gn.shown("x" * 100) == repr("x" * 40) + "..."


def test_c_strings_and_comments_compile_to_what_was_meant(tmp_path):
    texts = ['"); system("id"); ("', "back\\slash", "??/", "??=", "tab\there", "nul\x00", "caf\u00e9", "1\u00e91"]
    assert gn.c_string("??/") == '"\\?\\?/"'
    assert gn.c_comment("a\\b??/c\r\n*/ 日本") == "a_b__/c__*/ __"
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the C string literals are not compiled here")
    rows = "\n".join("    {%s, sizeof(%s) - 1}," % (gn.c_string(t), gn.c_string(t)) for t in texts)
    source = tmp_path / "strings.cpp"
    source.write_text("// %s\n#include <cstdio>\nstruct S { const char *p; unsigned long n; };\n"
                      "const S kTexts[] = {\n%s\n};\nint main() {\n    for (const S &s : kTexts) {\n"
                      "        std::fwrite(s.p, 1, s.n, stdout);\n        std::fputc(0x1e, stdout);\n    }\n}\n"
                      % (gn.c_comment("model ??/ \\"), rows), encoding="utf-8")
    exe = tmp_path / "strings"
    subprocess.run(["g++", "-std=c++14", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(exe)], check=True,
                   capture_output=True, timeout=120)
    printed = subprocess.run([str(exe)], check=True, capture_output=True, timeout=30).stdout
    assert printed.split(b"\x1e")[:-1] == [t.encode("utf-8") for t in texts]
    with pytest.raises(gn.GeneratedNameError, match="surrogate"):
        gn.c_string("\ud800")
