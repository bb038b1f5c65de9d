"""The import rules of docs/architecture.md ("The layers"), read from the source of every module.

    root <- targets <- runtime <- vision <- calibrate <- compress;   apps -> vision, runtime, targets;
    deploy -> vision, runtime, targets;   workflow -> apps, deploy, vision, runtime, targets (calibrate, compress
    lazily);   cli -> workflow, apps, deploy, vision, runtime, targets (calibrate, compress lazily)

Every folder may import the root package (``jetforge``, ``jetforge.errors``, ``.config``,
``.fileio``, ``.optional``, ``.registry``, ``.progress``, ``.table``, ``.entry``, ``.assets``).  ``cli/`` and
``workflow/`` may import ``calibrate`` and ``compress`` inside a function (a command runs them lazily); nowhere
else may a lazy import break the direction.  ``calibrate`` never imports torch.  The device side
(``jetforge/``, ``targets/``, ``runtime/``, ``vision/``, ``apps/``, ``deploy/``, ``workflow/``, ``cli/``) imports no
optional heavy package at module level: they are imported inside the function that needs them.  No module outside
``cli/`` starts or names the CLI, and no module builds a path that leaves the package (the guards at the end).
"""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder -> the area (jetforge subpackage) its modules belong to
FOLDERS = {"jetforge": "root", "targets": "targets", "runtime": "runtime", "vision": "vision", "calibrate": "calibrate",
           "compress": "compress", "apps": "apps", "deploy": "deploy", "workflow": "workflow", "cli": "cli"}
ROOT_MODULES = {"jetforge", "jetforge.errors", "jetforge.config", "jetforge.fileio", "jetforge.optional",
                "jetforge.registry", "jetforge.progress", "jetforge.table", "jetforge.entry", "jetforge.assets",
                "jetforge.assets.catalog", "jetforge.assets.store", "jetforge.assets.shipped_files", "jetforge.output_set", "jetforge.jsonfile"}
# area -> areas it may import (besides itself and the root modules)
ALLOWED: Dict[str, Set[str]] = {
    "root": set(),
    "targets": set(),
    "runtime": {"targets"},
    "vision": {"runtime", "targets"},
    "calibrate": {"vision", "runtime", "targets"},
    "compress": {"calibrate", "vision", "runtime", "targets"},
    "apps": {"vision", "runtime", "targets"},
    "deploy": {"vision", "runtime", "targets"},
    "workflow": {"apps", "deploy", "vision", "runtime", "targets"},
    "cli": {"workflow", "apps", "deploy", "vision", "runtime", "targets"},
}
# folder prefix -> areas allowed inside functions
LAZY_EXTRA = {"cli": {"calibrate", "compress"}, "workflow": {"calibrate", "compress"}}
ENTRY_POINTS = {"jetforge/__main__.py": {"cli"}}  # `python -m jetforge` runs the CLI
HEAVY = {"torch", "torchvision", "onnxruntime", "onnx", "onnx_graphsurgeon", "tensorrt", "tensorrt_rtx", "cuda",
         "pycuda", "pynvml", "matplotlib"}
DEVICE_AREAS = {"root", "targets", "runtime", "vision", "apps", "deploy", "workflow", "cli"}
TORCH = {"torch", "torchvision"}


class Import:
    def __init__(self, module: str, line: int, lazy: bool, type_checking: bool) -> None:
        self.module = module
        self.line = line
        self.lazy = lazy  # inside a function: runs when called, not at import
        self.type_checking = type_checking  # under `if TYPE_CHECKING:`: never runs


def _package_of(rel: str) -> str:
    """``runtime/session/ort.py`` -> ``jetforge.runtime.session`` (the package a relative import starts in)."""
    parts = rel[:-3].split("/")
    folder = parts[0]
    base = ["jetforge"] if folder == "jetforge" else ["jetforge", folder]
    inner = parts[1:]
    if inner and inner[-1] == "__init__":
        inner = inner[:-1]
    else:
        inner = inner[:-1]
    return ".".join(base + inner)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def scan_imports(source: str, rel: str) -> Iterator[Import]:
    """Every import in ``source`` (a file at ``rel`` in the repository), with absolute module names."""
    package = _package_of(rel)

    def visit(node: ast.AST, lazy: bool, tc: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(alias.name, child.lineno, lazy, tc)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parts = package.split(".")
                    if child.level - 1 >= len(parts):
                        yield Import("<relative import beyond jetforge>", child.lineno, lazy, tc)
                        continue
                    base = ".".join(parts[:len(parts) - (child.level - 1)])
                    module = base + "." + child.module if child.module else base
                else:
                    module = child.module or ""
                yield Import(module, child.lineno, lazy, tc)
                # `from jetforge import runtime` imports the subpackage jetforge.runtime
                if module == "jetforge":
                    for alias in child.names:
                        if alias.name in FOLDERS.values():
                            yield Import("jetforge." + alias.name, child.lineno, lazy, tc)
            elif isinstance(child, ast.Call) and _dynamic_import_name(child):
                yield Import(_dynamic_import_name(child) or "", child.lineno, lazy, tc)
                yield from visit(child, lazy, tc)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, True, tc)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), lazy, True)
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), lazy, tc)
            else:
                yield from visit(child, lazy, tc)

    yield from visit(ast.parse(source, filename=rel), False, False)


def _dynamic_import_name(call: ast.Call) -> Optional[str]:
    """The module of ``importlib.import_module("x")`` / ``__import__("x")`` with a literal name."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in ("import_module", "__import__") and call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
            return arg.value
    return None


def _area_of_module(module: str) -> Optional[str]:
    """The jetforge area a module belongs to, or None for third-party/stdlib."""
    parts = module.split(".")
    if parts[0] != "jetforge":
        return None
    if len(parts) > 1 and parts[1] in FOLDERS and parts[1] != "jetforge":
        return FOLDERS[parts[1]]
    return "root"


def check_source(source: str, rel: str) -> List[str]:
    """Violations of the import rules in one file, as ``path:line: message``."""
    folder = rel.split("/")[0]
    area = FOLDERS[folder]
    problems = []
    for imp in scan_imports(source, rel):
        top = imp.module.split(".")[0]
        where = "%s:%d: " % (rel, imp.line)
        if imp.module.startswith("<"):
            problems.append(where + imp.module)
            continue
        if top in FOLDERS.values() and top != "jetforge":
            problems.append(where + "imports %r by its folder name; write jetforge.%s" % (imp.module, imp.module))
            continue
        if area == "calibrate" and top in TORCH:
            problems.append(where + "calibrate imports %s (calibrate must never need torch)" % imp.module)
        if area in DEVICE_AREAS and top in HEAVY and not imp.lazy and not imp.type_checking:
            problems.append(where + "imports optional package %r at module level; import it inside the function "
                            "that needs it with jetforge.optional.require()" % top)
        target = _area_of_module(imp.module)
        if target is None or target == area:
            continue
        if target == "root":
            if imp.module in ROOT_MODULES or imp.module.startswith("jetforge.__"):
                continue
            problems.append(where + "imports %r, which is not one of the shared root modules %s"
                            % (imp.module, sorted(ROOT_MODULES)))
            continue
        allowed = set(ALLOWED[area]) | ENTRY_POINTS.get(rel, set())
        if imp.lazy:
            for prefix, extra in LAZY_EXTRA.items():
                if rel.startswith(prefix + "/"):
                    allowed |= extra
        if target not in allowed:
            how = "inside a function " if imp.lazy else ""
            problems.append(where + "%s imports %s%r: the dependency direction is targets <- runtime <- vision <- "
                            "calibrate <- compress; apps, deploy -> vision, runtime, targets; cli -> everything "
                            "(calibrate, compress lazily)" % (area, how, imp.module))
    return problems


PACKAGE = ROOT / "src" / "jetforge"


def _python_files() -> List[Tuple[Path, str]]:
    """(path, rel) of every module: rel is the layer's folder and the path below it (``runtime/session/ort.py``),
    ``jetforge/...`` for the root package's own modules (``jetforge/errors.py``, ``jetforge/assets/store.py``)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        out.append((path, rel if rel.split("/")[0] in FOLDERS and "/" in rel else "jetforge/" + rel))
    return out


def test_every_module_follows_the_dependency_direction():
    files = _python_files()
    assert len(files) > 10, "found too few modules; is ROOT right? %s" % ROOT
    problems = []
    for path, rel in files:
        problems.extend(check_source(path.read_text(encoding="utf-8"), rel))
    assert not problems, "import rule violations:\n  " + "\n  ".join(problems)


# The checker itself: each rule fires on a one-line example and stays quiet on the allowed form.
@pytest.mark.parametrize("rel, source, expect", [
    ("targets/x.py", "from jetforge.runtime import inputs", "direction"),
    ("runtime/x.py", "import jetforge.calibrate.cache.format", "direction"),
    ("runtime/x.py", "def f():\n    from jetforge.calibrate.cache import format as cache", "inside a function"),
    ("calibrate/x.py", "from jetforge.compress import export", "direction"),
    ("apps/video/x.py", "def f():\n    import jetforge.compress", "direction"),
    ("cli/cmd_x.py", "from jetforge.calibrate.cache import format as cache", "direction"),
    ("cli/cmd_x.py", "import jetforge.compress.export", "direction"),
    ("apps/x.py", "from jetforge.deploy import bundle", "direction"),
    ("apps/tasks/x.py", "from jetforge.cli.model_refs import resolve", "direction"),
    ("apps/x.py", "def f():\n    from jetforge.cli import main", "inside a function"),
    ("deploy/x.py", "from jetforge.apps.video import open_source", "direction"),
    ("deploy/x.py", "def f():\n    import jetforge.calibrate.cache.format", "direction"),
    ("runtime/x.py", "from jetforge.deploy.bundle import verify_bundle", "direction"),
    ("compress/x.py", "from jetforge.apps.labels import load_labels", "direction"),
    ("jetforge/assets/x.py", "from jetforge.apps.progress import progress_bar", "direction"),
    ("calibrate/x.py", "def f():\n    import torch", "never need torch"),
    ("calibrate/x.py", "from torchvision import models", "never need torch"),
    ("runtime/x.py", "import tensorrt as trt", "at module level"),
    ("apps/x.py", "try:\n    import onnxruntime\nexcept ImportError:\n    pass", "at module level"),
    ("jetforge/x.py", "from cuda.bindings import runtime", "at module level"),
    ("runtime/x.py", "from runtime.inputs import Preprocess", "folder name"),
    ("runtime/session/x.py", "from ...calibrate import cache", "direction"),
    ("targets/x.py", "from jetforge import runtime", "direction"),
    ("targets/x.py", "import importlib\nimportlib.import_module('jetforge.runtime')", "direction"),
    ("runtime/x.py", "from jetforge import cli", "direction"),
    ("deploy/x.py", "import tensorrt", "at module level"),
    ("jetforge/x.py", "from jetforge.targets import get_target", "direction"),
    ("targets/x.py", "from jetforge.unknown import thing", "shared root modules"),
    ("workflow/x.py", "from jetforge.cli.base import Command", "direction"),      # the CLI imports workflow
    ("workflow/x.py", "from jetforge.compress.export import export_onnx", "direction"),  # compress only lazily
    ("deploy/x.py", "from jetforge.workflow.model_refs import load_torch_model", "direction"),
    ("workflow/x.py", "import torch", "at module level"),                        # device side: torch-free
    ("vision/x.py", "from jetforge.apps.tasks.people import PeopleApp", "direction"),   # apps import vision
    ("vision/x.py", "def f():\n    from jetforge.calibrate.detection_eval import check", "inside a function"),
    ("vision/x.py", "from jetforge.cli.main import main", "direction"),
    ("runtime/x.py", "from jetforge.vision.ssd import postprocess", "direction"),  # runtime is below vision
    ("runtime/cuda/kernels/x.py", "def f():\n    from jetforge.vision.ssd_batch import select", "direction"),
    ("vision/x.py", "import torch", "at module level"),                          # device side: torch-free
])
def test_checker_catches(rel, source, expect):
    problems = check_source(source, rel)
    assert problems and expect in problems[0], problems


@pytest.mark.parametrize("rel, source", [
    ("runtime/x.py", "from jetforge.targets import get_target\nfrom jetforge.errors import BackendError"),
    ("runtime/x.py", "def f():\n    import tensorrt\n    from jetforge.optional import require"),
    ("runtime/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import onnxruntime"),
    ("runtime/session/x.py", "from ..inputs import Preprocess\nfrom . import base"),
    ("calibrate/x.py", "import onnx\nimport onnxruntime\nfrom jetforge.runtime.inputs import Preprocess"),
    ("compress/x.py", "import torch\nfrom jetforge.calibrate.cache.format import write_cache"),
    ("cli/cmd_x.py", "def run():\n    from jetforge.compress.export import export_onnx"),
    ("cli/cmd_x.py", "from jetforge.deploy.bundle import create_bundle\nfrom jetforge.apps.video import open_source"),
    ("deploy/x.py", "from jetforge.runtime.tensorrt.engine_cache import EngineCache\nfrom jetforge.targets import get"),
    ("compress/x.py", "from jetforge.assets import asset_path\nfrom jetforge.progress import progress_bar"),
    ("apps/video/x.py", "import cv2\nimport numpy as np\nfrom jetforge.runtime import inputs"),
    ("jetforge/__main__.py", "from jetforge.cli.main import main"),
    ("targets/x.py", "import yaml\nfrom jetforge.config import load_config\nimport jetforge"),
    ("workflow/x.py", "from jetforge.apps.labels import load_labels\nfrom jetforge.deploy import bundle"),
    ("workflow/x.py", "def f():\n    from jetforge.compress.export import export_onnx"),
    ("cli/cmd_x.py", "from jetforge.workflow.model_refs import prepare_app_models"),
    ("vision/x.py", "import cv2\nfrom jetforge.runtime.inputs import ResizePlan\nfrom jetforge.targets import get"),
    ("calibrate/x.py", "from jetforge.vision.detection_metrics import paired_bootstrap"),
    ("compress/x.py", "from jetforge.vision.tiles import cut_tile"),
    ("apps/tasks/x.py", "from jetforge.vision.tracking import Tracker"),
    ("deploy/x.py", "def f():\n    from jetforge.vision.ssd import spec_from_sidecar"),
])
def test_checker_allows(rel, source):
    assert check_source(source, rel) == []


# ---- a task never imports the CLI --------------------------------------------------------------------------------
TASKS_FOLDER = "apps/tasks/"


def cli_imports(source: str, rel: str) -> List[str]:
    """Imports of ``jetforge.cli`` in ``source``: at module level, inside functions and under TYPE_CHECKING alike
    (a task that needs a model made on the workstation gets it from the CLI through its options, never by import)."""
    return ["%s:%d: imports %s" % (rel, imp.line, imp.module) for imp in scan_imports(source, rel)
            if imp.module == "jetforge.cli" or imp.module.startswith("jetforge.cli.")]


def test_no_task_imports_the_cli():
    tasks = [(p, rel) for p, rel in _python_files() if rel.startswith(TASKS_FOLDER)]
    assert len(tasks) >= 5, "found too few task modules under %s: %s" % (TASKS_FOLDER, tasks)
    problems = [line for p, rel in tasks for line in cli_imports(p.read_text(encoding="utf-8"), rel)]
    assert not problems, "tasks importing the CLI (move what they need below apps/):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("source, count", [
    ("from jetforge.cli.model_refs import prepare_app_models", 1),
    ("def build():\n    from jetforge.cli import model_refs", 1),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jetforge.cli.base import Command", 1),
    ("from jetforge import cli", 1),
    ("from jetforge.apps.tasks.base import App\nimport jetforge.client_x\nfrom jetforge.runtime import inputs", 0),
])
def test_cli_import_scanner(source, count):
    assert len(cli_imports(source, "apps/tasks/x.py")) == count


# ---- no import cycles (module level and inside functions alike) ------------------------------------------------
def _module_name(rel: str) -> str:
    """``runtime/session/ort.py`` -> ``jetforge.runtime.session.ort``; a package's ``__init__.py`` -> the package."""
    parts = rel[:-3].split("/")
    base = ["jetforge"] if parts[0] == "jetforge" else ["jetforge", parts[0]]
    inner = parts[1:-1] if parts[-1] == "__init__" else parts[1:]
    return ".".join(base + inner)


def module_graph(sources: Dict[str, str]) -> Dict[str, Set[str]]:
    """{module: modules of ours it imports} from ``{rel path: source}``; lazy imports count, TYPE_CHECKING ones not.

    ``from package import name`` is an edge to ``package.name`` when that is a module, else to the package.
    A package's ``__init__`` importing its own submodules (re-exporting them) is not an edge: importing a
    submodule runs its package's ``__init__`` anyway, and the re-export cannot form a loop by itself.
    """
    modules = {_module_name(rel): rel for rel in sources}
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for module, rel in modules.items():
        is_package = rel.endswith("__init__.py")
        tree = ast.parse(sources[rel], filename=rel)
        targets = {imp.module for imp in scan_imports(sources[rel], rel) if not imp.type_checking}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = _package_of(rel).split(".")
                    base = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
                targets.update(base + "." + alias.name for alias in node.names if base + "." + alias.name in modules)
        for target in targets:
            if target not in modules or target == module:
                continue
            if is_package and target.startswith(module + "."):
                continue
            graph[module].add(target)
    return graph


def import_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def test_no_import_cycles():
    sources = {rel: path.read_text(encoding="utf-8") for path, rel in _python_files()}
    cycles = import_cycles(module_graph(sources))
    assert not cycles, "import cycles (lazy imports included; break them by moving the shared part down):\n  " + \
        "\n  ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_on_small_graphs():
    sources = {
        "apps/a.py": "from jetforge.apps import b\n",
        "apps/b.py": "def f():\n    from jetforge.apps.c import x\n",  # a lazy edge closes the loop too
        "apps/c.py": "import jetforge.apps.a\n",
        "apps/pkg/__init__.py": "from jetforge.apps.pkg.m import y\n",  # a re-export is not an edge
        "apps/pkg/m.py": "from jetforge.apps.pkg import z\n",
        "apps/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jetforge.apps.e import T\n",
        "apps/e.py": "from jetforge.apps.d import U\n",
    }
    graph = module_graph(sources)
    assert graph["jetforge.apps.a"] == {"jetforge.apps.b"} and graph["jetforge.apps.pkg"] == set()
    assert import_cycles(graph) == [["jetforge.apps.a", "jetforge.apps.b", "jetforge.apps.c"]]


def test_no_test_folder_shadows_an_imported_package():
    """pytest puts test folders on ``sys.path`` (no ``__init__.py``: rootdir-relative imports), so a folder
    ``tests/runtime/tensorrt/`` would make ``import tensorrt`` find that folder instead of TensorRT.  Test
    folders mirror the source tree except where a name would shadow a package (``tests/runtime/trt/``)."""
    shadowing = HEAVY | {"numpy", "cv2", "yaml", "tqdm", "psutil", "pytest", "hypothesis", "jetforge"}
    bad = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*")
                 if p.is_dir() and p.name in shadowing)
    assert not bad, "test folders named like packages the code imports: %s" % bad


# ---- TensorRT has one home: runtime/tensorrt (docs/architecture.md, "The TensorRT package") --------------------
TENSORRT_LIBRARIES = {"tensorrt", "tensorrt_rtx"}
TENSORRT_PACKAGE = "runtime/tensorrt/"
# calls that import (or probe) a module named by a literal string
_IMPORTING_CALLS = {"require", "is_available", "import_module", "__import__", "find_spec", "importorskip"}


def tensorrt_imports(source: str, rel: str) -> List[str]:
    """Every place in ``source`` that imports TensorRT or TensorRT-RTX itself: an import statement, or a call
    such as ``require("tensorrt")`` / ``is_available("tensorrt_rtx")`` / ``importlib.import_module("tensorrt")``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            arg = node.args[0]
            if called in _IMPORTING_CALLS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names = [arg.value]
        for name in names:
            if name.split(".")[0] in TENSORRT_LIBRARIES:
                found.append("%s:%d: imports %s outside %s; use jetforge.runtime.tensorrt.library.load_tensorrt"
                             % (rel, node.lineno, name, TENSORRT_PACKAGE))
    return found


def test_nothing_outside_the_tensorrt_package_imports_tensorrt():
    """Source folders and tests/hardware reach TensorRT and TensorRT-RTX only through runtime/tensorrt."""
    files = [(p, rel) for p, rel in _python_files() if not rel.startswith(TENSORRT_PACKAGE)]
    files += [(p, p.relative_to(ROOT).as_posix()) for p in sorted((ROOT / "tests" / "hardware").rglob("*.py"))]
    problems = []
    for path, rel in files:
        problems.extend(tensorrt_imports(path.read_text(encoding="utf-8"), rel))
    assert not problems, "TensorRT imported outside its package:\n  " + "\n  ".join(problems)
    inside = [rel for p, rel in _python_files() if rel.startswith(TENSORRT_PACKAGE)
              and tensorrt_imports(p.read_text(encoding="utf-8"), rel)]
    assert inside == [], "the package imports TensorRT only through library.load_tensorrt: %s" % inside


@pytest.mark.parametrize("source, count", [
    ("import tensorrt as trt", 1), ("from tensorrt_rtx import Builder", 1), ("import tensorrt.plugin", 1),
    ("def f():\n    trt = require('tensorrt', 'x')", 1), ("importlib.import_module('tensorrt_rtx')", 1),
    ("if is_available('tensorrt'):\n    pass", 1), ("pytest.importorskip('tensorrt_rtx')", 1),
    ("from jetforge.runtime.tensorrt import load_tensorrt\ntrt = load_tensorrt('rtx')", 0),
    ("x = {'tensorrt': 1}\nprint('tensorrt')\nimport tensorrt_tools_unrelated", 0),
])
def test_tensorrt_import_scanner(source, count):
    assert len(tensorrt_imports(source, "apps/x.py")) == count


# --- sizes: small modules with one job, short functions (docs/CONVENTIONS.md, issue 13) ----------------------------
# The rule covers the library: every module of FOLDERS.  benchmarks/ scripts and tests/ are outside it (a benchmark
# is one script that runs one measurement end to end; a test file holds the tests of one module).
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80  # from `def` (decorators included) to the last line, not counting the docstring
# Tables of data may be longer than the limits (a table is read, not followed).  Each entry names the module
# ("path") or function ("path:qualified.name") and says which table it is.  None is needed today.
SIZE_ALLOWED: Dict[str, str] = {}


def function_lengths(source: str) -> Iterator[Tuple[str, int, int]]:
    """(qualified name, first line, length) of every function and method in ``source``, nested ones included."""
    def visit(node: ast.AST, prefix: str) -> Iterator[Tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                length = child.end_lineno - first + 1  # type: ignore[operator]
                head = child.body[0]
                if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant) \
                        and isinstance(head.value.value, str):
                    length -= head.end_lineno - head.lineno + 1  # type: ignore[operator]
                yield prefix + child.name, first, length
                yield from visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            else:
                yield from visit(child, prefix)
    return visit(ast.parse(source), "")


def size_problems(source: str, rel: str, allowed: Optional[Dict[str, str]] = None) -> List[str]:
    """One line per module over MAX_MODULE_LINES and per function over MAX_FUNCTION_LINES, unless allowed."""
    allowed = SIZE_ALLOWED if allowed is None else allowed
    problems = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES and rel not in allowed:
        problems.append("%s: %d lines (limit %d): split it into modules of one job each"
                        % (rel, lines, MAX_MODULE_LINES))
    for name, line, length in function_lengths(source):
        if length > MAX_FUNCTION_LINES and "%s:%s" % (rel, name) not in allowed:
            problems.append("%s:%d: %s is %d lines without its docstring (limit %d)"
                            % (rel, line, name, length, MAX_FUNCTION_LINES))
    return problems


def test_library_modules_and_functions_keep_the_size_limits():
    problems = []
    for path, rel in _python_files():
        problems.extend(size_problems(path.read_text(encoding="utf-8"), rel))
    assert not problems, "too large (docs/CONVENTIONS.md, Layout and imports):\n  " + "\n  ".join(problems)
    known = {rel for _, rel in _python_files()}
    stale = [key for key in SIZE_ALLOWED if key.split(":")[0] not in known]
    assert not stale, "SIZE_ALLOWED names modules that do not exist: %s" % stale


def _function_of(lines: int, docstring: int = 0, decorated: bool = False) -> str:
    """A function whose length as counted above is ``lines`` (``docstring`` more lines are its docstring)."""
    head = ["@staticmethod"] if decorated else []
    head.append("def f():")
    doc = ['    """'] + ["    why"] * max(0, docstring - 2) + ['    """'] if docstring else []
    body = ["    x = %d" % i for i in range(lines - len(head) - 1)] + ["    return x"]
    return "\n".join(head + doc + body) + "\n"


@pytest.mark.parametrize("source, rel, allowed, count", [
    (_function_of(80), "apps/x.py", {}, 0),
    (_function_of(81), "apps/x.py", {}, 1),
    (_function_of(80, docstring=30), "apps/x.py", {}, 0),          # a docstring that says why is not counted
    (_function_of(81, decorated=True), "apps/x.py", {}, 1),        # the decorator line counts
    ("class A:\n" + "\n".join("    " + l for l in _function_of(81).splitlines()), "apps/x.py", {}, 1),
    (_function_of(81), "apps/x.py", {"apps/x.py:f": "a table of op names"}, 0),
    ("x = 1\n" * 500, "runtime/x.py", {}, 0),
    ("x = 1\n" * 501, "runtime/x.py", {}, 1),
    ("x = 1\n" * 501, "runtime/x.py", {"runtime/x.py": "a table of layer costs"}, 0),
])
def test_size_checker(source, rel, allowed, count):
    problems = size_problems(source, rel, allowed)
    assert len(problems) == count, problems


# ---- nothing below the CLI starts or names it (issue 23: no subprocess into the CLI from a library layer) ----------
# A library layer that needs what a command does calls the library function the command calls; it never runs
# `jetforge ...`, `python -m jetforge[.cli...]` or imports jetforge.cli.  Only the CLI itself and
# `python -m jetforge` (jetforge/__main__.py, the CLI's own entry point) are exempt.
CLI_OWN = ("cli/", "jetforge/__main__.py")
_PROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "system", "popen", "execv", "execvp",
                  "execvpe", "execl", "execlp", "spawnv", "spawnvp", "create_subprocess_exec",
                  "create_subprocess_shell", "run_module", "run_path", "which"}
_PROCESS_MODULES = {"subprocess", "os", "asyncio", "runpy", "shutil"}


def _docstrings(tree: ast.AST) -> Set[int]:
    """ids of the docstring constants of a module, its classes and functions (text about the CLI is fine)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            head = node.body[0]
            if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant):
                found.add(id(head.value))
    return found


def _names_cli_module(text: str) -> bool:
    return text in ("jetforge.cli", "jetforge.__main__") or text.startswith("jetforge.cli.")


def _strings(node: ast.AST) -> List[str]:
    """The literal strings of a list/tuple literal ("" for an element that is not one)."""
    elts = node.elts if isinstance(node, (ast.List, ast.Tuple)) else []
    return [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "" for e in elts]


def _starts_jetforge(args: List[str]) -> bool:
    """An argv that runs the console script or the package: ``jetforge ...`` / ``.../jetforge`` / ``-m jetforge``."""
    if args and (args[0] == "jetforge" or args[0].endswith("/jetforge")):
        return True
    return any(a == "-m" and (b == "jetforge" or _names_cli_module(b)) for a, b in zip(args, args[1:]))


def _process_call(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return (func.attr in _PROCESS_CALLS and isinstance(func.value, ast.Name)
                and func.value.id in _PROCESS_MODULES)
    return isinstance(func, ast.Name) and func.id in {"Popen", "check_output", "check_call", "run_module"}


def cli_starts(source: str, rel: str) -> List[str]:
    """Where ``source`` (the module at ``rel``) imports the CLI, names its module, or starts ``jetforge`` in a
    process: a process call (``subprocess.*``, ``os.system``/``exec*``, ``runpy``, ``shutil.which``) whose command is
    ``jetforge ...``, ``python -m jetforge[.cli...]`` or a shell line running ``jetforge``."""
    found = ["%s:%d: imports %s" % (rel, imp.line, imp.module) for imp in scan_imports(source, rel)
             if imp.module == "jetforge.cli" or imp.module.startswith("jetforge.cli.")
             or imp.module == "jetforge.__main__"]
    tree = ast.parse(source, filename=rel)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and _names_cli_module(node.value):
            found.append("%s:%d: names the CLI module %r" % (rel, node.lineno, node.value))
        elif isinstance(node, (ast.List, ast.Tuple)) and any(a == "-m" for a in _strings(node)) \
                and _starts_jetforge(_strings(node)):
            found.append("%s:%d: builds the command line `%s`" % (rel, node.lineno, " ".join(_strings(node))))
        elif isinstance(node, ast.Call) and _process_call(node) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                words = first.value.replace(";", " ").replace("&", " ").replace("|", " ").split()
                if _starts_jetforge(words) or "jetforge" in words or _names_cli_module(first.value):
                    found.append("%s:%d: starts `%s`" % (rel, node.lineno, first.value))
            elif _starts_jetforge(_strings(first)):
                found.append("%s:%d: starts `%s`" % (rel, node.lineno, " ".join(_strings(first))))
    return sorted(set(found))


def test_no_module_outside_the_cli_starts_or_names_it():
    files = [(p, rel) for p, rel in _python_files() if not rel.startswith(CLI_OWN)]
    assert len(files) > 100, "found too few modules outside the CLI"
    problems = [line for p, rel in files for line in cli_starts(p.read_text(encoding="utf-8"), rel)]
    assert not problems, ("modules that start or name the CLI (call the library function the command calls):\n  "
                          + "\n  ".join(problems))


@pytest.mark.parametrize("rel, source, count", [
    ("compress/x.py", "import subprocess\nsubprocess.run(['jetforge', 'app', 'people', '--no-video'])", 1),
    ("compress/x.py", "import subprocess, sys\n"
                      "cmd = [sys.executable, '-m', 'jetforge.cli.main', '-q', 'app', 'people']\n"
                      "subprocess.run(cmd, capture_output=True)", 2),  # names the module and builds the line
    ("calibrate/x.py", "import subprocess, sys\nsubprocess.Popen([sys.executable, '-m', 'jetforge', 'calibrate'])", 2),
    ("apps/x.py", "import os\nos.system('jetforge app people --no-video --out run')", 1),
    ("vision/x.py", "import shutil\nexe = shutil.which('jetforge')", 1),
    ("runtime/x.py", "import runpy\nrunpy.run_module('jetforge.__main__', run_name='__main__')", 2),
    ("vision/x.py", "def tracks():\n    from jetforge.cli.cmd_calibrate import person_tracks", 1),
    ("deploy/x.py", "import importlib\nmain = importlib.import_module('jetforge.cli.main').main", 2),
    ("compress/x.py", "COMMAND = ('python', '-m', 'jetforge', 'app', 'people')", 1),
    ("compress/x.py", "PRUNERS = ('jetforge', 'torch_pruning')", 0),  # a name, not a command
    ("runtime/x.py", "INFO = {'tool': 'jetforge', 'version': '1'}", 0),
    ("apps/x.py", '"""Run by ``jetforge app people`` (:mod:`jetforge.cli.cmd_app`)."""\n', 0),  # a docstring
    ("jetforge/assets/x.py", "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pip', 'download'])", 0),
    ("deploy/x.py", "def f(target, opts):\n    return target.run([opts.remote_jetforge, 'doctor', '--json'])", 0),
])
def test_cli_start_scanner(rel, source, count):
    assert len(cli_starts(source, rel)) == count, cli_starts(source, rel)


# ---- no module builds a path that leaves the package (issue 23: an installed wheel has nothing around it) ---------
# Data a module reads ships inside the package (package data next to the module) or is passed in explicitly;
# `Path(__file__).parents[N]` beyond src/jetforge or `".."` in a path reaches the checkout, absent from a wheel.
_SAME_PATH = {"resolve", "absolute", "abspath", "realpath", "normpath", "Path", "PurePath", "fspath", "expanduser"}
_PATH_JOINS = {"join", "joinpath", "Path", "PurePath", "PosixPath"}
# the checkout's folders beside src/: a path from __file__ into one of them exists only in a checkout
REPOSITORY_FOLDERS = {"benchmarks", "datasets", "tests", "tools", "recipes", "docs", "src"}


def _levels_up(node: ast.AST) -> Optional[int]:
    """How many levels above the module's own file ``node`` points, if it is built from ``__file__``: the file is 0,
    its folder 1 (``Path(__file__).parent``, ``.parents[0]``, ``os.path.dirname(__file__)``), and so on."""
    if isinstance(node, ast.Name):
        return 0 if node.id == "__file__" else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _levels_up(node.value)
        return None if inner is None else inner + 1
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        index = node.slice.value if isinstance(node.slice, ast.Index) else node.slice  # type: ignore[attr-defined]
        inner = _levels_up(node.value.value)
        if inner is None or not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
            return None
        return inner + index.value + 1
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "dirname" and node.args:
            inner = _levels_up(node.args[0])
            return None if inner is None else inner + 1
        if name in _SAME_PATH:
            base = node.args[0] if node.args else func.value if isinstance(func, ast.Attribute) else None
            return _levels_up(base) if base is not None else None
    return None


def _from_file(node: ast.AST) -> bool:
    """Whether ``node`` is a path built from ``__file__`` (``Path(__file__).parents[1] / "x"`` included)."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        node = node.left
    return _levels_up(node) is not None


def escaping_paths(source: str, rel: str, depth: int) -> List[str]:
    """Where the module ``rel``, ``depth`` folders below the package root (``src/jetforge``), builds a path outside
    the package: a folder above the package root from ``__file__``, or ``".."`` joined into a path."""
    found = []
    for node in ast.walk(ast.parse(source, filename=rel)):
        up = _levels_up(node) if isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)) else None
        if up is not None and up > depth + 1:
            found.append((node.lineno, "reaches %d folder(s) above the package from __file__" % (up - depth - 1)))
        parts: List[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            parts = list(node.args) if name in _PATH_JOINS else []
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str) \
                    and ".." in part.value.replace("\\", "/").split("/"):
                found.append((node.lineno, "joins %r into a path" % part.value))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _from_file(node.left) \
                and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str) \
                and node.right.value.split("/")[0] in REPOSITORY_FOLDERS:
            found.append((node.lineno, "joins the checkout's folder %r to a path from __file__" % node.right.value))
    return sorted({"%s:%d: %s" % (rel, line, what) for line, what in found})


def test_no_package_module_builds_a_path_that_leaves_the_package():
    problems = []
    for path, rel in _python_files():
        depth = len(path.relative_to(PACKAGE).parts) - 1
        problems.extend(escaping_paths(path.read_text(encoding="utf-8"), rel, depth))
    assert not problems, ("paths leaving the package (ship the data as package data, or take the path as an "
                          "argument):\n  " + "\n  ".join(problems))


@pytest.mark.parametrize("source, depth, count", [
    ("from pathlib import Path\nLABELS = Path(__file__).resolve().parents[1] / 'benchmarks' / 'labels'", 0, 2),
    ("from pathlib import Path\nLABELS = Path(__file__).resolve().parents[2] / 'benchmarks'", 1, 2),
    ("from pathlib import Path\nLABELS = Path(__file__).resolve().parents[1] / 'benchmarks' / 'labels' / 'x.json'", 1, 1),
    ("from pathlib import Path\nNAME = Path(out) / 'benchmarks'", 1, 0),  # not from __file__: the caller's folder
    ("from pathlib import Path\nDATA = Path(__file__).resolve().parents[1] / 'data'", 1, 0),  # the package root
    ("from pathlib import Path\nDATA = Path(__file__).parent / 'data' / 'people_boxes.json'", 0, 0),
    ("from pathlib import Path\nX = Path(__file__).parent.parent.parent.parent.parent", 3, 1),
    ("from pathlib import Path\nX = Path(__file__).parent.parent.parent.parent", 3, 0),
    ("import os\nX = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))", 1, 1),
    ("import os\nX = os.path.join(os.path.dirname(__file__), '..', '..', 'benchmarks', 'labels')", 1, 1),
    ("from pathlib import Path\nX = Path(__file__).parent / '..' / 'datasets'", 1, 2),  # '..' and 'datasets'
    ("from pathlib import Path\nX = Path(__file__).with_name('../x.json')", 1, 0),  # not a path join: not flagged
    ("from pathlib import Path\ndef ok(name):\n    return '..' not in Path(name).parts", 1, 0),  # a check, not a join
])
def test_escaping_path_scanner(source, depth, count):
    assert len(escaping_paths(source, "x/y.py", depth)) == count, escaping_paths(source, "x/y.py", depth)
