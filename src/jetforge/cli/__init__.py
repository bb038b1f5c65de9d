"""The ``jetforge`` command line: one command, subcommands as classes, loaded lazily."""
