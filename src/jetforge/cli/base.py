"""Base class and shared option groups for CLI subcommands.

A subcommand is a class with a ``name``, a ``description`` with examples,
``add_arguments`` and ``run``, registered with its one-line summary in
:data:`jetforge.cli.main.COMMANDS`.  Shared options (``--json``,
``--config``/``--set``, ``--target``) are functions applied to the parser so that
every subcommand spells them the same way.
"""

import argparse
import json
import sys
from typing import Any, Optional, TextIO, Tuple

from jetforge.errors import ConfigError


class Command:
    """One ``jetforge <name>`` subcommand."""

    name = ""
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


def parse_input_shape(text: str) -> Tuple[int, ...]:
    """``--input-shape 1x3x224x224`` (or ``1,3,224,224``), batch axis included, every dim positive."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise ConfigError("--input-shape must be integers like 1,3,224,224, got %r" % text) from None
    if len(shape) < 2 or any(d < 1 for d in shape):
        raise ConfigError("--input-shape must include the batch axis and be positive, got %r" % text)
    return shape
