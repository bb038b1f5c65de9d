"""Moved to :mod:`jetforge.runtime.inputs.clip` (the ``clip`` input kind); this name stays while imports move."""

from jetforge.runtime.inputs.clip import ClipContract  # noqa: F401
