"""The folder provider (tests/providerkit) runs against the try-out cloud, one cloud per test module."""

from tests.localcloud.fixtures import localcloud  # noqa: F401 pylint: disable=unused-import
