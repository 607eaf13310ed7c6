"""The try-out cluster's own tests use its fixtures."""

from tests.localpve.fixtures import localpve, localpve_factory, localpve_process  # noqa: F401 pylint: disable=unused-import
