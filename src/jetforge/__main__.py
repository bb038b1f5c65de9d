"""``python -m jetforge`` runs the CLI."""

import sys

from jetforge.cli.main import main

sys.exit(main())
