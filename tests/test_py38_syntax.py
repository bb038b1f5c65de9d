"""The device side (jetforge/, targets/, runtime/, apps/, deploy/, cli/) keeps to Python 3.8 (JetPack 5).

No 3.8 interpreter is available here, so vermin checks syntax and standard-library use
statically.  What vermin cannot see is checked from the AST as well: that every file
parses with the 3.8 grammar (vermin reports a syntax error but exits 0),
``str.removeprefix``/``removesuffix`` on a variable (vermin needs a literal to know it is a
str), and string annotations of dataclass fields, which ``jetforge.config`` evaluates with
``typing.get_type_hints`` (so ``"list[int]"`` or ``"int | None"`` there fails on 3.8).
"""

import ast
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "jetforge"
# the device side: the package without its workstation layers (calibrate, compress need Python 3.11 and torch)
WORKSTATION_ONLY = ("calibrate", "compress", "__pycache__")
DEVICE_PATHS = sorted(p.relative_to(ROOT) for p in PACKAGE.iterdir()
                      if (p.suffix == ".py" or p.is_dir()) and p.name not in WORKSTATION_ONLY)
VERMIN = ["--no-tips", "--violations", "-t=3.8-", "--eval-annotations", "--feature", "union-types",
          "--no-config-file", "--no-make-paths-absolute"]
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def _vermin(paths, cwd):
    try:
        import vermin  # noqa: F401
    except ImportError:
        pytest.fail("vermin is not installed; it is pinned in requirements/dev.lock (run ./dev env)")
    command = [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())"]  # vermin has no __main__
    return subprocess.run(command + VERMIN + [str(p) for p in paths], cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)


def test_device_side_needs_at_most_python_3_8():
    assert Path("src/jetforge/runtime") in DEVICE_PATHS and Path("src/jetforge/errors.py") in DEVICE_PATHS
    proc = _vermin(DEVICE_PATHS, ROOT)
    assert proc.returncode == 0, "code that needs Python > 3.8 (JetPack 5 has 3.8):\n" + proc.stdout
    assert "Target versions not met" not in proc.stdout, proc.stdout


def test_vermin_flags_catch_newer_code(tmp_path):
    """The flags above really fail on the constructs CONVENTIONS.md forbids."""
    (tmp_path / "new.py").write_text(
        "import functools\n"
        "from dataclasses import dataclass\n"
        "@dataclass(slots=True)\n"
        "class A:\n"
        "    x: list[int]\n"
        "    y: int | None = None\n"
        "def f(v):\n"
        "    match v:\n"
        "        case 1:\n"
        "            return 'abc'.removeprefix('a')\n"
        "@functools.cache\n"
        "def g():\n"
        "    pass\n")
    proc = _vermin([tmp_path], tmp_path)
    assert proc.returncode != 0
    for needle in ("dataclass(slots)", "list[..]", "X | Y", "pattern matching", "str.removeprefix",
                   "functools.cache"):
        assert needle in proc.stdout, (needle, proc.stdout)


def _annotation_problems(text: str) -> List[str]:
    """What in a string annotation needs Python >= 3.9/3.10 when evaluated."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return ["unparsable annotation %r" % text]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            out.append("%r uses X | Y (3.10); write Optional[...] / Union[...]" % text)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
            out.append("%r uses %s[...] (3.9); write typing.%s[...]" % (text, node.value.id,
                                                                      node.value.id.capitalize()))
    return out


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def check_source(source: str, rel: str) -> List[str]:
    # vermin reports a file it cannot parse yet exits 0 (and --pessimistic then hides the other
    # files' findings), so parsing with the 3.8 grammar is checked here.
    try:
        tree = ast.parse(source, filename=rel, feature_version=(3, 8))
    except SyntaxError as err:
        return ["%s:%s: does not parse as Python 3.8: %s" % (rel, err.lineno, err.msg)]
    future_annotations = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                             any(a.name == "annotations" for a in n.names) for n in tree.body)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "removeprefix", "removesuffix"):
            problems.append("%s:%d: .%s() needs Python 3.9" % (rel, node.lineno, node.func.attr))
        if isinstance(node, ast.ClassDef) and _is_dataclass(node):
            for stmt in node.body:
                if not isinstance(stmt, ast.AnnAssign):
                    continue
                ann = stmt.annotation
                if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    text = ann.value
                elif future_annotations:
                    text = ast.get_source_segment(source, ann) or ""
                else:
                    continue  # evaluated at definition: vermin --eval-annotations sees it
                for problem in _annotation_problems(text):
                    problems.append("%s:%d: dataclass field annotation %s" % (rel, stmt.lineno, problem))
    return problems


def test_no_3_9_calls_or_dataclass_annotations_vermin_cannot_see():
    problems = []
    for top in DEVICE_PATHS:
        for path in ([ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*.py"))):
            rel = path.relative_to(ROOT).as_posix()
            problems.extend(check_source(path.read_text(encoding="utf-8"), rel))
    assert not problems, "needs Python > 3.8:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("source, expect", [
    ("def f(name):\n    return name.removeprefix('x')\n", ".removeprefix() needs Python 3.9"),
    ("from dataclasses import dataclass\n@dataclass\nclass A:\n    x: 'list[int]' = None\n", "list[...] (3.9)"),
    ("import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass A:\n    x: 'int | None' = None\n", "X | Y"),
    ("from __future__ import annotations\nfrom dataclasses import dataclass\n@dataclass\nclass A:\n"
     "    x: dict[str, int]\n", "dict[...] (3.9)"),
    ("def f(v):\n    match v:\n        case 1:\n            pass\n", "does not parse as Python 3.8"),
    ("def f(:\n", "does not parse as Python 3.8"),
])
def test_ast_check_catches(source, expect):
    problems = check_source(source, "x.py")
    assert problems and expect in problems[0], problems


def test_ast_check_allows_3_8_forms():
    source = ("from dataclasses import dataclass\nfrom typing import List, Optional\n@dataclass\nclass A:\n"
              "    x: 'List[int]'\n    y: Optional[int] = None\n"
              "def f(p: 'str | None') -> 'list[int]':\n    return []\n")
    assert check_source(source, "x.py") == []
