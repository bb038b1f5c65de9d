"""Packaging: ``src/jetforge`` is the package, and the folder path is the import path.

Static metadata lives in pyproject.toml; this file only finds the packages, so a new
sub-folder with an ``__init__.py`` is packaged without editing a list.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages("src"),
    package_dir={"": "src"},
    package_data={"": ["*.yaml", "*.txt", "*.json", "data/*", "profiles/*.yaml", "shipped/*/*", "py.typed"]},
    include_package_data=False,
)
