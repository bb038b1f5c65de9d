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
* **shapes**: ``--shape NAME=DIMS`` with ``--shapes`` (trtexec's spelling) as the same option, comma lists allowed.
* **measurements** (``bench``): the run length (``--iterations``, ``--duration``, ``--warmup``, ``--warmup-ms``) and
  the inputs/outputs group (``--shapes``, ``--load-inputs``, ``--export-times``, ``--profile``), as argument groups;
  the accuracy group (``--accuracy``, ``--accuracy-samples``, ``--accuracy-images``).
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

from jetforge.config import COUNT, NON_NEGATIVE
from jetforge.runtime.bench import DURATION_S, WARMUP_MS
from jetforge.runtime.bench_inputs import split_specs
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


class _SpecsAction(argparse.Action):
    """A repeatable option whose values may also be comma-separated lists (trtexec's ``--shapes=a:..,b:..``): every
    occurrence extends one list of strings (split later by the reader, which knows where a comma starts an entry)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append(values)
        setattr(namespace, self.dest, items)


def add_shape_flag(parser: Any, help: str) -> None:
    """``--shape NAME=DIMS`` with ``--shapes`` as the same option (trtexec's spelling; dest ``shape``): repeatable,
    and one value may list several inputs, ``--shapes a=1x3x224x224,b=1x10``.  Values stay strings; readers split
    them with :func:`jetforge.runtime.bench_inputs.split_specs` and parse each with ``parse_shape``."""
    _mark(parser.add_argument("--shape", "--shapes", dest="shape", action=_SpecsAction, default=[],
                              metavar="NAME=DIMS[,NAME=DIMS]", help=help), "shape")


def shape_values(args: argparse.Namespace) -> List[str]:
    """The ``NAME=DIMS`` entries of :func:`add_shape_flag`'s option, one per input."""
    return split_specs(getattr(args, "shape", None) or [])


def add_run_length_flags(parser: Any) -> None:
    """How long a measurement runs, as trtexec counts it: ``--iterations N`` (timed calls, at least),
    ``--duration S`` (timed for at least S seconds: trtexec's ``--duration``), ``--warmup N`` (untimed calls) and
    ``--warmup-ms MS`` (warm up for at least MS milliseconds: trtexec's ``--warmUp``).

    ``--warmup`` stays a count of calls, as jetforge has always read it (bench JSON's ``warmup_iterations``, the
    README's and users' scripts); trtexec's time-based warm-up is the separate ``--warmup-ms``, with its unit in
    its name like ``--workspace-mib``, so no command line changes meaning."""
    group = parser.add_argument_group("run length (as trtexec: both limits apply, whichever is reached later)")
    _mark(group.add_argument("--iterations", type=COUNT.argtype, default=200,
                             help="timed steady-state calls, at least (default 200)"), "iterations")
    _mark(group.add_argument("--duration", type=DURATION_S.argtype, default=0.0, metavar="S",
                             help="time calls for at least S seconds (trtexec --duration; default 0: iterations "
                                  "only)"), "duration")
    _mark(group.add_argument("--warmup", type=NON_NEGATIVE.argtype, default=20, metavar="N",
                             help="untimed warm-up calls (default 20)"), "warmup")
    _mark(group.add_argument("--warmup-ms", type=WARMUP_MS.argtype, default=None, metavar="MS",
                             help="warm up for at least MS milliseconds as well (trtexec --warmUp)"), "warmup-ms")


def add_bench_io_flags(parser: Any) -> None:
    """Where a measurement's inputs come from and what it writes besides its summary: ``--shapes``,
    ``--load-inputs NAME:FILE.npy``, ``--export-times FILE.json``, ``--profile FILE.json``."""
    group = parser.add_argument_group("inputs and outputs (trtexec's --shapes, --loadInputs, --exportTimes, "
                                      "--exportProfile)")
    add_shape_flag(group, "input shape by name, every axis (e.g. input=8x3x224x224); only dynamic axes can be "
                          "chosen; repeatable or comma-separated")
    _mark(group.add_argument("--load-inputs", action=_SpecsAction, default=[], metavar="NAME:FILE.npy",
                             help="read an input from a NumPy .npy file (np.save; no pickles) instead of random "
                                  "values; its dtype and shape must fit the model; repeatable or comma-separated"),
          "load-inputs")
    _mark(group.add_argument("--export-times", metavar="FILE.json",
                             help="write every timed call's start, end and latency (ms, host clock)"), "export-times")
    _mark(group.add_argument("--profile", metavar="FILE.json",
                             help="per-node and per-operator times from ONNX Runtime's profiler, in a separate pass "
                                  "after the timed one (ONNX models)"), "profile")


def add_accuracy_flags(parser: Any) -> None:
    """``--accuracy LABELS``, ``--accuracy-samples N`` and ``--accuracy-images DIR``: after a measurement, the
    accuracy of the same session on labelled images (:mod:`jetforge.calibrate.bench_accuracy`); None unless given."""
    group = parser.add_argument_group("accuracy (on the session just timed)")
    _mark(group.add_argument("--accuracy", metavar="LABELS",
                             help="then run labelled images through the same session and report accuracy: a "
                                  "detector takes what calibrate --labels takes (COCO .json, YOLO classes .txt, VOC "
                                  ".xml or folder, people_boxes.json: its held-out frames) and reports AP@0.5 and "
                                  "AP@[.5:.95] per class with bootstrap intervals; a classifier takes "
                                  "`image_path<TAB>class` lines and reports top-1/top-5"), "accuracy")
    _mark(group.add_argument("--accuracy-samples", type=COUNT.argtype, default=None, metavar="N",
                             help="use N labelled images spread evenly over the set (default: all)"),
          "accuracy-samples")
    _mark(group.add_argument("--accuracy-images", metavar="DIR",
                             help="folder a classifier's label list names its images relative to (default: the "
                                  "label file's folder)"), "accuracy-images")


def load_model_from_args(args: argparse.Namespace) -> Tuple[Any, dict]:
    """:func:`~jetforge.workflow.model_refs.load_torch_model` with the flags of :func:`add_model_flags`."""
    return load_torch_model(args.model, weights=getattr(args, "weights", None),
                            prune_plan=getattr(args, "prune_plan", None),
                            trust_pickle=bool(getattr(args, "trust_pickle", False)))


def model_input_paths(args: argparse.Namespace) -> List[str]:
    """The files ``--model``/``--weights``/``--prune-plan`` name (never to be overwritten by an output)."""
    return [p for p in (args.model, getattr(args, "weights", None), getattr(args, "prune_plan", None)) if p]


LATENCY_SOURCES = ("estimate", "measured", "cpu")


def add_latency_source_flag(parser: Any, help: str) -> None:
    """``--latency-source estimate|measured|cpu``: what ranks latency-aware cuts (None unless given: the command
    picks estimate when --target names a board, else cpu)."""
    _mark(parser.add_argument("--latency-source", choices=LATENCY_SOURCES, default=None, help=help), "latency-source")


def add_latency_table_flag(parser: Any, help: str) -> None:
    """``--latency-table FILE.json``: measured latencies from the board (bench/board-check JSON)."""
    _mark(parser.add_argument("--latency-table", metavar="FILE.json", default=None, help=help), "latency-table")


def add_calibrate_from_flag(parser: Any, help: str) -> None:
    """``--calibrate-from board-check.json``: a board's measured points to fold into a local efficiency set."""
    _mark(parser.add_argument("--calibrate-from", metavar="BOARD-CHECK.json", default=None, help=help),
          "calibrate-from")


def add_decoder_flag(parser: Any, help: str) -> None:
    """``--decoder NAME``: a detector's output decoder (:data:`jetforge.vision.decode.DECODERS`), for a model whose
    sidecar names none or to override it; None unless given."""
    from jetforge.vision.decode import DECODERS

    _mark(parser.add_argument("--decoder", choices=DECODERS.names(), default=None, metavar="NAME",
                              help="%s: %s" % (help, ", ".join(DECODERS.names()))), "decoder")


def add_classes_flag(parser: Any, help: str) -> None:
    """``--classes LIST``: class names in the model's index order, read by :func:`jetforge.vision.classes.class_names`
    (``coco80``, ``coco91``, a file with one name per line, or ``a,b,c``); None unless given."""
    _mark(parser.add_argument("--classes", default=None, metavar="LIST",
                              help="%s (coco80, coco91, a file with one name per line, or names like person,car)"
                                   % help), "classes")


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


__all__ = ["LATENCY_SOURCES", "SHARED", "TENSORRT_FLAGS", "add_accuracy_flags", "add_bench_io_flags",
           "add_calibrate_from_flag",
           "add_classes_flag", "add_config_flags", "add_decoder_flag", "add_latency_source_flag",
           "add_latency_table_flag", "add_dla_core_flag", "add_json_flag",
           "add_model_flags", "add_out_flag", "add_precision_flag", "add_run_length_flags", "add_shape_flag",
           "add_target_flag", "add_tensorrt_flag", "add_threads_flag", "dla_core", "load_model_from_args",
           "model_input_paths", "shape_values", "shared_actions"]
