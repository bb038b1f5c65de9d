"""Base class of CLI subcommands, and the helpers their ``run`` shares.

A subcommand is a class with a ``name``, a ``description`` with examples,
``add_arguments`` and ``run``, registered with its one-line summary in
:data:`jetforge.cli.main.COMMANDS`.  The options several commands share (``--json``,
``--config``/``--set``, ``--target``, ``--tensorrt``, ``--precision``, ``--dla-core``, ``--out``) are
defined once, in :mod:`jetforge.cli.arguments`.
"""

import argparse
import json
import sys
from typing import Any, Optional, TextIO, Tuple

from jetforge.errors import ConfigError
from jetforge.runtime.measure import memory_shortfall
from jetforge.runtime.tensorrt.profile import DIM


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


def print_json(data: Any, stream: Optional[TextIO] = None) -> None:
    json.dump(data, stream or sys.stdout, indent=2, sort_keys=False, default=str)
    (stream or sys.stdout).write("\n")


def print_config(cfg: Any) -> None:
    """``--print-config``: a resolved options dataclass as the YAML a ``--config`` file holds."""
    import yaml

    from jetforge.config import to_dict

    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")


def parse_input_shape(text: str, flag: str = "--input-shape") -> Tuple[int, ...]:
    """``--input-shape 1x3x224x224`` (or ``1,3,224,224``), batch axis included, every dim positive.

    The model is traced on a float32 input of this shape (and ONNX Runtime runs it again to compare), so that
    input must fit in the memory free now - a necessary bound, checked before the model is loaded
    (``1x3x100000x100000`` asked for 112 GiB and ended in an internal error)."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise ConfigError("%s must be integers like 1,3,224,224, got %r" % (flag, text)) from None
    if len(shape) < 2 or any(d < 1 for d in shape):
        raise ConfigError("%s must include the batch axis and be positive, got %r" % (flag, text))
    for d in shape:
        DIM.check(d, "%s %s" % (flag, text))
    elements = 1
    for d in shape:
        elements *= d
    short = memory_shortfall(4 * elements)
    if short:
        raise ConfigError("%s %s: a float32 input of that shape takes %s" % (flag, text, short),
                          hint="give a smaller shape")
    return shape
