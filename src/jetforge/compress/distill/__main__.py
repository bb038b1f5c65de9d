"""``python -m jetforge.compress.distill RECIPE.yaml [--data DIR] [--set key=value ...]`` (also under torchrun).

The entry ``torchrun --nproc_per_node=N -m jetforge.compress.distill`` uses for DDP; every rank prints its
own totals (``[rank R] ...``), rank 0 the final metrics as JSON.  Like the ``jetforge`` command
(:mod:`jetforge.entry`): a usage error or a bad recipe is one line and exit 1; SIGTERM (torchrun
stopping its workers, ``kill``, a scheduler's preemption) ends a rank like Ctrl-C - its process group is
torn down, the checkpoints written so far (``last.pt`` after every epoch, atomically) stay - and exit 130.
"""

import json
import logging
import sys
from typing import List, Optional

from jetforge.entry import ArgumentParser, run_entry

PROG = "python -m jetforge.compress.distill"


def main(argv: Optional[List[str]] = None) -> int:
    return run_entry(PROG, lambda: _main(argv))


def _main(argv: Optional[List[str]]) -> int:
    ap = ArgumentParser(prog=PROG)
    ap.add_argument("recipe")
    ap.add_argument("--data", help="Fashion-MNIST folder (the four .gz files); default: data.root of the recipe")
    ap.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s")
    from jetforge.compress.distill.distill_model import DistillConfig, distill
    from jetforge.compress.train.dist import cleanup, init_distributed
    from jetforge.config import load_config

    overrides = list(args.overrides) + (["data.root=%s" % args.data] if args.data else [])
    cfg = load_config(DistillConfig, args.recipe, overrides)
    ctx = init_distributed(cfg.train.device)
    try:
        res = distill(cfg, ctx=ctx)
        r = res.train.rank_stats
        print("[rank %d/%d] device=%s samples=%d steps=%d mean_train_loss=%.4f"
              % (ctx.rank, ctx.world_size, ctx.device, r["samples"], r["steps"], r["mean_loss"]), flush=True)
        if ctx.is_main:
            print(json.dumps({"final": res.to_dict(), "last_epoch": res.train.history[-1]}, indent=2), flush=True)
    finally:
        cleanup(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
