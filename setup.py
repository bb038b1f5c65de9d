"""Packaging: the repository's top-level folders become subpackages of ``jetforge``.

``targets/`` is installed as ``jetforge.targets``, ``runtime/`` as ``jetforge.runtime``
and so on, so nothing with a generic name lands at the top of site-packages.  The
mapping is computed here (static metadata lives in pyproject.toml) so that a new
sub-folder with an ``__init__.py`` is packaged without editing a list.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "jetforge": "jetforge",
    "jetforge.targets": "targets",
    "jetforge.runtime": "runtime",
    "jetforge.calibrate": "calibrate",
    "jetforge.compress": "compress",
    "jetforge.apps": "apps",
    "jetforge.deploy": "deploy",
    "jetforge.cli": "cli",
}

packages = []
for package, folder in FOLDERS.items():
    packages.append(package)
    packages.extend("%s.%s" % (package, sub) for sub in find_packages(folder))

setup(
    packages=packages,
    package_dir=FOLDERS,
    package_data={"": ["*.yaml", "*.txt", "*.json", "data/*", "profiles/*.yaml", "py.typed"]},
    include_package_data=False,
)
