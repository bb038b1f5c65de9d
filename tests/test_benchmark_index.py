"""The benchmarks' index and layout: every result the docs name exists, every README number has its row.

``benchmarks/README.md`` is the index of the numbers in the top-level README (claim -> command -> result file ->
machine -> date); each study folder ``benchmarks/<study>/`` has a README, its scripts and ``results/`` named
``<device>_<date>[_<variant>].<ext>`` (superseded ones in ``results/archive/`` keep their old names).
"""

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from benchmarks.common.paths import RESULT_NAME

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULT_SUFFIXES = (".json", ".txt", ".png", ".log")
NOT_STUDIES = {"__pycache__"}
PATH_TOKEN = re.compile(r"benchmarks/[A-Za-z0-9_./{},*<>-]+")
BARE_RESULT = re.compile(r"(?<![\w./-])([a-z0-9][a-z0-9-]*_\d{4}-\d{2}-\d{2}(?:_[A-Za-z0-9_.-]+?)?"
                         r"(?:\.\{[a-z,]+\}|\.(?:json|txt|png|log)))(?![\w])")


def expand(token: str) -> List[str]:
    """``a.{json,txt}`` -> ``a.json``, ``a.txt`` (one brace group at a time, any number of groups)."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for part in m.group(1).split(",") for x in expand(token[:m.start()] + part + token[m.end():])]


def documents() -> List[Path]:
    docs = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs").glob("models/*"))
    docs += sorted(BENCH.glob("*/README.md")) + [BENCH / "README.md"] + sorted((ROOT / "recipes").glob("*.yaml"))
    return [d for d in docs if d.is_file()]


def named_results(text: str, base: Path) -> Iterator[Tuple[str, Path]]:
    """(as written, path) of every result file a document names: ``benchmarks/...`` from the repository root, and in
    a study README ``results/...`` from its folder.  Placeholders (``<device>``, ``*``) are not names."""
    tokens = [(t, ROOT) for t in PATH_TOKEN.findall(text)]
    if base != ROOT:
        tokens += [(t, base) for t in re.findall(r"(?<![\w/])results/[A-Za-z0-9_./{},*<>-]+", text)]
    for token, where in tokens:
        token = token.rstrip(".,;:)")
        if re.search(r"[<>*]", token):
            continue
        for name in expand(token):
            if name.endswith(RESULT_SUFFIXES):
                yield name, where / name


def result_files() -> List[Path]:
    return sorted(p for p in BENCH.rglob("*") if p.is_file() and p.suffix in RESULT_SUFFIXES
                  and "labels" not in p.relative_to(BENCH).parts[:1])


def test_every_named_result_exists():
    missing, seen = [], 0
    for doc in documents():
        base = doc.parent if doc.parent.parent == BENCH else ROOT
        for written, path in named_results(doc.read_text(encoding="utf-8"), base):
            seen += 1
            if not path.is_file():
                missing.append("%s: %s" % (doc.relative_to(ROOT), written))
    assert seen > 100, seen  # the docs name results everywhere: a low count means the scanner broke
    assert not missing, "result files named but not in the tree:\n  " + "\n  ".join(missing)


def test_every_named_benchmark_file_exists():
    """Scripts, study folders and data the docs name under ``benchmarks/`` (``benchmarks/int8/int8_cpu_check.sh``)."""
    missing, seen = [], 0
    for doc in documents():
        for token in PATH_TOKEN.findall(doc.read_text(encoding="utf-8")):
            token = token.rstrip(".,;:)")
            if re.search(r"[<>*]", token) or token.endswith(RESULT_SUFFIXES):
                continue
            for name in expand(token):
                seen += 1
                if not (ROOT / name).exists():
                    missing.append("%s: %s" % (doc.relative_to(ROOT), name))
    assert seen > 50, seen
    assert not missing, "\n  ".join(missing)


def test_every_bare_result_name_exists_in_a_study():
    """A result named without its folder (``nvidia-h200_2026-12-01_gpu-path.txt``) is in some study's results/."""
    names = {p.name for p in result_files()}
    missing = []
    for doc in documents():
        for token in BARE_RESULT.findall(doc.read_text(encoding="utf-8")):
            for name in expand(token):
                if name not in names:
                    missing.append("%s: %s" % (doc.relative_to(ROOT), name))
    assert not missing, "\n  ".join(missing)


def index_rows() -> List[List[str]]:
    text = (BENCH / "README.md").read_text(encoding="utf-8")
    section = text.split("## Index", 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("### "):
            break
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
    header, body = rows[0], rows[1:]
    assert header == ["README claim", "command", "result file", "machine", "date"], header
    return body


def test_index_rows_name_existing_results_and_scripts():
    rows = index_rows()
    assert len(rows) >= 40, len(rows)
    problems = []
    for claim, command, results, machine, date in rows:
        files = [name for token in re.findall(r"`([^`]+)`", results) for name in expand(token)]
        if not files:
            problems.append("no result file: %s" % claim[:60])
        for name in files:
            if not (ROOT / name).is_file():
                problems.append("missing %s (%s)" % (name, claim[:40]))
            elif RESULT_NAME.match(Path(name).name) and Path(name).name.split("_")[1][:10] not in date:
                problems.append("%s: its date is not in the row's date %r" % (name, date))
        scripts = re.findall(r"benchmarks/[\w/.-]+\.(?:py|sh)", command)
        for script in scripts:
            if not (ROOT / script).is_file():
                problems.append("no script %s (%s)" % (script, claim[:40]))
        if not scripts and not re.match(r"`(jetforge |python3? -m pytest|pytest)", command):
            problems.append("no command: %s" % claim[:60])
        if not machine or not re.search(r"\d{4}-\d{2}-\d{2}", date):
            problems.append("machine or date missing: %s" % claim[:60])
    assert not problems, "\n  ".join(problems)


def studies() -> List[Path]:
    return sorted(p for p in BENCH.iterdir() if p.is_dir() and p.name not in NOT_STUDIES)


def test_every_study_has_a_readme_and_no_script_outside_one():
    assert len(studies()) >= 9
    assert not [s.name for s in studies() if not (s / "README.md").is_file()]
    loose = sorted(p.name for p in BENCH.glob("*.py")) + sorted(
        p.name for p in BENCH.glob("*.sh"))
    assert not loose, "scripts belong in a study folder: %s" % loose


def test_results_live_in_results_folders_and_follow_the_naming_rule():
    outside, badly_named = [], []
    for path in result_files():
        rel = path.relative_to(BENCH)
        if len(rel.parts) < 3 or rel.parts[1] != "results":
            outside.append(str(rel))
        elif "archive" not in rel.parts[2:-1] and not RESULT_NAME.match(path.name):
            badly_named.append(str(rel))
    assert not outside, "result files outside a study's results/: %s" % outside
    assert not badly_named, "not <device>_<date>[_<variant>].<ext>: %s" % badly_named


@pytest.mark.parametrize("token, expanded", [
    ("a/b.{json,txt,png}", ["a/b.json", "a/b.txt", "a/b.png"]),
    ("x_2026-12-01_call{1,2}.json", ["x_2026-12-01_call1.json", "x_2026-12-01_call2.json"]),
    ("plain.json", ["plain.json"]),
])
def test_brace_expansion(token, expanded):
    assert expand(token) == expanded


def test_scanners():
    text = ("see `benchmarks/int8/results/epyc-2core_2026-12-01_accuracy.json`, `results/<device>_<date>.json`, "
            "and `nvidia-h200_2026-12-01_gpu-path.{json,txt}` but not `jetforge_bench.json`")
    assert [w for w, _ in named_results(text, ROOT)] == ["benchmarks/int8/results/epyc-2core_2026-12-01_accuracy.json"]
    assert BARE_RESULT.findall(text) == ["nvidia-h200_2026-12-01_gpu-path.{json,txt}"]
    assert RESULT_NAME.match("xeon-16core_2026-12-01_soak_rss.png")
    assert not RESULT_NAME.match("pipeline_gpu_h200_s5_final.json")
