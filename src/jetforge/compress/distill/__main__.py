"""``python -m jetforge.compress.distill RECIPE.yaml [--data DIR] [--set key=value ...]`` (also under torchrun).

The older name of the one recipe entry, :mod:`jetforge.compress.recipes.entry` (``python -m
jetforge.compress.recipes``): the same arguments, the same dispatch by the recipe's ``kind``, the same output;
``torchrun --nproc_per_node=N -m jetforge.compress.distill RECIPE`` runs DDP on every rank.
"""

import sys
from typing import List, Optional

from jetforge.compress.recipes.entry import main as recipes_main

PROG = "python -m jetforge.compress.distill"


def main(argv: Optional[List[str]] = None) -> int:
    return recipes_main(argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
