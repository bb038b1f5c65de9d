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
    for name in ("COMMANDS", "TASKS", "ALGORITHMS", "METRICS", "CRITERIA", "BACKENDS", "INPUT_KINDS", "SOURCES",
                 "SINKS", "targets/profiles/"):
        assert name in doc, name
    for folder in ("jetforge/", "targets/", "runtime/", "calibrate/", "compress/", "apps/", "deploy/", "cli/"):
        assert "| `%s` |" % folder in doc, folder
    assert "docs/architecture.md" in (ROOT / "docs" / "CONVENTIONS.md").read_text(encoding="utf-8")
