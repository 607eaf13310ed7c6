"""pytest fixtures for the try-out cluster. In a conftest.py:

    from tests.localpve.fixtures import localpve, localpve_factory, localpve_process  # noqa: F401

localpve          a cluster inside the test process (time_scale 0), stopped after the test
localpve_factory  factory(**options) -> LocalCluster, for clusters with other options
localpve_process  a cluster process started like `up` (time_scale 0); a ControlClient with .info
"""

import os

import pytest

from .cluster import LocalCluster, pick_host
from .config import Options
from .control import ControlClient
from .process import down, up


@pytest.fixture
def localpve_factory(tmp_path):
    started = []

    def start(**options):
        cluster = LocalCluster.start(os.path.join(str(tmp_path), 'localpve-{0}'.format(len(started))), **options)
        started.append(cluster)
        return cluster
    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def localpve(localpve_factory):
    return localpve_factory()


@pytest.fixture
def localpve_process(tmp_path):
    options = Options(state_dir=os.path.join(str(tmp_path), 'localpve'), host=pick_host(), api_port=0, proxy_port=0,
                      time_scale=0).check()
    client = ControlClient(up(options))
    try:
        yield client
    finally:
        down(options.state_dir)
