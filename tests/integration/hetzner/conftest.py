"""The Hetzner paths run against the try-out cloud's Hetzner Cloud fake, one cloud per test module."""

from tests.localcloud.fixtures import localcloud  # noqa: F401 pylint: disable=unused-import
