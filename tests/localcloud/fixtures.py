"""pytest fixtures and a context manager for the try-out cloud. In a conftest.py or a test file:

    from tests.localcloud.fixtures import localcloud  # noqa: F401

localcloud      one cloud process per test module (a CloudClient; .info is its cloud.json); every fault is
                cleared after each test
cloud_process   the context manager behind it: with cloud_process(directory, **options) as cloud: ...
"""

import contextlib
import os

import pytest

from tests.localpve.cluster import pick_host

from .config import Options
from .control import CloudClient
from .process import down, up


@contextlib.contextmanager
def cloud_process(directory, scope=None, **options):
    """A cloud process started like `up` (a random loopback /24, ports chosen by the system, instances pending and
    shutting down for 0.2 s); a CloudClient, stopped with everything it started on leaving."""
    options.setdefault('host', pick_host())
    options.setdefault('port', 0)
    for key in ('boot_secs', 'stop_secs', 'shutdown_secs'):
        options.setdefault(key, 0.2)
    opts = Options(state_dir=str(directory), **options).check()
    client = CloudClient(up(opts, scope=scope))
    try:
        yield client
    finally:
        down(opts.state_dir)


@pytest.fixture(scope='module')
def localcloud(tmp_path_factory):
    with cloud_process(os.path.join(str(tmp_path_factory.mktemp('localcloud')), 'cloud')) as cloud:
        yield cloud


@pytest.fixture(autouse=False)
def clean_cloud(localcloud):  # pylint: disable=redefined-outer-name
    """The module's cloud with no fault in place before and after the test."""
    localcloud.clear()
    yield localcloud
    localcloud.clear()
