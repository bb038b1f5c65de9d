"""The parser fuzzers shared by the CI test (test_fuzz_parsers.py) and the long run (benchmarks/reliability/fuzz_parsers.py).

Every parser of data that comes from outside is fed through the public name a user's file reaches
(``PUBLIC``: one table to update when a module moves).  The invariant, for every input:

* the parser raises a :class:`jetforge.errors.JetforgeError` whose one-line message is not empty, or
* it returns a *correct* parse: the structure the rest of jetforge relies on (types, ranges), and
  where the format has a writer, writing the result and reading it back gives the same result;
* never another exception, and never a hang (each input runs under an alarm, :data:`HANG_SECONDS`).

Inputs are drawn by hypothesis from three kinds of strategy per parser: mutations of valid real
files (bit flips, truncations, insertions of bytes and of tokens parsers trip on, deletions,
duplicated spans), structural mutations of the parsed document (a value replaced by one of the
wrong type, out of range, NaN, huge, deeply nested or a lone surrogate; a key deleted or added),
and plain random bytes/text.  Sizes are bounded (a few KiB) so one input never dominates.
"""

import copy
import hashlib
import importlib
import json
import math
import re
import signal
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import yaml
from hypothesis import strategies as st

from jetforge.errors import JetforgeError

REPO = Path(__file__).resolve().parents[2]

#: parser -> the public callable that user data reaches ("module:attribute"); update here when code moves.
PUBLIC = {
    "calibration_cache": "jetforge.runtime.tensorrt.calib_cache:read_calibration_cache_file",
    "calibration_cache_writer": "jetforge.runtime.tensorrt.calib_cache:format_calibration_cache",
    "tegrastats_line": "jetforge.runtime.tegrastats:parse_line",
    "model_sidecar": "jetforge.runtime.sidecar:read_sidecar",
    "model_sidecar_class": "jetforge.runtime.sidecar:ModelSidecar",
    "engine_sidecar": "jetforge.runtime.tensorrt.engine_sidecar:read_engine_sidecar",
    "engine_sidecar_class": "jetforge.runtime.tensorrt.engine_sidecar:EngineSidecar",
    "bundle_verify": "jetforge.deploy.bundle:verify_bundle",
    "bundle_read_manifest": "jetforge.deploy.bundle:read_manifest",
    "bundle_create": "jetforge.deploy.bundle:create_bundle",
    "bundle_manifest_class": "jetforge.deploy.bundle:Manifest",
    "bundle_manifest_problems": "jetforge.deploy.bundle:manifest_problems",
    "target_profile": "jetforge.targets:load_profile",
    "load_config": "jetforge.config:load_config",
    "config_to_dict": "jetforge.config:to_dict",
    "distill_recipe_class": "jetforge.compress.distill:DistillConfig",
    "build_options": "jetforge.runtime.tensorrt.plan:load_build_options",
    "inspector_json": "jetforge.runtime.tensorrt.builder:parse_inspector_json",
    "tf_graphdef": "jetforge.compress.models.tf_graphdef:load_graphdef",
    "video_source": "jetforge.apps.video:parse_source_uri",
    "video_source_kinds": "jetforge.apps.video.sources:SOURCES",
    "prune_plan_class": "jetforge.compress.prune.plan:PrunePlan",
    "person_labels": "jetforge.vision.person_labels:read_person_labels",
    "qdq_model_problem": "jetforge.runtime.qdq_scales:qdq_model_problem",
    "onnx_wire": "jetforge.runtime.onnx_wire:parse_model_bytes",
}

#: Seconds one input may take before it counts as a hang (generous: the machine may be shared).
HANG_SECONDS = 20.0
MAX_BYTES = 4096


def public(name: str) -> Any:
    module, _, attr = PUBLIC[name].partition(":")
    return getattr(importlib.import_module(module), attr)


class Hang(BaseException):
    """An input ran past HANG_SECONDS (a BaseException, so no parser's ``except Exception`` hides it)."""


@contextmanager
def time_limit(seconds: float = HANG_SECONDS) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang("one input ran for more than %.0f s" % seconds)
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class ParserTarget:
    """One parser: how an input reaches it, what a correct parse looks like, and where inputs come from."""

    name: str
    parse: Callable[[Any], Any]
    check: Callable[[Any, Any], None]
    inputs: st.SearchStrategy


def run_one(target: ParserTarget, data: Any) -> str:
    """'error' or 'parsed'; any other exception (or a Hang) propagates: that is a bug."""
    with time_limit():
        try:
            result = target.parse(data)
        except JetforgeError as err:
            assert err.one_line().strip(), "%s: a JetforgeError without a message" % target.name
            return "error"
    target.check(data, result)
    return "parsed"


# ------------------------------------------------------------------------------------------------
# generic strategies
# ------------------------------------------------------------------------------------------------
#: Byte strings parsers trip on: separators, numbers at the edges of their types, broken UTF-8, YAML and JSON syntax.
TOKENS = (b"\x00", b"\xff", b"\n", b"\r\n", b"\r", b" ", b"\t", b":", b"/", b"\\", b"..", b"../", b"%", b"@", b"[",
          b"]", b"{", b"}", b'"', b"'", b",", b"-", b"-1", b"0", b"1e999", b"NaN", b"Infinity", b"-0", b"9" * 40,
          b"9" * 5000, b"0x", b"\xc3", b"\xed\xa0\x80", b"\xe2\x80\xae", b"\\ud800", b"&a", b"*a", b"!!python/tuple",
          b"!!binary", b"? ", b"- ", b"---\n", b"...", b"<<: ", b"null", b"true", b"~", b"#", b"|", b">",
          b"\xef\xbb\xbf", b"TRT-", b"%@", b"mW", b"\x08\x01", b"\x12\x7f", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
          b"\x0a\x80\x80\x80\x80\x10")


@st.composite
def mutated(draw: Any, seeds: Sequence[bytes]) -> bytes:
    """A seed with 1-8 random edits: bit flips, cuts, insertions, deletions, token swaps, duplicated spans."""
    data = bytearray(draw(st.sampled_from(list(seeds))))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(("flip", "truncate", "insert", "token", "delete", "duplicate", "byte")))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "token":
            width = draw(st.integers(0, 8))
            data[pos:pos + width] = draw(st.sampled_from(TOKENS))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif op == "duplicate":
            span = bytes(data[pos:pos + draw(st.integers(1, 256))])
            at = draw(st.integers(0, len(data)))
            data[at:at] = span
    return bytes(data[:MAX_BYTES * 4])


ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=64)  # includes lone surrogates and controls

WEIRD_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.sampled_from([0, -1, 1, 2 ** 31, 2 ** 63, 10 ** 30]),
    st.floats(allow_nan=True, allow_infinity=True), ANY_TEXT,
    st.sampled_from(["", " ", "..", "../../x", "/etc/passwd", "a/../b", "x\x00y", "\ud800", "\udcff", "-oX", "1e999",
                     "nan", "inf", "0x10", "TRT-8600-X", "orin-nx-16gb", "int8", "fp16", "dla", "gpu", "float32"]))
WEIRD_VALUES = st.recursive(WEIRD_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=8)


def _paths(node: Any, here: tuple = ()) -> List[tuple]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, here + (i,))
    return out


def _edit(draw: Any, tree: Any) -> Any:
    path = draw(st.sampled_from(_paths(tree)))
    op = draw(st.sampled_from(("replace", "replace", "delete", "add", "wrap", "nest")))
    if not path:
        return draw(WEIRD_VALUES) if op == "replace" else tree
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if op == "replace":
        parent[key] = draw(WEIRD_VALUES)
    elif op == "delete":
        del parent[key]
    elif op == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=12))] = draw(WEIRD_VALUES)
    elif op == "add" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))  # a duplicated entry
    elif op == "wrap":
        parent[key] = [parent[key]]
    elif op == "nest":
        value: Any = parent[key]
        for _ in range(draw(st.integers(1, 200))):
            value = [value]
        parent[key] = value
    return tree


@st.composite
def json_mutated(draw: Any, seeds: Sequence[Any]) -> bytes:
    """A valid JSON document with 1-4 structural edits (wrong types, NaN, huge numbers, deletions, nesting)."""
    tree = copy.deepcopy(draw(st.sampled_from(list(seeds))))
    for _ in range(draw(st.integers(1, 4))):
        tree = _edit(draw, tree)
    return json.dumps(tree).encode("utf-8")


_PARSED_YAML: Dict[str, Any] = {}


def _parsed_yaml(text: str) -> Any:
    """A seed's YAML tree, parsed once: pure-Python PyYAML took most of each input's time when parsed per draw."""
    if text not in _PARSED_YAML:
        _PARSED_YAML[text] = yaml.safe_load(text)
    return _PARSED_YAML[text]


@st.composite
def yaml_mutated(draw: Any, seeds: Sequence[str]) -> bytes:
    """A valid YAML document with 1-4 structural edits, written back as YAML."""
    tree = copy.deepcopy(_parsed_yaml(draw(st.sampled_from(list(seeds)))))
    for _ in range(draw(st.integers(1, 4))):
        tree = _edit(draw, tree)
    allow_unicode = draw(st.booleans())
    try:
        return _dump_yaml(tree, allow_unicode).encode("utf-8", "surrogatepass")
    except yaml.YAMLError:
        return json.dumps(tree).encode("utf-8")  # YAML reads JSON too


def _dump_yaml(tree: Any, allow_unicode: bool) -> str:
    """``yaml.safe_dump``, through libyaml when PyYAML has it: the pure-Python emitter cost ~18 ms per input.

    libyaml cannot encode a lone surrogate; those trees go through the pure-Python emitter as before.
    """
    fast = getattr(yaml, "CSafeDumper", None)
    if fast is not None:
        try:
            return yaml.dump(tree, Dumper=fast, allow_unicode=allow_unicode)
        except (UnicodeError, yaml.YAMLError):
            pass
    return yaml.safe_dump(tree, allow_unicode=allow_unicode)


#: YAML that is valid syntax but hostile: recursion through aliases, alias bombs, code tags, deep nesting.
HOSTILE_YAML = (b"a: &x [*x]\n", b"&x {a: *x}\n", b"a: &a [1,1,1,1]\nb: &b [*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b]\n",
                b"!!python/object/apply:os.system ['true']\n", b"a: !!python/name:os.system\n",
                b"[" * 3000 + b"]" * 3000, b"{a: " * 2000 + b"1" + b"}" * 2000, b"- " * 1500 + b"1\n",
                b"a: 1e999\n", b"a: .nan\n", b"? [a, b]\n: 1\n", b"---\na: 1\n---\nb: 2\n", b"\xef\xbb\xbfa: 1\n",
                b"a: \"\\ud800\"\n", b"<<: {a: 1}\n", b"a: !!binary AAAA\n", b"a: 2001-12-14t21:59:43.10-05:00\n",
                b"9" * 5000 + b"\n", b"a: " + b"1" * 4400 + b"\n", b'a: "\\U80000000"\n', b'a: "\\U00110000"\n')


def document_inputs(valid: Sequence[bytes], structural: st.SearchStrategy,
                    extra: Sequence[bytes] = ()) -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from(list(valid)),
        mutated(list(valid) + list(extra)),
        structural,
        structural.flatmap(lambda doc: mutated([doc])),
        st.sampled_from(list(extra) or [b""]),
        st.binary(max_size=MAX_BYTES),
        st.text(max_size=512).map(lambda t: t.encode("utf-8")),
    )


# ------------------------------------------------------------------------------------------------
# checks shared by several parsers
# ------------------------------------------------------------------------------------------------
def assert_types(obj: Any, where: str = "result") -> None:
    """Every dataclass field holds what its annotation promises (the structure downstream code relies on)."""
    from jetforge.config import _hints  # the same annotation reader the config loader uses

    if not is_dataclass(obj):
        return
    hints = _hints(type(obj))
    for f in fields(obj):
        _assert_fits(getattr(obj, f.name), hints[f.name], "%s.%s" % (where, f.name))


def _assert_fits(value: Any, tp: Any, where: str) -> None:
    import typing

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return
    if origin is typing.Union:
        assert any(_fits(value, a) for a in args), "%s: %r does not fit %s" % (where, value, tp)
        for a in args:
            if _fits(value, a):
                _assert_fits(value, a, where)
                return
        return
    assert _fits(value, tp), "%s: %r does not fit %s" % (where, value, tp)
    if origin in (list, tuple) and args:
        item = args[0]
        for i, v in enumerate(value):
            _assert_fits(v, item if not (origin is tuple and args[-1] is not Ellipsis and len(args) == len(value))
                         else args[i], "%s[%d]" % (where, i))
    elif origin is dict and args:
        for k, v in value.items():
            _assert_fits(k, args[0], where + ".key")
            _assert_fits(v, args[1], "%s.%s" % (where, k))
    elif is_dataclass(value):
        assert_types(value, where)


def _fits(value: Any, tp: Any) -> bool:
    import typing

    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if origin is typing.Union:
        return any(_fits(value, a) for a in typing.get_args(tp))
    if origin is not None:
        return isinstance(value, origin)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp) if isinstance(tp, type) else True


def json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def assert_writable(value: Any) -> None:
    """What a reader accepted can be written back as strict JSON in UTF-8 (issue 25: a NaN mean reached the events
    as "p": NaN, a lone surrogate could not be written); numbers of the input contract are finite float32."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # a lone surrogate raises here
    block = value.get("input") or (value.get("model") or {}).get("input") if isinstance(value, dict) else None
    for key, v in (block or {}).items():
        for number in (v if isinstance(v, list) else [v]):
            if isinstance(number, float):
                assert abs(number) <= 3.4028234663852886e38, (key, number)


# ------------------------------------------------------------------------------------------------
# seeds
# ------------------------------------------------------------------------------------------------
CACHE_SEEDS = (
    # TensorRT 7's sampleINT8 lines with CRLF ends and names holding ':' and spaces, as TensorRT writes them
    b"TRT-8600-EntropyCalibration2\r\nimages: 3c00f9f4\r\nprob: 3c010a14\r\n(Unnamed Layer* 3) [Shuffle]_output: "
    b"3d8e5a2b\r\nonnx::Conv_7: 3ddc858b\r\n",
    b"TRT-100300-EntropyCalibration2\nclip: 3c010204\nlogits: 3d4ccccd\n/features/conv/Conv_output_0: da24260\n",
    b"TRT-7000-MinMaxCalibration\ninput: 0x3C010A14\n",
)

# tegrastats lines as boards print them (L4T 32 Nano without mW; Orin NX; AGX Orin on JetPack 7.2 with /max; Thor)
TEGRASTATS_SEEDS = (
    "RAM 534/3964MB (lfb 98x4MB) SWAP 5/1982MB (cached 1MB) IRAM 0/252kB(lfb 252kB) CPU [16%@204,9%@204,0%@204,"
    "0%@204] EMC_FREQ 0%@204 GR3D_FREQ 0%@76 APE 25 PLL@34C CPU@36.5C PMIC@100C GPU@36C AO@39.5C thermal@36.25C "
    "POM_5V_IN 1022/1022 POM_5V_GPU 0/0 POM_5V_CPU 204/204",
    "RAM 6334/15388MB (lfb 1770x4MB) SWAP 491/7694MB (cached 0MB) CPU [6%@729,9%@729,5%@729,16%@729,off,off,"
    "off,off] EMC_FREQ 0%@2133 GR3D_FREQ 0%@611 VIC_FREQ 729 APE 174 CV0@45.812C CPU@47.937C SOC2@46.093C "
    "SOC0@46.968C CV1@46.406C GPU@45.875C tj@48.875C SOC1@48.875C CV2@45.75C VDD_IN 5299mW/5299mW "
    "VDD_CPU_GPU_CV 773mW/773mW VDD_SOC 1424mW/1424mW",
    "11-21-2025 08:49:48 RAM 13983/62780MB (lfb 424x4MB) SWAP 126/31390MB (cached 0MB) CPU [90%@2201,"
    "100%@2201,...] EMC_FREQ 1%@2133 GR3D_FREQ 14%@[407,407] VIC_FREQ 115 NVDLA0_FREQ @1600 APE 174 "
    "CV0@73.625C CPU@77.281C Tboard@62C SOC2@70C Tdiode@62.25C VDD_GPU_SOC 3150mW/2971mW VDD_CPU_CV 14312mW/12415mW "
    "VIN_SYS_5V0 4968mW/5048mW VDDQ_VDD2_1V8AO 1091mW/1091mW",
    "07-25-2026 09:08:28 RAM 20642/62817MB (lfb 1x2MB) CPU [23%@2201,...] EMC_FREQ 3%@3199 "
    "GR3D_FREQ 12%@[1300,1300] NVENC0 off NVDEC0 off NVJPG0 off NVDLA0 off NVDLA1 off PVA0_FREQ off APE 174 "
    "cpu@52.968C/52.968C gpu@47.625C/47.625C VDD_GPU_SOC 5139mW/5139mW/5139mW VDD_CPU_CV 3268mW/3268mW/3268mW "
    "VIN_SYS_5V0 5500mW/5500mW/5500mW",
)

# What the TensorRT engine inspector prints with DETAILED and LAYER_NAMES_ONLY verbosity (its documented shape).
INSPECTOR_SEEDS = (
    {"Layers": [{"Name": "conv1 + relu1", "LayerType": "CaskConvolution", "Inputs": [
        {"Name": "input", "Location": "Device", "Dimensions": [1, 3, 224, 224],
         "Format/Datatype": "Row major linear FP16"}],
        "Outputs": [{"Name": "r1", "Location": "Device", "Dimensions": [1, 32, 112, 112],
                     "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}],
        "TacticName": "sm80_xmma_fprop_implicit_gemm_f16f16", "TacticValue": "0x1234"},
        {"Name": "{ForeignNode[conv2...fc]}", "LayerType": "DLA", "Inputs": [], "Outputs": [
            {"Name": "logits", "Format/Datatype": "Int8 NC/32HW32"}], "TacticName": ""}],
     "Bindings": ["input", "logits"]},
    {"Layers": ["conv1", "relu1", "{ForeignNode[dla_subgraph]}"], "Bindings": []},
)

SOURCE_SEEDS = ("clip.mp4", "file:///data/clip.mp4", "file://localhost/tmp/x%20y.avi", "frames/", "0", "12",
                "v4l2:///dev/video0", "v4l2://1", "csi://0", "csi://1/", "rtsp://192.168.1.10:8554/stream",
                "rtsps://user:pw@cam.local/live?x=1", "http://host:8080/video.mjpg", "https://[::1]:8443/a.m3u8",
                "C:/videos/a.mp4", "file:", "rtsp://", "unknown://x")


# -- a small protobuf encoder for GraphDef seeds (field numbers in tf_graphdef's module docstring) --
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field_no: int, payload: bytes) -> bytes:
    return _varint(field_no << 3 | 2) + _varint(len(payload)) + payload


def _vi(field_no: int, value: int) -> bytes:
    return _varint(field_no << 3) + _varint(value & (2 ** 64 - 1))


def _attr(key: str, value: bytes) -> bytes:
    return _ld(5, _ld(1, key.encode()) + _ld(2, value))


def _shape(*dims: int) -> bytes:
    return b"".join(_ld(2, _vi(1, d)) for d in dims)


def graphdef_seeds() -> List[bytes]:
    """Small frozen graphs: a Const with packed content, one with the repeat-last-value shorthand,
    a Placeholder with a shape, a node with list and function attributes, and a plain op."""
    w = struct.pack("<6f", 0.5, -1.0, 2.0, 0.25, 3.0, -0.125)
    const = _ld(1, _ld(1, b"weights") + _ld(2, b"Const") + _attr("dtype", _vi(6, 1)) +
                _attr("value", _ld(8, _vi(1, 1) + _ld(2, _shape(2, 3)) + _ld(4, w))))
    filled = _ld(1, _ld(1, b"bias") + _ld(2, b"Const") +
                 _attr("value", _ld(8, _vi(1, 1) + _ld(2, _shape(4)) + _ld(5, struct.pack("<f", 0.1)))))
    ints = _ld(1, _ld(1, b"ids") + _ld(2, b"Const") +
               _attr("value", _ld(8, _vi(1, 3) + _ld(2, _shape(3)) +
                                  _ld(7, _varint(1) + _varint(2) + _varint(2 ** 64 - 1)))))
    placeholder = _ld(1, _ld(1, b"image_tensor") + _ld(2, b"Placeholder") + _attr("dtype", _vi(6, 4)) +
                      _attr("shape", _ld(7, _shape(2 ** 64 - 1, 300, 300, 3))))
    lists = _ld(1, _ld(1, b"conv") + _ld(2, b"Conv2D") + _ld(3, b"image_tensor") + _ld(3, b"weights") +
                _ld(4, b"/device:CPU:0") + _attr("strides", _ld(1, _ld(3, _varint(1) * 4))) +
                _attr("padding", _ld(2, b"SAME")) + _attr("T", _vi(6, 1)) +
                _attr("f", _ld(10, _ld(1, b"fn") + _ld(2, _ld(1, b"k") + _ld(2, _vi(5, 1))))))
    text = _ld(1, _ld(1, b"labels") + _ld(2, b"Const") +
               _attr("value", _ld(8, _vi(1, 7) + _ld(2, _shape(2)) + _ld(8, b"person") + _ld(8, b"bg"))))
    return [const + filled + ints + placeholder + lists + text, const, placeholder + lists, b""]


def real_graphdef_prefix(limit: int = 12, max_node_bytes: int = 4096) -> Optional[bytes]:
    """The first small node records of the real SSDLite frozen graph (asset), or None when it is not cached."""
    try:
        from jetforge.assets import asset_path

        path = asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb", fetch_missing=False)
    except Exception:  # the asset cache is optional for the fuzzers: hand-made seeds remain
        return None
    data = Path(path).read_bytes()
    pos, out, count = 0, bytearray(), 0
    while pos < len(data) and count < limit:
        start = pos
        tag, pos = _read_varint(data, pos)
        size, pos = _read_varint(data, pos)
        pos += size
        if tag == (1 << 3 | 2) and pos - start <= max_node_bytes:
            out += data[start:pos]
            count += 1
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


# ------------------------------------------------------------------------------------------------
# the parsers
# ------------------------------------------------------------------------------------------------
def _calibration_cache(work: Path) -> ParserTarget:
    read, write = public("calibration_cache"), public("calibration_cache_writer")
    path = work / "model.calib"

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return read(path)

    def check(data: bytes, info: Any) -> None:
        assert re.match(r"^TRT-\d+-\w+$", info.header) and isinstance(info.scales, dict), info
        for name, scale in info.scales.items():
            assert isinstance(name, str) and name == name.strip() and name, name
            assert math.isfinite(scale) and scale >= 1.1754943508222875e-38, (name, scale)  # positive normal float32
        # the writer's text reads back to the same scales, bit for bit
        again = read_text(write(info.version_number, info.algorithm, info.scales))
        assert list(again.scales) == list(info.scales)
        assert all(struct.pack(">f", again.scales[k]) == struct.pack(">f", v) for k, v in info.scales.items())

    def read_text(text: str) -> Any:
        path.write_text(text)
        return read(path)

    @st.composite
    def cache_lines(draw: Any) -> bytes:
        header = draw(st.sampled_from(["TRT-8600-EntropyCalibration2", "TRT-100300-MinMaxCalibration", "TRT-5-X",
                                       "TRT-99999999999-A", "TRT--X", "trt-8600-x", ""]))
        names = st.one_of(st.sampled_from(["x", "logits", "a: b", " pad ", "dup"]), st.text(max_size=12))
        values = st.one_of(st.integers(0, 2 ** 32 - 1).map(lambda v: "%x" % v),
                           st.integers(0, 2 ** 32 - 1).map(lambda v: "%08x" % v),
                           st.sampled_from(["7fc00000", "7f800000", "0", "80000000", "bf800000", "1", "2db8",
                                            "123456789", "0x", "-3c010a14", "3C010A14", "g", ""]), st.text(max_size=9))
        lines = [header] + ["%s: %s" % (draw(names), draw(values)) for _ in range(draw(st.integers(0, 6)))]
        sep = draw(st.sampled_from(["\n", "\r\n", "\r"]))
        return sep.join(lines).encode("utf-8", "surrogatepass")

    return ParserTarget("calibration_cache", parse, check, document_inputs(CACHE_SEEDS, cache_lines()))


def _tegrastats(work: Path) -> ParserTarget:
    parse_line = public("tegrastats_line")
    sample_type = type(parse_line(TEGRASTATS_SEEDS[0]))

    def check(line: str, sample: Any) -> None:
        if sample is None:
            return
        assert isinstance(sample, sample_type)
        text = json.dumps(sample.to_dict(), allow_nan=False)  # what `jetforge bench` writes into its JSON
        assert json.loads(text)["ram_total_mb"] == sample.ram_total_mb
        for rail in sample.rails.values():
            assert all(math.isfinite(v) for v in (rail.current_mw, rail.average_mw, rail.max_mw or 0.0))

    @st.composite
    def token_edits(draw: Any) -> str:
        tokens = draw(st.sampled_from(TEGRASTATS_SEEDS)).split(" ")
        for _ in range(draw(st.integers(1, 6))):
            i = draw(st.integers(0, len(tokens) - 1))
            op = draw(st.sampled_from(("number", "drop", "dup", "text")))
            if op == "number":
                tokens[i] = re.sub(r"\d+", lambda m: draw(st.sampled_from(
                    ["0", "-1", "9" * 30, "9" * 5000, "\u0663", "1.5", ""])), tokens[i], count=1)
            elif op == "drop":
                del tokens[i]
            elif op == "dup":
                tokens.insert(i, tokens[i])
            else:
                tokens[i] = draw(ANY_TEXT)
            if not tokens:
                tokens = [""]
        return " ".join(tokens)

    seeds = [s.encode() for s in TEGRASTATS_SEEDS]
    inputs = st.one_of(st.sampled_from(TEGRASTATS_SEEDS), token_edits(),
                       mutated(seeds).map(lambda b: b.decode("utf-8", "replace")),
                       st.text(st.characters(exclude_categories=()), max_size=MAX_BYTES // 4))
    return ParserTarget("tegrastats_line", parse_line, check, inputs)


def _sidecar_seeds() -> List[Dict[str, Any]]:
    from jetforge.runtime.inputs import Preprocess

    sidecar_cls = public("model_sidecar_class")
    spec = importlib.import_module(sidecar_cls.__module__).TensorSpec
    real = json.loads((REPO / "src" / "jetforge" / "assets" / "shipped" / "action-mobilenet3d" / "model.onnx.json").read_text())
    made = sidecar_cls(task="classify", model_name="tiny", inputs=[spec("x", [-1, 3, 32, 32])],
                       outputs=[spec("y", ["N", 8], "float16")], preprocess=Preprocess(height=32, width=32),
                       labels=["c%d" % i for i in range(8)], produced_by={"tool": "jetforge"}).to_dict()
    return [real, made]


def _model_sidecar(work: Path) -> ParserTarget:
    read, cls = public("model_sidecar"), public("model_sidecar_class")
    model = work / "model.onnx"
    model.write_bytes(b"stand-in model bytes")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    seeds = _sidecar_seeds()
    for seed in seeds:
        seed["content_sha256"] = digest

    def parse(data: bytes) -> Any:
        (work / "model.onnx.json").write_bytes(data)
        return read(model)

    def check(data: bytes, sidecar: Any) -> None:
        assert isinstance(sidecar, cls)
        assert_types(sidecar, "sidecar")
        assert cls.from_dict(json_round_trip(sidecar.to_dict())) == sidecar
        assert_writable(sidecar.to_dict())

    valid = [json.dumps(s).encode() for s in seeds]
    return ParserTarget("model_sidecar", parse, check, document_inputs(valid, json_mutated(seeds)))


def _engine_sidecar(work: Path) -> ParserTarget:
    from jetforge.runtime.inputs import Preprocess

    read, cls = public("engine_sidecar"), public("engine_sidecar_class")
    spec = importlib.import_module(public("model_sidecar_class").__module__).TensorSpec
    engine = work / "model.engine"
    engine.write_bytes(b"stand-in plan bytes")
    seed = cls(tensorrt_version="10.3.0", target="orin-nx-16gb", precision="int8", device="dla", dla_core=0,
               inputs=[spec("x", [1, 3, 32, 32])], outputs=[spec("y", [1, 8])],
               source_onnx={"path": "model.onnx", "sha256": "0" * 64}, gpu_fallback=True, int8_source="cache",
               task="classify", labels=["a", "b"], preprocess=Preprocess(height=32, width=32), build_seconds=1.5,
               plan={"precision": "int8"}, notes=["n"], content_sha256=hashlib.sha256(engine.read_bytes()).hexdigest(),
               produced_by={"tool": "jetforge"}).to_dict()

    def parse(data: bytes) -> Any:
        (work / "model.engine.json").write_bytes(data)
        return read(engine, tensorrt_version="10.3.1")

    def check(data: bytes, sidecar: Any) -> None:
        assert isinstance(sidecar, cls)
        assert_types(sidecar, "engine sidecar")
        assert cls.from_dict(json_round_trip(sidecar.to_dict())) == sidecar
        assert_writable(sidecar.to_dict())

    return ParserTarget("engine_sidecar", parse, check,
                        document_inputs([json.dumps(seed).encode()], json_mutated([seed])))


def _bundle_manifest(work: Path) -> ParserTarget:
    create, verify, read = public("bundle_create"), public("bundle_verify"), public("bundle_read_manifest")
    cls, problems = public("bundle_manifest_class"), public("bundle_manifest_problems")
    write = public("calibration_cache_writer")
    src = work / "bundle-src"
    src.mkdir()
    shipped = REPO / "src" / "jetforge" / "assets" / "shipped" / "action-mobilenet3d"
    for name, stored in (("action_mobilenet3d.onnx", "model.onnx"), ("action_mobilenet3d.onnx.json", "model.onnx.json")):
        (src / name).write_bytes((shipped / stored).read_bytes())
    cache = src / "model.calib"
    cache.write_text(write(100300, "EntropyCalibration2", {"clip": 0.02, "logits": 0.05}))
    bundle = create(src / "action_mobilenet3d.onnx", work / "cam", ["orin-nx-16gb"], calib=[cache],
                    tensorrt_versions=["10.3.0"]).path
    seed = json.loads((bundle / "manifest.json").read_text())

    def parse(data: bytes) -> Any:
        (bundle / "manifest.json").write_bytes(data)
        report = verify(bundle)  # never raises for content: every problem is a line of the report
        try:
            manifest = read(bundle)
        except JetforgeError as err:
            assert err.one_line().strip()
            manifest = None
        return report, manifest

    def check(data: bytes, result: Any) -> None:
        report, manifest = result
        assert all(isinstance(p, str) and p.strip() for p in report.problems())
        json.dumps(report.to_dict())
        if report.ok:
            assert manifest is not None and not problems(manifest)
            assert manifest.bundle_hash == manifest.compute_hash()
        if manifest is not None:
            assert_types(manifest, "manifest")
            assert cls.from_dict(json_round_trip(manifest.to_dict())) == manifest

    @st.composite
    def rehashed(draw: Any) -> bytes:
        # an attacker recomputes the bundle hash after editing, so the checks behind it are reached
        tree = copy.deepcopy(seed)
        for _ in range(draw(st.integers(1, 3))):
            tree = _edit(draw, tree)
        try:
            tree["bundle_hash"] = cls.from_dict(tree).compute_hash()
        except Exception:  # the edit broke what the hash is computed from; the document is still an input
            pass
        return json.dumps(tree).encode()

    valid = [json.dumps(seed).encode()]
    return ParserTarget("bundle_manifest", parse, check,
                        st.one_of(document_inputs(valid, json_mutated([seed])), rehashed()))


def _target_profile(work: Path) -> ParserTarget:
    load = public("target_profile")
    seeds = {name: (REPO / "src" / "jetforge" / "targets" / "profiles" / (name + ".yaml")).read_text()
             for name in ("orin-nx-16gb", "desktop-ada", "agx-orin-64gb")}

    def parse(data: bytes) -> Any:
        # the file name must equal the profile's name: the first seed's name, so most edits reach deeper checks
        path = work / "orin-nx-16gb.yaml"
        path.write_bytes(data)
        return load(path)

    def check(data: bytes, target: Any) -> None:
        assert re.match(r"^[a-z0-9][a-z0-9-]*$", target.name) and target.kind in ("jetson", "desktop", "server")
        for key, record in target.specs.items():
            assert record.value is None or record.source, key  # every number has a source
        assert isinstance(target.dla_cores, int) and target.dla_cores >= 0
        assert target.has_dla == (target.dla_cores > 0)

    valid = [t.encode() for t in seeds.values()]
    return ParserTarget("target_profile", parse, check,
                        document_inputs(valid, yaml_mutated(list(seeds.values())), HOSTILE_YAML))


def _config(work: Path, name: str, cls_name: str, seed_files: Sequence[str]) -> ParserTarget:
    load_config, to_dict = public("load_config"), public("config_to_dict")
    cls = public(cls_name)
    seeds = [(REPO / f).read_text() for f in seed_files]
    path = work / (name + ".yaml")

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return load_config(cls, path)

    def check(data: bytes, cfg: Any) -> None:
        assert isinstance(cfg, cls)
        assert_types(cfg, name)
        path.write_text(yaml.safe_dump(to_dict(cfg)))  # what --print-config shows loads back to the same config
        assert load_config(cls, path) == cfg

    valid = [s.encode() for s in seeds]
    return ParserTarget(name, parse, check, document_inputs(valid, yaml_mutated(seeds), HOSTILE_YAML))


def _build_options(work: Path) -> ParserTarget:
    load, to_dict = public("build_options"), public("config_to_dict")
    seed = ("precision: int8\ndla_core: 0\ngpu_fallback: true\ninput_shapes: {x: [1, 3, 224, 224]}\n"
            "profiles: [{x: {min: [1, 3, 224, 224], opt: [4, 3, 224, 224], max: [8, 3, 224, 224]}}]\n"
            "layer_precisions: {conv1: fp16}\nworkspace_mib: 1024\nbuilder_optimization_level: 3\nsparsity: false\n")
    path = work / "build.yaml"

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return load(path)

    def check(data: bytes, options: Any) -> None:
        assert_types(options, "build options")
        path.write_text(yaml.safe_dump(to_dict(options)))
        assert load(path) == options

    return ParserTarget("build_options", parse, check,
                        document_inputs([seed.encode()], yaml_mutated([seed]), HOSTILE_YAML))


def _inspector(work: Path) -> ParserTarget:
    parse = public("inspector_json")

    def check(text: str, parsed: Any) -> None:
        layers = parsed["layers"]
        assert isinstance(layers, list) and all(isinstance(l, dict) for l in layers)
        for layer in layers:
            assert isinstance(layer["name"], str) and layer["device"] in ("DLA", "GPU")
            assert all(isinstance(p, str) for p in layer["precisions"])
        summary = parsed["summary"]
        assert summary["layers"] == len(layers) == summary["dla"] + summary["gpu"]
        assert isinstance(parsed["bindings"], list)
        json.dumps(parsed)  # goes into the build report

    seeds = list(INSPECTOR_SEEDS)
    valid = [json.dumps(s).encode() for s in seeds]
    as_text = document_inputs(valid, json_mutated(seeds)).map(lambda b: b.decode("utf-8", "replace"))
    return ParserTarget("inspector_json", parse, check, as_text)


def _check_tensor(tensor: Any) -> None:
    import numpy as np

    assert all(isinstance(d, int) and d >= 0 for d in tensor.shape), tensor.shape
    if tensor.value is not None:
        assert isinstance(tensor.value, np.ndarray) and tuple(tensor.value.shape) == tuple(tensor.shape), tensor


def _check_attr(attr: Any) -> None:
    if attr.kind == "tensor":
        _check_tensor(attr.value)
    elif attr.kind == "list":
        for tensor in attr.value.tensor:
            _check_tensor(tensor)
        for func in attr.value.func:
            assert isinstance(func.name, str)
            for value in func.attr.values():
                _check_attr(value)
    elif attr.kind == "func":
        assert isinstance(attr.value.name, str)
        for value in attr.value.attr.values():
            _check_attr(value)


def _graphdef(work: Path) -> ParserTarget:
    load = public("tf_graphdef")
    path = work / "frozen_inference_graph.pb"
    seeds = graphdef_seeds()
    real = real_graphdef_prefix()
    if real:
        seeds.append(real)

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return load(path)

    def check(data: bytes, graph: Any) -> None:
        for node in graph.nodes:
            assert isinstance(node.name, str) and isinstance(node.op, str), node
            assert all(isinstance(i, str) for i in node.inputs) and isinstance(node.device, str), node
            for key, attr in node.attr.items():
                assert isinstance(key, str), key
                _check_attr(attr)

    return ParserTarget("tf_graphdef", parse, check,
                        st.one_of(st.sampled_from(seeds), mutated(seeds), st.binary(max_size=MAX_BYTES)))


def _video_source(work: Path) -> ParserTarget:
    parse = public("video_source")
    kinds = public("video_source_kinds")

    def check(text: str, spec: Any) -> None:
        from urllib.parse import urlparse

        assert spec.kind in kinds and isinstance(spec.location, str) and spec.location, spec
        if spec.kind == "csi":
            assert re.match(r"^[0-9]+$", spec.location), spec  # int() of it selects the sensor
        if spec.kind == "v4l2":
            assert re.match(r"^[0-9]+$", spec.location) or not spec.location.isdigit(), spec
        if spec.kind in ("rtsp", "http"):
            assert urlparse(spec.location).netloc, spec

    @st.composite
    def uris(draw: Any) -> str:
        scheme = draw(st.sampled_from(["", "file://", "file:", "v4l2://", "v4l2:///", "csi://", "rtsp://", "rtsps://",
                                       "http://", "https://", "HTTP://", "x://", "c:", "file://host"]))
        parts = st.one_of(ANY_TEXT, st.sampled_from(["0", "\u0663", "\u00b2", "[::1]", "[::1", "]", "[", "%2F", "%",
                                                     "..", "/dev/video0", "user@", ":8554", "?q=1", "#f", "\x00"]))
        return scheme + "".join(draw(parts) for _ in range(draw(st.integers(0, 4))))

    inputs = st.one_of(st.sampled_from(SOURCE_SEEDS), uris(),
                       mutated([s.encode() for s in SOURCE_SEEDS]).map(lambda b: b.decode("utf-8", "surrogateescape")),
                       st.text(st.characters(exclude_categories=()), max_size=256))
    return ParserTarget("video_source", parse, check, inputs)


# ---- issue 25: the readers of files from others that the fuzz run did not cover --------------------------------
PRUNE_PLAN_SEED = {"format": "jetforge.prune-plan/1", "jetforge": "0.1.0", "architecture": "Net",
                   "meta": {"model": "net", "round_to": 8}, "layers": {"conv1": {"in": [3, 3], "out": [16, 8]}},
                   "entries": [{"module": "conv1", "tensor": "weight", "dim": 0, "size": 16, "removed": [1, 5, 9]},
                               {"module": "bn1", "tensor": "running_mean", "dim": 0, "size": 16, "removed": [1, 5, 9]},
                               {"module": "conv2", "tensor": "weight", "dim": 1, "size": 16, "removed": [1, 5, 9]}]}


def _prune_plan(work: Path) -> ParserTarget:
    cls = public("prune_plan_class")
    path = work / "model.prune.json"

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return cls.load(path)

    def check(data: bytes, plan: Any) -> None:
        assert isinstance(plan.architecture, str) and isinstance(plan.meta, dict) and isinstance(plan.layers, dict)
        for e in plan.entries:
            assert isinstance(e.module, str) and isinstance(e.tensor, str), e
            assert all(type(v) is int for v in (e.dim, e.size)) and 0 <= e.dim and 1 <= e.size, e
            assert all(type(i) is int and 0 <= i < e.size for i in e.removed), e
        for layer in plan.layers.values():
            assert all(isinstance(v, list) and all(type(x) is int and x >= 0 for x in v) for v in layer.values())
        again = cls.from_dict(json_round_trip(plan.to_dict()))  # what save() writes loads back the same
        assert again.entries == plan.entries and again.meta == plan.meta and again.layers == plan.layers

    seeds = [PRUNE_PLAN_SEED, dict(PRUNE_PLAN_SEED, entries=[], layers={}, meta={})]
    return ParserTarget("prune_plan", parse, check,
                        document_inputs([json.dumps(s).encode() for s in seeds], json_mutated(seeds)))


def person_label_seed() -> Dict[str, Any]:
    """jetforge's person-box set cut to its first clip's first six labelled frames (a whole, valid file)."""
    read = public("person_labels")
    data = json.loads(Path(importlib.import_module(read.__module__).DEFAULT_LABELS).read_text())
    clip = data["frames"][0]["clip"]
    data["clips"] = {clip: data["clips"][clip]}
    data["frames"] = [f for f in data["frames"] if f["clip"] == clip][:6]
    for frame in data["frames"]:
        frame["boxes"] = frame["boxes"][:3]
    return data


def _person_labels(work: Path) -> ParserTarget:
    import numpy as np

    read = public("person_labels")
    path = work / "people.json"
    seed = person_label_seed()

    def parse(data: bytes) -> Any:
        path.write_bytes(data)
        return read(path)

    def check(data: bytes, labels: Any) -> None:
        assert type(labels.guard_frames) is int and labels.guard_frames >= 0
        for s in labels.segments:
            assert type(s.start) is int and type(s.stop) is int and isinstance(s.split, str), s
        for f in labels.frames:
            assert type(f.index) is int and f.index >= 0 and labels.split_of(f.clip, f.index) == f.split, f
            assert f.boxes.dtype == np.float32 and f.boxes.ndim == 2 and f.boxes.shape[1] == 4
            assert np.all(np.isfinite(f.boxes)) and f.difficult.dtype == bool and len(f.difficult) == len(f.boxes)
            assert all(isinstance(v, str) for v in (f.clip, f.asset, f.file, f.sha256))

    return ParserTarget("person_labels", parse, check,
                        document_inputs([json.dumps(seed).encode()], json_mutated([seed])))


def _qdq_scales(work: Path) -> ParserTarget:
    """Q/DQ models whose scale and zero point are drawn: the rule bundle create and qat --translate share, against
    an independent statement of what TensorRT takes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    judge = public("qdq_model_problem")
    tiny, big = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)

    @st.composite
    def models(draw: Any) -> Any:
        dtype = draw(st.sampled_from([np.float32, np.float32, np.float16, np.float64, np.int8]))
        values = draw(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                                         st.sampled_from([0.0, -0.0, 1e-40, tiny, tiny / 2, big / 127, big, 1e-3])),
                               min_size=1, max_size=4))
        with np.errstate(all="ignore"):
            scale = np.asarray(values if len(values) > 1 else values[0]).astype(dtype)
        zp_kind = draw(st.sampled_from(["none", "none", "int8", "uint8", "int32"]))
        inits = [numpy_helper.from_array(scale, "s")]
        q_in = ["x", "s"]
        if zp_kind != "none":
            zp = np.asarray(draw(st.lists(st.integers(-3, 3), min_size=scale.size, max_size=scale.size))
                            if scale.ndim else draw(st.integers(-3, 3)))
            inits.append(numpy_helper.from_array(np.clip(zp, 0, 255).astype(np.uint8) if zp_kind == "uint8"
                                                 else zp.astype(zp_kind), "z"))
            q_in.append("z")
        nodes = [helper.make_node("QuantizeLinear", q_in, ["q"], name="q", axis=1),
                 helper.make_node("DequantizeLinear", ["q"] + q_in[1:], ["y"], name="dq", axis=1)]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])

    def parse(model: Any) -> Any:
        return judge(model)

    def check(model: Any, problem: Optional[str]) -> None:
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        scale = inits["s"]
        with np.errstate(all="ignore"):
            as64 = scale.astype(np.float64)
            fine = (scale.dtype.kind == "f" and np.all(np.isfinite(as64)) and np.all(as64 >= tiny)
                    and np.all(as64 * 127 <= big))
        zp = inits.get("z")
        if zp is not None:
            fine = fine and zp.dtype != np.uint8 and not np.any(zp)
        assert (problem is None) == bool(fine), (scale, zp, problem)
        assert problem is None or (problem.strip() and "\n" not in problem)

    return ParserTarget("qdq_scales", parse, check, models())


def onnx_seeds() -> List[bytes]:
    """Small real models, each exercising part of what the wire reader reads: raw and typed weights, a Constant,
    dynamic axes by name and unknown, Q/DQ, a sparse initializer, another domain's opset first, int64/bool I/O."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    typed = helper.make_tensor("b", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, 0.0])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, -1])
    s = numpy_helper.from_array(np.asarray(0.02, np.float32), "s")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s"], ["d"], name="dequant"),
             helper.make_node("Conv", ["d", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.float32(2.0))),
             helper.make_node("Mul", ["c", "k"], ["m"], name="mul"),
             helper.make_node("Reshape", ["m", "shape"], ["y"], name="flat"),
             helper.make_node("Shape", ["y"], ["n"], name="shape_of")]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 256]),
                               helper.make_tensor_value_info("n", TensorProto.INT64, [2])], [w, typed, shape, s])
    qdq = helper.make_model(graph, opset_imports=[helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("", 17)])
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(2, np.float32), "sp"),
                                       numpy_helper.from_array(np.asarray([0, 3], np.int64), "sp_idx"), [4])
    graph = helper.make_graph([helper.make_node("Cast", ["img"], ["f"], to=TensorProto.FLOAT),
                               helper.make_node("Add", ["f", "sp"], ["out"]), helper.make_node("Not", ["flag"], ["nf"])],
                              "sparse", [helper.make_tensor_value_info("img", TensorProto.UINT8, [4]),
                                         helper.make_tensor_value_info("flag", TensorProto.BOOL, [1])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("nf", TensorProto.BOOL, [1])], sparse_initializer=[sparse])
    plain = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    for m in (qdq, plain):
        m.ir_version = 8
    return [qdq.SerializeToString(), plain.SerializeToString()]


def onnx_package_facts(model: Any, dtype_names: Dict[int, str]) -> Any:
    """(inputs, outputs, has_qdq, opset) of a parsed ``onnx.ModelProto``, read through the onnx package: the
    reference the wire reader is compared with (here and in tests/runtime/test_onnx_wire.py)."""
    inits = {i.name for i in model.graph.initializer} | {i.values.name for i in model.graph.sparse_initializer}

    def spec(vi: Any) -> Dict[str, Any]:
        tt = vi.type.tensor_type
        shape = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or -1)
                 for d in tt.shape.dim]
        return {"name": vi.name, "shape": shape, "dtype": dtype_names.get(tt.elem_type, str(tt.elem_type))}

    return ([spec(v) for v in model.graph.input if v.name not in inits], [spec(v) for v in model.graph.output],
            any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node),
            next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None))


def onnx_reference(data: bytes) -> Any:
    """(inputs, outputs, has_qdq, opset) as the ``onnx`` package gives them, or None when it refuses the bytes
    (protobuf cannot parse them, or the checked reader's model checks refuse the model)."""
    import onnx

    from jetforge.errors import JetforgeError
    from jetforge.runtime.onnx_file import check_model_structure

    names = importlib.import_module(public("onnx_wire").__module__).ONNX_DTYPES
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
        check_model_structure(model, "reference")
    except JetforgeError:
        return None
    except Exception:  # DecodeError and friends: protobuf refuses the bytes
        return "unparsed"
    return onnx_package_facts(model, names)


def _onnx_wire(work: Path) -> ParserTarget:
    """The board's onnx-free ONNX reader, differentially against the onnx package plus the shared model checks:
    whatever the wire reader accepts, the onnx package parses, the checked reader accepts, and the facts agree."""
    import onnx

    parse = public("onnx_wire")
    seeds = onnx_seeds()

    @st.composite
    def edited(draw: Any) -> bytes:
        model = onnx.ModelProto()
        model.ParseFromString(draw(st.sampled_from(seeds)))
        g = model.graph
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(("opset", "ir", "dim", "elem", "op", "rename", "dup_node", "raw", "dims",
                                       "domain", "drop_node")))
            node = g.node[draw(st.integers(0, len(g.node) - 1))] if len(g.node) else None
            if op == "opset":
                model.opset_import[-1].version = draw(st.sampled_from([0, 1, 6, 7, 13, 28, 29, 99, -1]))
            elif op == "ir":
                model.ir_version = draw(st.sampled_from([0, 2, 3, 8, 14, 15, 99]))
            elif op == "dim" and g.input[0].type.tensor_type.shape.dim:
                dim = g.input[0].type.tensor_type.shape.dim[0]
                dim.dim_value = draw(st.sampled_from([0, 1, -1, 2 ** 40, 2 ** 62]))
            elif op == "elem":
                g.input[0].type.tensor_type.elem_type = draw(st.integers(0, 30))
            elif op == "op" and node is not None:
                node.op_type = draw(st.one_of(st.sampled_from(["Relu", "FooBar", "ImageScaler", ""]), ANY_TEXT))
            elif op == "rename" and node is not None and node.output:
                node.output[0] = draw(st.sampled_from([v.name for v in g.input] + [i.name for i in g.initializer]
                                                      + [o for n in g.node for o in n.output] + ["z"]))
            elif op == "dup_node" and node is not None:
                g.node.append(node)
            elif op == "raw" and g.initializer:
                t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
                t.raw_data = t.raw_data[:draw(st.integers(0, len(t.raw_data)))]
            elif op == "dims" and g.initializer:
                t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
                t.dims.append(draw(st.sampled_from([0, 2, -1, 2 ** 20])))
            elif op == "domain" and node is not None:
                node.domain = draw(st.sampled_from(["", "ai.onnx", "com.microsoft", "x.y"]))
            elif op == "drop_node" and node is not None:
                g.node.remove(node)
        data = model.SerializeToString()
        if g.node and draw(st.integers(0, 3)) == 0:  # the graph field again: protobuf merges it into the first
            extra = onnx.GraphProto()
            extra.node.add().CopyFrom(g.node[draw(st.integers(0, len(g.node) - 1))])
            if draw(st.booleans()):
                extra.output.add().CopyFrom(g.output[0])
            data += _ld(7, extra.SerializeToString())
        return data

    def check(data: bytes, facts: Any) -> None:
        from jetforge.runtime.onnx_checks import MAX_OPSET, MIN_OPSET

        for spec in facts.inputs + facts.outputs:
            assert isinstance(spec["name"], str) and isinstance(spec["dtype"], str), spec
            assert all((isinstance(d, str) and d) or (type(d) is int and (d > 0 or d == -1)) for d in spec["shape"])
        assert facts.opset is None or MIN_OPSET <= facts.opset <= MAX_OPSET, facts.opset
        reference = onnx_reference(data)
        assert reference is not None, "the wire reader accepted a model the checked reader refuses"
        if reference != "unparsed":  # the wire reader skips, unread, what it does not need (value_info, docs)
            assert (facts.inputs, facts.outputs, facts.has_qdq, facts.opset) == reference

    return ParserTarget("onnx_wire", lambda data: parse(data, "fuzzed.onnx"), check,
                        st.one_of(st.sampled_from(seeds), edited(), mutated(seeds), edited().flatmap(
                            lambda d: mutated([d])), st.binary(max_size=MAX_BYTES)))


BUILDERS: Dict[str, Callable[[Path], ParserTarget]] = {
    "calibration_cache": _calibration_cache,
    "tegrastats_line": _tegrastats,
    "model_sidecar": _model_sidecar,
    "engine_sidecar": _engine_sidecar,
    "bundle_manifest": _bundle_manifest,
    "target_profile": _target_profile,
    "distill_recipe": lambda work: _config(work, "distill_recipe", "distill_recipe_class",
                                           ["recipes/distill_fashion_mnist.yaml"]),
    "build_options": _build_options,
    "inspector_json": _inspector,
    "tf_graphdef": _graphdef,
    "video_source": _video_source,
    "prune_plan": _prune_plan,
    "person_labels": _person_labels,
    "qdq_scales": _qdq_scales,
    "onnx_wire": _onnx_wire,
}

#: targets whose code needs an optional package: the CI test skips them without it
NEEDS = {"distill_recipe": "torch", "prune_plan": "torch", "qdq_scales": "onnx", "onnx_wire": "onnx"}


def make_target(name: str, work: Optional[Path] = None) -> ParserTarget:
    """The fuzz target ``name`` with its scratch files in ``work`` (a new temporary folder by default)."""
    folder = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="jetforge-fuzz-"))
    folder.mkdir(parents=True, exist_ok=True)
    return BUILDERS[name](folder)
