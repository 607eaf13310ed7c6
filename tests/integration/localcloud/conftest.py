"""The try-out cloud's own tests use its fixtures."""

from tests.localcloud.fixtures import clean_cloud, localcloud  # noqa: F401 pylint: disable=unused-import
