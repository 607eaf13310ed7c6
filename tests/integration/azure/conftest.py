"""The Azure paths run against the try-out cloud's ARM fake, one cloud per test module."""

from tests.localcloud.fixtures import clean_cloud, localcloud  # noqa: F401 pylint: disable=unused-import
