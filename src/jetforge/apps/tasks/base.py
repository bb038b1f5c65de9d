"""The interface of one ``jetforge app NAME``: the app's own options, and how it builds its task.

An app is registered in :data:`jetforge.apps.tasks.TASKS`; ``jetforge app`` (``cli/cmd_app.py``) does the
rest the same way for every app: sources, pipeline options, outputs, summary and exit status.
"""

import argparse
from typing import Any, Dict, List, Optional, Sequence, Tuple


class App:
    """One ``jetforge app NAME``: its options, and how it builds its task."""

    name = ""
    description = ""
    examples = ""
    default_source: Optional[Tuple[str, str]] = None  # (asset, file) played when --source is not given
    default_out = "jetforge-app"
    #: options of the command line's shared set (``cli/arguments.py``) this app takes, name -> its help sentence:
    #: ``jetforge app`` adds them with their one builder (this layer never imports the CLI)
    shared_flags: Dict[str, str] = {}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """This app's own options."""

    def build(self, args: argparse.Namespace, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        """(task, model files read (never overwritten), notes) for the opened ``sources``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``build`` opened (sessions)."""

    def report_lines(self, task: Any) -> List[str]:
        fn = getattr(task, "report_lines", None)
        return list(fn()) if callable(fn) else []


__all__ = ["App"]
