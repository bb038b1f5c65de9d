"""Task heads of the apps: people (detection + tracking + counting), classification, faces, actions.

Each task module offers a :class:`~jetforge.apps.pipeline.Task` subclass and a ``run_*``
function that ``jetforge app NAME`` calls (see ``cli/cmd_app.py``).
"""
