"""The device side imports and runs with torch absent, as on a deployed Jetson.

A child interpreter gets a ``sys.meta_path`` finder that refuses torch and
torchvision (``import torch`` raises ModuleNotFoundError, as it does where torch
is not installed), then imports every module of ``jetforge``, ``jetforge.targets``,
``jetforge.runtime``, ``jetforge.apps``, ``jetforge.deploy`` and ``jetforge.cli`` (walked with
pkgutil, so a new module is covered without editing this file) and runs CLI commands.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("torch", "torchvision")

BLOCKER = r"""
import importlib.abc, sys

class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in %r:
            raise ModuleNotFoundError("No module named %%r (blocked: a Jetson has no torch)" %% name, name=name)
        return None

assert not any(m.split(".")[0] in %r for m in sys.modules), "torch was imported before the blocker"
sys.meta_path.insert(0, _NoTorch())
""" % (BLOCKED, BLOCKED)

IMPORT_ALL = BLOCKER + r"""
import importlib, json, pkgutil, traceback

failures, imported = {}, []
WORKSTATION = ("jetforge.calibrate", "jetforge.compress")

def load(name):
    try:
        mod = importlib.import_module(name)
    except BaseException:
        failures[name] = traceback.format_exc(limit=-4)
        return None
    imported.append(name)
    return mod

for top in ("jetforge", "jetforge.targets", "jetforge.runtime", "jetforge.apps", "jetforge.deploy", "jetforge.cli"):
    pkg = load(top)
    if pkg is None:
        continue
    prefix = top + "."
    def walk_error(name):
        if not name.startswith(WORKSTATION):
            failures.setdefault(name, "walk")

    for info in pkgutil.walk_packages(pkg.__path__, prefix, onerror=walk_error):
        if top == "jetforge" and info.name == "jetforge.__main__":
            continue  # runs the CLI and exits
        if info.name.startswith(WORKSTATION):
            continue  # the workstation layers (src/jetforge/calibrate, compress) may need torch
        load(info.name)

leaked = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps({"imported": imported, "failures": failures, "leaked": leaked}))
""" % (BLOCKED,)

RUN_CLI = BLOCKER + r"""
import json
from jetforge.cli.main import main
argv = json.loads(sys.argv[1])
try:
    code = main(argv)
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
sys.stderr.write("\n@@exit=%%s leaked=%%s\n" %% (code, sorted(m for m in sys.modules if m.split(".")[0] in %r)))
""" % (BLOCKED,)


def _child(code, *args, cwd):
    return subprocess.run([sys.executable, "-c", code] + list(args), cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=240)


def test_blocker_really_blocks_torch(tmp_path):
    proc = _child(BLOCKER + "import torch\n", cwd=tmp_path)
    assert proc.returncode != 0 and "blocked: a Jetson has no torch" in proc.stderr, proc.stderr


def test_device_side_modules_import_without_torch(tmp_path):
    proc = _child(IMPORT_ALL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not result["failures"], "modules that fail to import without torch:\n" + "\n".join(
        "%s:\n%s" % item for item in result["failures"].items())
    assert result["leaked"] == []
    for required in ("jetforge.errors", "jetforge.config", "jetforge.cli.main", "jetforge.runtime.inputs"):
        assert required in result["imported"]


@pytest.mark.parametrize("argv", [["--help"], ["targets", "list"], ["doctor", "--json"]],
                         ids=lambda a: " ".join(a))
def test_cli_runs_without_torch(tmp_path, argv):
    proc = _child(RUN_CLI, json.dumps(argv), cwd=tmp_path)
    status = proc.stderr.rsplit("@@exit=", 1)
    assert len(status) == 2, proc.stderr
    code, leaked = status[1].split(" leaked=")
    assert code.strip() == "0", proc.stderr
    assert leaked.strip() == "[]"
    assert proc.stdout.strip()
    if argv[0] == "--help":
        assert "doctor" in proc.stdout
    if "--json" in argv:
        data = json.loads(proc.stdout)
        if argv[0] == "doctor":
            assert data["probes"]["torch"]["found"] is False  # the blocked torch is reported as missing
