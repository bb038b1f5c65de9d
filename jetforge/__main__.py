"""``python -m jetforge`` runs the CLI."""

import sys

from jetforge.apps.cli.main import main

sys.exit(main())
