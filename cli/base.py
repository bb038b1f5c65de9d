"""Base class and shared option groups for CLI subcommands.

A subcommand is a class with a ``name``, a one-line ``summary``, a ``description``
with examples, ``add_arguments`` and ``run``.  Shared options (``--json``,
``--config``/``--set``, ``--target``) are functions applied to the parser so that
every subcommand spells them the same way.
"""

import argparse
import json
import sys
from typing import Any, Optional, TextIO


class Command:
    """One ``jetforge <name>`` subcommand."""

    name = ""
    summary = ""
    description = ""
    examples = ""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare this command's options."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit code (0 on success)."""
        raise NotImplementedError


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON for machines")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="YAML", help="read options from a YAML file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override one option (repeatable), e.g. --set precision=fp16")
    parser.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")


def add_target_flag(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--target", metavar="NAME", required=required,
                        help="target profile name (see `jetforge targets list`), or 'auto' to detect this machine")


def print_json(data: Any, stream: Optional[TextIO] = None) -> None:
    json.dump(data, stream or sys.stdout, indent=2, sort_keys=False, default=str)
    (stream or sys.stdout).write("\n")
