"""``python -m jetforge.compress.recipes`` (and ``torchrun ... -m jetforge.compress.recipes``): see :mod:`.entry`."""

import sys

from jetforge.compress.recipes.entry import main

if __name__ == "__main__":
    sys.exit(main())
