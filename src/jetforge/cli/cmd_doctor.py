"""``jetforge doctor``: what this machine has, and how to install what is missing."""

import argparse
import sys
from typing import List, Optional, TextIO

import jetforge
from jetforge.cli.arguments import add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.table import format_table
from jetforge.runtime import environment
from jetforge.runtime.environment import Probe


def _marks(stream: TextIO) -> "tuple[str, str]":
    """(found, missing) marks: check marks where the terminal can print them, else ASCII."""
    try:
        "\u2713\u2717".encode(getattr(stream, "encoding", None) or "ascii")
        return "\u2713", "\u2717"
    except (UnicodeEncodeError, LookupError):
        return "ok", "--"


def render(probes: List[Probe], stream: Optional[TextIO] = None) -> str:
    """The human report: one row per component, then the fix for each missing one."""
    yes, no = _marks(stream or sys.stdout)
    rows = [[yes if p.found else no, p.name, p.version or "-", p.detail] for p in probes]
    text = "jetforge %s\n\n" % jetforge.__version__ + format_table(["", "component", "version", "details"], rows)
    fixes = [(p.name, p.hint) for p in probes if not p.found and p.hint]
    if fixes:
        width = max(len(name) for name, _ in fixes)
        text += "\n\nmissing, and how to get it:\n"
        text += "\n".join("  %s %s  %s" % (no, name.ljust(width), hint) for name, hint in fixes)
    return text


class DoctorCommand(Command):
    name = "doctor"
    description = ("Probe this machine: the detected target profile, Python, the Jetson L4T/JetPack release,\n"
                   "CUDA, cuda-python and PyCUDA, TensorRT and its DLA cores, TensorRT-RTX (not JetPack\n"
                   "TensorRT), ONNX Runtime and its providers, OpenCV with or without GStreamer, NVML and\n"
                   "tegrastats. Each missing piece is listed with the command that installs it.\n"
                   "Nothing is changed; the exit code is 0 whatever is missing.")
    examples = """examples:
  jetforge doctor                   # readable table with the fix for each missing piece
  jetforge doctor --json            # the same facts for scripts, keyed by component
  jetforge doctor --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["probes"]["dla"])'"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        probes = environment.probe_all()
        if getattr(args, "json", False):
            print_json({"jetforge": jetforge.__version__, "probes": {p.name: p.to_dict() for p in probes}})
        else:
            print(render(probes))
        return 0
