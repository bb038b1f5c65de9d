"""Hostile names in `export-config`: nothing from a model or an option is executed, injected, or written outside --out.

Issue 25, holes (a) and (b).  Tensor names, labels and the model name come from the bundle's sidecar,
which may come from someone else; ``--name`` and ``--source`` come from the command line.  Each goes
into a file with its own syntax: a shell script (``build_engines.sh``), C++ source (the nvinfer
parsers), GLib key files (the DeepStream configs), protobuf text (``config.pbtxt``), labels files and
folder names.  Each test builds a real bundle (a tiny real ONNX graph with a real sidecar, through
``create_bundle``) whose names are the attack, runs the real CLI, and then runs what was generated
the way the README says to: ``sh build_engines.sh`` with a fake ``trtexec`` first on PATH, g++ on
the parser (against the stand-in DeepStream header of tests/deploy/fake_deepstream, driven by its
driver), the real GLib key-file parser (libglib-2.0 through ctypes), Triton's own model_config.proto
where tritonclient is installed.  Refusals must be exit 1 with one ``jetforge: error:`` line naming
the value, and must leave every folder as it was.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.bundle import create_bundle  # noqa: E402
from jetforge.deploy.keyfile import read_keyfile  # noqa: E402

from glib_keyfile import GLibKeyFile  # noqa: E402  (tests/deploy is on sys.path under pytest)

NX = "orin-nx-16gb"
FAKE_DS = Path(__file__).parent / "fake_deepstream"
PARSER = Path("parsers") / "nvdsinfer_jetforge_parsers.cpp"
NVINFER = "config_infer_primary_jetforge.txt"
APP = "deepstream_app_config.txt"


# ---- real tiny models and bundles ---------------------------------------------------------------------
def make_classifier(folder, input_name="x", output_name="y", labels=None, model_name="tiny", classes=8):
    """A tiny real classifier ending in logits (Conv-ReLU-pool-flatten) with these tensor names, and its sidecar."""
    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((classes, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", [input_name, "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], [output_name])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT,
                                                                            ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["N", classes])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    write_sidecar(path, ModelSidecar(
        task="classify", model_name=model_name, inputs=[TensorSpec(input_name, [-1, 3, 32, 32])],
        outputs=[TensorSpec(output_name, [-1, classes])], preprocess=Preprocess(height=32, width=32),
        labels=list(labels) if labels is not None else ["c%d" % i for i in range(classes)]))
    return path


def make_detector(folder, names=("box_encodings", "class_logits"), labels=("person",), spec_labels=("person",),
                  model_name="tinyssd"):
    """A tiny real SSD body (3 anchors on one 1x1 feature map) with raw box encodings and class logits."""
    from jetforge.vision.ssd import SSD_EXTRA_KEY, SSDSpec, ssd_anchor_layers
    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    spec = SSDSpec(layers=tuple(ssd_anchor_layers([(1, 1)])), image_size=(8, 8), labels=tuple(spec_labels))
    a, c = spec.num_anchors, spec.num_classes
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((a * 4, 3, 1, 1)).astype(np.float32), "wb"),
             numpy_helper.from_array(rng.standard_normal((a * c, 3, 1, 1)).astype(np.float32), "wl"),
             numpy_helper.from_array(np.array([0, a, 4], np.int64), "sb"),
             numpy_helper.from_array(np.array([0, a, c], np.int64), "sl")]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Conv", ["g", "wb"], ["b"]),
             helper.make_node("Conv", ["g", "wl"], ["l"]), helper.make_node("Reshape", ["b", "sb"], [names[0]]),
             helper.make_node("Reshape", ["l", "sl"], [names[1]])]
    graph = helper.make_graph(nodes, "tinyssd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info(names[0], TensorProto.FLOAT, ["N", a, 4]),
                               helper.make_tensor_value_info(names[1], TensorProto.FLOAT, ["N", a, c])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    write_sidecar(path, ModelSidecar(
        task="detect", model_name=model_name, inputs=[TensorSpec("x", [-1, 3, 8, 8])],
        outputs=[TensorSpec(names[0], [-1, a, 4]), TensorSpec(names[1], [-1, a, c])],
        preprocess=Preprocess(height=8, width=8, resize="stretch", color="bgr", scale=2 / 255.0, mean=(1.0,),
                              std=(1.0,)),
        labels=list(labels), extra={SSD_EXTRA_KEY: spec.to_dict()}))
    return path


def bundle_of(model):
    return create_bundle(model, model.parent.parent / "bundle", [NX], tensorrt_versions=["10.3.0"]).path


def classifier_bundle(tmp_path, **kw):
    return bundle_of(make_classifier(tmp_path / "src", **kw))


def detector_bundle(tmp_path, **kw):
    return bundle_of(make_detector(tmp_path / "src", **kw))


# ---- running things -------------------------------------------------------------------------------------
def run_cli(capsys, *argv):
    """(exit code, stdout, the one `jetforge: error:` line) of the real CLI; a refusal is exactly one line."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("jetforge: error:")]
    assert "Traceback" not in err, err
    if rc != 0:
        assert rc == 1 and len(err.strip().splitlines()) == 1 and len(errors) == 1, (rc, err)
    return rc, out, errors[0] if errors else ""


def tree(folder):
    """Every path under ``folder`` with its bytes (files) or None (folders): what must not change."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(Path(folder).rglob("*"))}


def fake_trtexec(folder, record):
    """A ``trtexec`` that records its working folder and then its argv, one per line, in ``record``."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "trtexec"
    exe.write_text('#!/bin/sh\npwd > "%s"\nprintf "%%s\\n" "$@" >> "%s"\n' % (record, record))
    exe.chmod(0o755)
    return folder


def run_build_script(out, tmp_path):
    """``sh build_engines.sh`` as the README says, with the fake trtexec first on PATH; returns (cwd, argv)."""
    record = tmp_path / "trtexec-argv.txt"
    env = dict(os.environ, PATH="%s:%s" % (fake_trtexec(tmp_path / "fakebin", record), os.environ["PATH"]))
    subprocess.run(["sh", str(out / "build_engines.sh")], check=True, env=env, cwd=str(tmp_path),
                   capture_output=True, timeout=60)
    lines = record.read_text().split("\n")[:-1]
    return lines[0], lines[1:]


def compile_parser(tmp_path, source, werror=True):
    """The generated parser with the fake DeepStream header and its driver, compiled as the tests do."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the generated C++ parser cannot be compiled here")
    exe = tmp_path / "driver"
    flags = ["-Wall", "-Wextra"] + (["-Werror"] if werror else [])
    subprocess.run(["g++", "-std=c++14", "-O0"] + flags + ["-I", str(FAKE_DS), str(source),
                    str(FAKE_DS / "driver.cpp"), "-o", str(exe)], check=True, capture_output=True, timeout=300)
    return exe


HOSTILE = {  # name -> what it would do where it is written unquoted / unescaped; {m} is the marker file
    "dollar": "in$(touch {m})", "backtick": "in`touch {m}`", "semicolon": "in; touch {m}",
    "single-quote": "in'; touch {m}; '", "double-quote": 'in"; touch {m}; "', "backslash": "in\\",
    "newline": "in\ntouch {m}", "carriage-return": "in\rtouch {m}", "nul": "in\x00x", "space": "in put",
    "comma": "in,put",  # trtexec's list separator in --minShapes
}


# ---- (a) the shell script ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_triton_build_script_refuses_shell_metacharacters_in_tensor_names(kind, tmp_path, capsys):
    marker = tmp_path / "injected"
    name = HOSTILE[kind].format(m=marker)
    bundle = classifier_bundle(tmp_path, input_name=name)
    out = tmp_path / "repo"
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", out)
    if (out / "build_engines.sh").exists():  # what the fix prevents: running the script as the README says
        run_build_script(out, tmp_path)
    assert not marker.exists(), "the tensor name ran as a command"
    assert rc == 1 and "input" in line and repr(name)[:20] in line and "rename the tensor" in line
    assert not out.exists()


def test_triton_build_script_passes_real_tensor_names_to_trtexec_as_single_words(tmp_path, capsys):
    name = "serving_default/input-1.image:0"  # '/', ':', '.', '-' and '_' are in real models' tensor names
    bundle = classifier_bundle(tmp_path, input_name=name, output_name="StatefulPartitionedCall/logits:0")
    out = tmp_path / "repo"
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", out, "--name", "my-model.v2")
    assert rc == 0, line
    cwd, argv = run_build_script(out, tmp_path)
    assert Path(cwd).resolve() == out.resolve()  # the script runs from its own folder, wherever it is called from
    assert argv == ["--onnx=onnx/my-model.v2.onnx", "--saveEngine=my-model.v2/1/model.plan",
                    "--minShapes=%s:1x3x32x32" % name, "--optShapes=%s:4x3x32x32" % name,
                    "--maxShapes=%s:8x3x32x32" % name, "--fp16"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "fakebin", "repo", "src", "trtexec-argv.txt"]


def test_triton_config_escapes_quotes_and_backslashes_in_tensor_names(tmp_path, capsys):
    # onnxruntime_onnx: the names go into config.pbtxt only, as protobuf text strings (escaped, not refused)
    from test_export_config import parse_pbtxt

    weird_in, weird_out = 'in"put\\x', "out put$(id)"
    bundle = classifier_bundle(tmp_path, input_name=weird_in, output_name=weird_out, labels=["a b", "c\"d"] +
                               ["\\e", "é", "日本", "f;g", "h??/", "i"])
    out = tmp_path / "repo"
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", out, "--platform", "onnxruntime_onnx")
    assert rc == 0, line
    assert (out / "tiny" / "labels.txt").read_text(encoding="utf-8").split("\n") == [
        "a b", "c\"d", "\\e", "é", "日本", "f;g", "h??/", "i", ""]
    config = parse_pbtxt(out / "tiny" / "config.pbtxt")
    assert [t.name for t in config.input] == [weird_in] and [t.name for t in config.output] == [weird_out]


# ---- (a) the C++ parser and the key files -----------------------------------------------------------------
HOSTILE_CPP = {
    "string-break": 'logits"); system("touch {m}"); (void)("',  # the finding's name
    "newline": "logits\n#include </etc/passwd>", "carriage-return": "logits\r#error injected",
    "backslash": "logits\\", "trigraph": "logits??/", "list-separator": "a;b", "nul": "logits\x00",
    "space": "log its",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_CPP))
def test_deepstream_parser_refuses_c_injection_in_output_names(kind, tmp_path, capsys):
    marker = tmp_path / "injected"
    name = HOSTILE_CPP[kind].format(m=marker)
    bundle = classifier_bundle(tmp_path, output_name=name)
    out = tmp_path / "ds"
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", out, "--precision", "fp16")
    if (out / PARSER).exists():  # what the fix prevents: the parser compiled and called once, as nvinfer does
        try:
            exe = compile_parser(tmp_path, out / PARSER, werror=False)
            (tmp_path / "l.bin").write_bytes(np.zeros(8, "<f4").tobytes())
            subprocess.run([str(exe), "softmax", name.split("\x00")[0], str(tmp_path / "l.bin"), "0.5"], timeout=60)
        except subprocess.CalledProcessError:
            pass  # did not compile: broken, but not executed
    assert not marker.exists(), "the output name ran as code in the generated parser"
    assert rc == 1 and "output" in line and repr(name)[:20] in line and "rename the tensor" in line
    assert not out.exists()


@pytest.mark.parametrize("which", [0, 1])
def test_deepstream_ssd_parser_refuses_c_injection_in_either_output_name(which, tmp_path, capsys):
    names = ["box_encodings", "class_logits"]
    names[which] = 'x"); system("touch %s"); (void)("' % (tmp_path / "injected")
    bundle = detector_bundle(tmp_path, names=tuple(names))
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", tmp_path / "ds")
    assert rc == 1 and "rename the tensor" in line and not (tmp_path / "ds").exists()


def test_deepstream_ssd_parser_with_real_layer_names_compiles_and_finds_them(tmp_path, capsys):
    names = ("Postprocessor/raw_box_encodings:0", "Postprocessor/convert-scores.logits:0")
    bundle = detector_bundle(tmp_path, names=names)
    out = tmp_path / "ds"
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", out)
    assert rc == 0, line
    with GLibKeyFile((out / NVINFER).read_bytes()) as kf:
        assert kf.string_list("property", "output-blob-names") == list(names)
    exe = compile_parser(tmp_path, out / PARSER)
    (tmp_path / "b.bin").write_bytes(np.zeros(12, "<f4").tobytes())
    (tmp_path / "l.bin").write_bytes(np.zeros(6, "<f4").tobytes())
    args = [str(exe), "ssd", names[0], str(tmp_path / "b.bin"), names[1], str(tmp_path / "l.bin"), "8", "8", "0.1"]
    assert subprocess.run(args, capture_output=True, timeout=60).returncode == 0  # both layers found by name
    args[2] = "box_encodings"
    assert subprocess.run(args, capture_output=True, timeout=60).returncode == 1  # and not by another name


def test_softmax_parser_keeps_every_label_byte_for_byte(tmp_path, capsys):
    # quotes, backslashes, trigraphs (g++ -std=c++14 reads '??/' as a backslash), UTF-8, printf directives
    labels = ['say "hi"', "back\\slash", "tri??/", "??=x", "café", "日本語", "%s%n", "{0}"]
    bundle = classifier_bundle(tmp_path, labels=labels, output_name="head/logits:0")
    out = tmp_path / "ds"
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", out, "--precision", "fp16")
    assert rc == 0, line
    exe = compile_parser(tmp_path, out / PARSER)  # -Wall -Wextra -Werror: no trigraph or comment warning either
    for i, label in enumerate(labels):
        logits = np.zeros(8, "<f4")
        logits[i] = 10.0
        (tmp_path / "l.bin").write_bytes(logits.tobytes())
        printed = subprocess.run([str(exe), "softmax", "head/logits:0", str(tmp_path / "l.bin"), "0.5"], check=True,
                                 capture_output=True, timeout=60).stdout.decode("utf-8")
        assert printed.rstrip("\n").split(" ", 2)[2] == label


def test_model_name_with_a_line_break_is_refused(tmp_path, capsys):
    # a carriage return ends a C++ line: '// model x\r#error injected' would be a preprocessor line
    bundle = classifier_bundle(tmp_path, model_name="x\r#error injected\n#include </etc/passwd>")
    for kind in ("deepstream", "triton"):
        rc, _, line = run_cli(capsys, "export-config", kind, bundle, "--out", tmp_path / kind)
        assert rc == 1 and "model name" in line and "\\r" in line and not (tmp_path / kind).exists(), kind


def test_odd_but_printable_model_names_stay_comments(tmp_path, capsys):
    name = "cam ??/ */ \\ #define X [g] 日本"
    bundle = classifier_bundle(tmp_path, model_name=name)
    out = tmp_path / "ds"
    rc, text, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", out, "--precision", "fp16")
    assert rc == 0, line
    compile_parser(tmp_path, out / PARSER)  # -Werror: a '??/' or '\' at the end of a // comment would warn
    source = (out / PARSER).read_text()
    assert [line for line in source.splitlines() if line.startswith("#")] == [
        "#include <cmath>", "#include <cstring>", "#include <iostream>", "#include <string>", "#include <vector>",
        '#include "nvdsinfer_custom_impl.h"']
    with GLibKeyFile((out / NVINFER).read_bytes()) as kf:
        assert kf.groups() == ["property"]
    with GLibKeyFile((out / APP).read_bytes()) as kf:
        assert kf.groups() == ["application", "tiled-display", "source0", "streammux", "primary-gie", "osd", "sink0",
                               "tests"]


@pytest.mark.parametrize("uri", ["file:///data/a\\b #1;2 [x] =y", " rtsp://cam/ leading-and-trailing ",
                                 "file:///vidéos/日本.mp4", "file:///x%20y.mp4"])
def test_deepstream_key_files_read_back_with_real_glib(uri, tmp_path, capsys):
    bundle = classifier_bundle(tmp_path, output_name="head/logits:0", labels=["a b"] + ["c%d" % i for i in range(7)])
    out = tmp_path / "ds"
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", out, "--precision", "fp16",
                          "--source", uri, "--source", "file:///plain.mp4")
    assert rc == 0, line
    for config in (NVINFER, APP):
        data = (out / config).read_bytes()
        ours = read_keyfile(data)
        with GLibKeyFile(data) as kf:
            # the same groups, keys and raw values as jetforge's own reader: nothing injected, nothing lost
            assert kf.groups() == list(ours.groups)
            for group, entries in ours.groups.items():
                assert kf.keys(group) == list(entries)
                for key, raw in entries.items():
                    assert kf.value(group, key) == raw
            if config == APP:
                assert kf.string("source0", "uri") == uri and kf.string("source1", "uri") == "file:///plain.mp4"
                assert kf.groups()[:4] == ["application", "tiled-display", "source0", "source1"]
            else:
                assert kf.string_list("property", "output-blob-names") == ["head/logits:0"]
                assert kf.string("property", "labelfile-path") == "labels.txt"


@pytest.mark.parametrize("uri", ["file:///a\nb", "file:///a\r[property]", "file:///a\x00b", "file:///a\x1b[31m",
                                 "file:///a\ud800"])
def test_deepstream_source_uris_with_control_characters_are_refused(uri, tmp_path, capsys):
    bundle = classifier_bundle(tmp_path)
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", tmp_path / "ds", "--source", uri)
    assert rc == 1 and "--source" in line and not (tmp_path / "ds").exists()


@pytest.mark.parametrize("label", ["a\tb", "a\x00b", "a\x1b[2Jb", "a\u2028b", "\ud800", "a\x7fb", "a\x85b"])
@pytest.mark.parametrize("kind", ["deepstream", "triton"])
def test_labels_with_control_characters_or_lone_surrogates_are_refused(kind, label, tmp_path, capsys):
    if label == "\ud800":  # the strict JSON reader refuses a lone surrogate in any sidecar, before a bundle is made
        from jetforge.errors import ModelError

        with pytest.raises(ModelError, match="sidecar .* lone UTF-16 surrogate"):
            classifier_bundle(tmp_path, labels=[label] + ["c%d" % i for i in range(7)])
        return
    bundle = classifier_bundle(tmp_path, labels=[label] + ["c%d" % i for i in range(7)])
    rc, _, line = run_cli(capsys, "export-config", kind, bundle, "--out", tmp_path / "o", "--precision", "fp16")
    assert rc == 1 and "label" in line and "sidecar" in line and not (tmp_path / "o").exists()


# ---- (b) --name and the paths written ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", ".", ".hidden", "ABSOLUTE", "x" * 300, "",
                                  'a"b$(id)', "a\\b", "-rf", "a\nb", "a b", "日本"])
def test_triton_name_must_be_one_plain_folder_name(name, tmp_path, capsys):
    bundle = classifier_bundle(tmp_path / "in")
    root = tmp_path / "work"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "keep.txt").write_text("keep")
    if name == "ABSOLUTE":  # an absolute name inside tmp_path, so that a failing run writes nowhere else
        name = str(tmp_path / "abs" / "escape")
    before = tree(tmp_path)
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", root / "a" / "b" / "out",
                          "--name=" + name)
    assert rc == 1 and "--name" in line and "letters, digits" in line
    assert tree(tmp_path) == before  # nothing written anywhere, --out included


def test_paths_stay_inside_out_even_if_a_name_gets_past_the_check(tmp_path, capsys, monkeypatch):
    # defence in depth: with the --name check switched off, the write itself still refuses to leave --out
    from jetforge.deploy import generated_names

    monkeypatch.setattr(generated_names, "folder_name", lambda value, *a, **k: value)
    bundle = classifier_bundle(tmp_path / "in")
    root = tmp_path / "work" / "a" / "b"
    root.mkdir(parents=True)
    before = tree(tmp_path)
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", root / "out", "--name", "../../escape")
    assert rc == 1 and "outside" in line
    assert tree(tmp_path) == before


def test_default_triton_name_from_a_hostile_model_name_is_a_plain_folder(tmp_path, capsys):
    bundle = classifier_bundle(tmp_path, model_name="../../cam $(id)")
    out = tmp_path / "repo"
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", out)
    assert rc == 0, line
    assert sorted(p.name for p in out.iterdir()) == ["build_engines.sh", "cam_id", "export-config.json", "onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "repo", "src"]


# ---- silently wrong values ------------------------------------------------------------------------------
def test_label_count_must_match_the_class_count(tmp_path, capsys):
    bundle = classifier_bundle(tmp_path / "cls", labels=["c%d" % i for i in range(7)])  # 8 classes
    for kind in ("deepstream", "triton"):
        rc, _, line = run_cli(capsys, "export-config", kind, bundle, "--out", tmp_path / kind, "--precision", "fp16")
        assert rc == 1 and "7 labels" in line and "8 classes" in line, (kind, line)
    det = detector_bundle(tmp_path / "det", labels=("person", "car"), spec_labels=("person",))
    rc, _, line = run_cli(capsys, "export-config", "deepstream", det, "--out", tmp_path / "d")
    assert rc == 1 and "2 labels" in line and "1 class" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls", "det"]


@pytest.mark.parametrize("argv, words", [
    (("deepstream", "--threshold", "2"), "threshold 2.0 is outside [0, 1]"),
    (("deepstream", "--threshold", "-0.1"), "threshold -0.1 is outside [0, 1]"),
    (("deepstream", "--threshold", "nan"), "threshold nan is outside [0, 1]"),
    (("triton", "--max-batch", "1000000000"), "max batch size 1000000000 is above 4096"),
    (("triton", "--max-batch", "4097"), "max batch size 4097 is above 4096"),
    (("triton", "--max-batch", "1e9"), "--max-batch"),  # not an integer: argparse's one line
    (("triton", "--max-batch", "0"), "at least 1"),
])
def test_out_of_range_values_are_refused_in_one_line(argv, words, tmp_path, capsys):
    bundle = classifier_bundle(tmp_path)
    rc, _, line = run_cli(capsys, "export-config", argv[0], bundle, "--out", tmp_path / "o", *argv[1:])
    assert rc == 1 and words in line, line
    assert not (tmp_path / "o").exists()


def test_boundary_values_are_accepted(tmp_path, capsys):
    bundle = classifier_bundle(tmp_path)
    rc, _, line = run_cli(capsys, "export-config", "deepstream", bundle, "--out", tmp_path / "ds", "--threshold", "1",
                          "--precision", "fp16")
    assert rc == 0, line
    assert read_keyfile((tmp_path / "ds" / NVINFER).read_bytes()).get_double("property", "classifier-threshold") == 1.0
    rc, _, line = run_cli(capsys, "export-config", "triton", bundle, "--out", tmp_path / "t", "--max-batch", "4096",
                          "--json")
    assert rc == 0, line
    assert json.loads((tmp_path / "t" / "export-config.json").read_text())["build"]["command"].endswith("--fp16")
