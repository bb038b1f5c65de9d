"""The repository stands alone: no file points to a document outside it, and the architecture map exists.

A user or contributor has only the repository, so code, tests, comments, docs and YAML cite
docs/architecture.md (or a primary source), never a team file next to the checkout.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the strings are assembled so that this file does not match itself
FORBIDDEN = ("../" + "shared", "shared/" + "reference", "shared/" + "docs", "reference " + "\u00a7", "design" + ".md")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist", "runs", "out",
             "results", "jetforge-demo", "node_modules"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".txt", ".toml", ".cfg", ".ini", ".sh", ".cpp", ".h", ""}


def _text_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            try:
                yield rel.as_posix(), path.read_text(encoding="utf-8")
            except UnicodeDecodeError:  # a binary file without a suffix
                continue


def test_no_file_points_outside_the_repository():
    found = []
    for rel, text in _text_files():
        for n, line in enumerate(text.splitlines(), 1):
            for needle in FORBIDDEN:
                if needle in line:
                    found.append("%s:%d: %r" % (rel, n, needle))
    assert len(list(_text_files())) > 100
    assert not found, "references to documents outside the repository (cite docs/architecture.md or a primary " \
                      "source instead):\n  " + "\n  ".join(found)


def test_architecture_doc_names_every_registry_and_layer():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name in ("COMMANDS", "TASKS", "ALGORITHMS", "METRICS", "CRITERIA", "RECIPES", "BACKENDS", "INPUT_KINDS",
                 "SOURCES", "SINKS", "targets/profiles/"):
        assert name in doc, name
    for folder in ("jetforge/", "targets/", "runtime/", "calibrate/", "compress/", "apps/", "deploy/", "workflow/",
                   "cli/"):
        assert "| `%s` |" % folder in doc, folder
    assert "docs/architecture.md" in (ROOT / "docs" / "CONVENTIONS.md").read_text(encoding="utf-8")


def repository_paths(text):
    """Paths into the repository that a document names in backticks: ``runtime/tensorrt/plan.py``,
    ``apps/tasks/`` or ``tests/test_docs.py::test_x`` (the part before ``::``); placeholders (NAME, ``*``, braces)
    and paths relative to a section's package (``dla/rules.py``) are not checked."""
    import re

    roots = ("jetforge/", "targets/", "runtime/", "calibrate/", "compress/", "apps/", "deploy/", "workflow/", "cli/",
             "tests/", "docs/", "benchmarks/", "recipes/")
    found = []
    for token in re.findall(r"`([^`\s]+)`", text):
        path = token.split("::")[0]
        if path.startswith(roots) and not re.search(r"[A-Z]{2,}|[*{}<>]", path):
            found.append(path)
    return found


LAYER_ROOTS = ("targets/", "runtime/", "calibrate/", "compress/", "apps/", "deploy/", "workflow/", "cli/")


def _in_tree(path):
    """A named path exists: from the repository root, or for a layer (``runtime/...``, ``jetforge/...``) inside the
    package, ``src/jetforge/`` (the docs name the package's folders by their layer)."""
    if path.startswith(LAYER_ROOTS):
        return (ROOT / "src" / "jetforge" / path).exists()
    if path.startswith("jetforge/"):
        return (ROOT / "src" / path).exists()
    return (ROOT / path).exists()


def test_repository_paths_in_the_architecture_doc_exist():
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    paths = repository_paths(doc)
    assert len(paths) > 40, paths  # the doc names files everywhere: a low count means the scanner broke
    missing = sorted({p for p in paths if not _in_tree(p)})
    assert not missing, "docs/architecture.md names files that are not in the tree: %s" % missing


def test_repository_path_scanner():
    text = ("`runtime/tensorrt/plan.py` and `apps/tasks/` and `tests/test_docs.py::test_x` but not `dla/rules.py`, "
            "`targets/profiles/NAME.yaml`, `cli/cmd_*.py`, `jetforge.runtime`, `deploy/{a,b}.py`")
    assert repository_paths(text) == ["runtime/tensorrt/plan.py", "apps/tasks/", "tests/test_docs.py"]


def test_readme_layout_table_has_every_folder():
    """The README's layout table names every layer folder of src/jetforge, as the package it is."""
    package = ROOT / "src" / "jetforge"
    layers = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file() and p.name != "assets")
    assert {"runtime", "apps", "cli"} <= set(layers)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [("jetforge", "jetforge")] + [(name, "jetforge." + name) for name in layers]
    missing = [folder for folder, name in rows if "| `%s/` | `%s` |" % (folder, name) not in readme]
    assert not missing, "README layout table lacks: %s" % missing
