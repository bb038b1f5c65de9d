"""The command line's shared options, defined once.

Every command that takes one of these options gets it from a builder here, so the option has one spelling, one
choice list, one type check and one meaning in every command; a command passes only its own help sentence.
Each builder marks the ``argparse`` actions it makes (attribute :data:`SHARED`), and
``tests/cli/test_arguments.py`` walks every command's parser to check that no command defines one of these
options by hand.

* **TensorRT version**: ``--tensorrt VERSION``, with ``--trt`` as the same option (an alias, same ``dest``).
  ``--tensorrt`` is the canonical spelling because most commands (build, bundle, dla-check, board-check,
  export-config) and the build options (``tensorrt_version``) already spelled it out, and an option named after
  the product reads the same in every command; ``--trt`` stays because calibrate and qat command lines written
  with it must keep working.
* **precision**: ``--precision`` with :data:`jetforge.runtime.tensorrt.plan.PRECISIONS` as the choices in every
  command; a command that maps one of them onto another says so in its help.
* **DLA core**: ``--dla-core N`` (an integer from 0).
* **target**: ``--target NAME`` (a profile name, or ``auto``).
* **configuration**: ``--config FILE.yaml``, ``--set KEY=VALUE`` (repeatable), ``--print-config``.
* **output**: ``-o``/``--out PATH``.
* ``--json``, and the model-loading flags of ``export`` and ``prune`` (``--weights``, ``--prune-plan``,
  ``--trust-pickle``).
* **numbers**: a numeric flag's ``type=`` is a :class:`~jetforge.config.Bound`'s ``argtype`` (the same object that
  checks the option's YAML key and Python argument), so a value out of range, NaN or infinite is one line naming
  the flag, the value, the allowed range and why - argparse's usage error, exit 1 - before anything is read.
  :data:`~jetforge.config.COUNT` (1 or more), :data:`~jetforge.config.NON_NEGATIVE` and
  :data:`~jetforge.config.PROBABILITY` are the common ones; ``--threads`` is :func:`add_threads_flag`.
"""

import argparse
from typing import Any, List, Optional, Sequence, Tuple

from jetforge.runtime.session.base import threads_argtype
from jetforge.runtime.tensorrt.plan import PRECISIONS
from jetforge.workflow.model_refs import TRUST_FLAG, load_torch_model

#: The attribute every action made here carries: the name of the shared option it is.
SHARED = "jetforge_shared"
TENSORRT_FLAGS = ("--tensorrt", "--trt")


def add_threads_flag(parser: Any, help: str) -> None:
    """``--threads N``: intra-op threads, 0 (ONNX Runtime's choice) up to this process's CPUs
    (:func:`~jetforge.runtime.session.base.thread_bound`); None unless given (the apps' ``--threads``, defined in
    ``apps/tasks``, take the same type from 1)."""
    _mark(parser.add_argument("--threads", type=threads_argtype(), default=None, metavar="N",
                              help=help), "threads")


def _mark(action: argparse.Action, name: str) -> argparse.Action:
    setattr(action, SHARED, name)
    return action


def add_tensorrt_flag(parser: Any, help: str, *, multiple: bool = False, default: Optional[str] = None) -> None:
    """``--tensorrt VERSION`` (``--trt`` is the same option); ``multiple``: repeatable, a list (default [])."""
    text = "%s (--trt is the same option)" % help
    if multiple:
        action = parser.add_argument(*TENSORRT_FLAGS, dest="tensorrt", action="append", default=[],
                                     metavar="VERSION", help=text)
    else:
        action = parser.add_argument(*TENSORRT_FLAGS, dest="tensorrt", default=default, metavar="VERSION", help=text)
    _mark(action, "tensorrt")


def add_precision_flag(parser: Any, help: str, default: Optional[str] = None) -> None:
    """``--precision`` with the build precisions (:data:`~jetforge.runtime.tensorrt.plan.PRECISIONS`) as choices."""
    _mark(parser.add_argument("--precision", choices=PRECISIONS, default=default, help=help), "precision")


def dla_core(text: str) -> int:
    """A DLA core number: an integer from 0 (which cores a board has is checked against its profile later)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a DLA core is a number (0, 1, ...), got %r" % text) from None
    if value < 0:
        raise argparse.ArgumentTypeError("a DLA core is 0 or more, got %d" % value)
    return value


def add_dla_core_flag(parser: Any, help: str) -> None:
    """``--dla-core N``: None unless given."""
    _mark(parser.add_argument("--dla-core", type=dla_core, default=None, metavar="N", help=help), "dla-core")


def add_target_flag(parser: Any, required: bool = False, *, default: Optional[str] = None,
                    multiple: bool = False, help: Optional[str] = None) -> None:
    """``--target NAME``: a profile name (``jetforge targets list``) or ``auto``; ``multiple``: repeatable."""
    text = help or "target profile name (see `jetforge targets list`), or 'auto' to detect this machine"
    if multiple:
        action = parser.add_argument("--target", action="append", required=required, metavar="NAME", help=text)
    else:
        action = parser.add_argument("--target", metavar="NAME", required=required, default=default, help=text)
    _mark(action, "target")


def add_config_flags(parser: Any) -> None:
    """``--config FILE.yaml``, ``--set KEY=VALUE`` (repeatable; dest ``overrides``) and ``--print-config``."""
    _mark(parser.add_argument("--config", metavar="YAML", help="read options from a YAML file"), "config")
    _mark(parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                              help="override one option (repeatable), e.g. --set precision=fp16"), "set")
    _mark(parser.add_argument("--print-config", action="store_true",
                              help="print the resolved configuration and exit"), "print-config")


def add_out_flag(parser: Any, metavar: str, help: str, *, required: bool = False, default: Optional[str] = None,
                 aliases: Sequence[str] = ()) -> None:
    """``-o``/``--out PATH`` (dest ``out``); ``aliases``: older spellings the command keeps (build's ``--output``)."""
    _mark(parser.add_argument("-o", "--out", *aliases, dest="out", metavar=metavar, required=required,
                              default=default, help=help), "out")


def add_json_flag(parser: Any) -> None:
    _mark(parser.add_argument("--json", action="store_true", help="print the result as JSON for machines"), "json")


def add_model_flags(parser: Any) -> None:
    """``--weights``, ``--prune-plan`` and ``--trust-pickle``: how ``--model`` is loaded (export, prune)."""
    _mark(parser.add_argument("--weights", metavar="STATE_DICT.pt",
                              help="weights for the architecture named by --model, saved with "
                                   "torch.save(model.state_dict(), PATH) (read weights-only: no code runs); the "
                                   "class count is taken from the weights"), "weights")
    _mark(parser.add_argument("--prune-plan", metavar="model.prune.json",
                              help="replay this plan from jetforge prune on the architecture before loading "
                                   "--weights (the weights of a pruned model have fewer channels)"), "prune-plan")
    _mark(parser.add_argument(TRUST_FLAG, action="store_true",
                              help="allow --model to be a whole pickled module (torch.save(model)) or a "
                                   "torch.export .pt2 archive; loading those runs code stored in the file, so use it "
                                   "only for files you made yourself (a warning is printed each time)"),
          "trust-pickle")


def load_model_from_args(args: argparse.Namespace) -> Tuple[Any, dict]:
    """:func:`~jetforge.workflow.model_refs.load_torch_model` with the flags of :func:`add_model_flags`."""
    return load_torch_model(args.model, weights=getattr(args, "weights", None),
                            prune_plan=getattr(args, "prune_plan", None),
                            trust_pickle=bool(getattr(args, "trust_pickle", False)))


def model_input_paths(args: argparse.Namespace) -> List[str]:
    """The files ``--model``/``--weights``/``--prune-plan`` name (never to be overwritten by an output)."""
    return [p for p in (args.model, getattr(args, "weights", None), getattr(args, "prune_plan", None)) if p]


def shared_actions(parser: argparse.ArgumentParser) -> List[Tuple[str, argparse.Action]]:
    """Every action of ``parser`` and of its sub-commands' parsers, with the path of sub-command names
    (``"bundle create"``): what the tests walk."""
    found: List[Tuple[str, argparse.Action]] = []

    def walk(p: argparse.ArgumentParser, where: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, ("%s %s" % (where, name)).strip())
            else:
                found.append((where, action))
    walk(parser, "")
    return found


__all__ = ["SHARED", "TENSORRT_FLAGS", "add_config_flags", "add_dla_core_flag", "add_json_flag", "add_model_flags",
           "add_out_flag", "add_precision_flag", "add_target_flag", "add_tensorrt_flag", "add_threads_flag",
           "dla_core", "load_model_from_args", "model_input_paths", "shared_actions"]
