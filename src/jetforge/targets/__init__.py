"""Target device profiles (Jetson modules, desktop/server GPUs) as validated YAML data.

Imports nothing of jetforge's beyond the root package (errors, config).

Each profile is one file, ``targets/profiles/<name>.yaml``; every number in it carries
its source and an ``uncertain`` flag (see :mod:`jetforge.targets.schema`).  The JetPack
-> L4T / TensorRT / CUDA table is ``targets/jetpack.yaml``.

    >>> from jetforge.targets import get_target
    >>> t = get_target("orin-nx-16gb")
    >>> t.compute_capability, t.dla_cores, t.default_tensorrt
    ((8, 7), 2, '10.3.0')
    >>> t.value("memory_bandwidth_gbs").uncertain
    True
"""

from jetforge.targets.schema import (PRECISIONS, SPEC_FIELDS, JetPackRelease, PowerMode, Sourced,  # noqa: F401
                                     Target)
from jetforge.targets.loader import (get_target, jetpack_release, jetpack_table,  # noqa: F401
                                     jetpack_tensorrt_versions, list_targets, load_profile, target_names)
# The function ``detect`` (the full Detection record) stays in its module: re-exporting it here
# would shadow the submodule ``jetforge.targets.detect`` as a package attribute.
from jetforge.targets.detect import (Detection, detect_target, jetpack_for_l4t,  # noqa: F401
                                     parse_nv_tegra_release)

__all__ = [
    "Target", "Sourced", "PowerMode", "JetPackRelease", "PRECISIONS", "SPEC_FIELDS",
    "get_target", "list_targets", "target_names", "load_profile", "jetpack_table", "jetpack_release",
    "jetpack_tensorrt_versions",
    "detect_target", "Detection", "parse_nv_tegra_release", "jetpack_for_l4t",
]
