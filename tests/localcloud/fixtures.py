"""pytest fixtures and a context manager for the try-out cloud. In a conftest.py or a test file:

    from tests.localcloud.fixtures import localcloud  # noqa: F401

localcloud      one cloud process per test module (a CloudClient; .info is its cloud.json); every fault is
                cleared after each test
cloud_process   the context manager behind it: with cloud_process(directory, **options) as cloud: ...
hetzner_fake    the Hetzner Cloud fake alone, on an event loop of its own (no guests): with hetzner_fake(...) as fake
"""

import contextlib
import os

import pytest

from tests.localpve.cluster import pick_host

from .config import Options
from .control import CloudClient
from .process import down, up


@contextlib.contextmanager
def hetzner_fake(token, address_range, name='hetzner-fake', **timing):
    """The Hetzner Cloud fake (token ``token``, server addresses from ``address_range``, ``timing``: boot_secs,
    delete_secs) serving on an event loop of its own; stopped on leaving."""
    from tests.localpve.addresses import AddressPool  # pylint: disable=import-outside-toplevel
    from tests.localpve.cluster import LoopThread  # pylint: disable=import-outside-toplevel

    from .hetzner import HetznerCloud  # pylint: disable=import-outside-toplevel
    loop = LoopThread(name)
    fake = HetznerCloud(token, AddressPool(address_range), **timing)
    loop.call(fake.start())
    try:
        yield fake
    finally:
        loop.call(fake.stop())
        loop.close()


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
