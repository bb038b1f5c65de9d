"""Fixtures shared by the compress tests."""

import pytest


@pytest.fixture(scope="session")
def fmnist_root():
    """The folder with the real Fashion-MNIST IDX files (the asset cache); the test skips without them."""
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    except AssetError as err:
        pytest.skip("Fashion-MNIST not available: %s" % err)
