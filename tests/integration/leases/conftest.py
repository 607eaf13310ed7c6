"""The lease paths on Hetzner Cloud, Compute Engine and Azure run against one try-out cloud for the module."""

from tests.localcloud.fixtures import localcloud  # noqa: F401 pylint: disable=unused-import
