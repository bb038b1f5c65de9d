"""``python -m jetforge.compress.recipes RECIPE.yaml [--stage train|int8] [--data D] [--set k=v ...] [--json]``.

The module entry of the recipes, and what ``torchrun --nproc_per_node=N -m jetforge.compress.recipes RECIPE.yaml``
starts on every rank (DDP for the classifier recipes); ``python -m jetforge.compress.distill`` is this entry
under its older name.  It runs :func:`~jetforge.compress.recipes.base.run_recipe`, as ``jetforge distill``
(``--stage train``, the default) and ``jetforge qat`` (``--stage int8``) do, and prints what they print.  Like the
``jetforge`` command (:mod:`jetforge.entry`): a usage error or a bad recipe is one line and exit 1; SIGTERM
(torchrun stopping its workers, ``kill``, a scheduler's preemption) ends a rank like Ctrl-C - its process group
is torn down, the checkpoints written so far (``last.pt`` after every epoch, atomically) stay - and exit 130.
"""

import logging
from typing import List, Optional

from jetforge.compress.recipes import base
from jetforge.compress.recipes.base import STAGES
from jetforge.entry import ArgumentParser, run_entry

PROG = "python -m jetforge.compress.recipes"


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    return run_entry(prog, lambda: _main(argv, prog), process_exit=argv is None)


def _main(argv: Optional[List[str]], prog: str) -> int:
    ap = ArgumentParser(prog=prog, description="Run one stage of a training recipe (the kind comes from its "
                                               "`kind:` key; see jetforge.compress.recipes).")
    ap.add_argument("recipe", help="the recipe file (YAML)")
    ap.add_argument("--stage", choices=STAGES, default="train",
                    help="train (what `jetforge distill` runs, the default) or int8 (what `jetforge qat` runs)")
    ap.add_argument("--data", help="what the recipe's kind reads: the Fashion-MNIST folder (classifier), the clips' "
                                   "asset folder (detector), the video (action3d)")
    ap.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                    help="override a recipe key (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--print-config", action="store_true", help="print the resolved recipe and exit")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s")
    return base.run_recipe(args.recipe, args.overrides, stage=args.stage, data=args.data, as_json=args.json,
                           print_config=args.print_config, progress=not args.json, command=prog)


__all__ = ["PROG", "main"]
