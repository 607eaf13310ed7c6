"""One try-out cluster process for the create tests (time_scale 0), a served git repository, a journal per test.

Tests run one after another against the shared cluster, each with its own workspace names and its
own journal (so its own controller id and secret): one test's workspaces are foreign to another's.
Faults are switched off after every test.
"""

import os
import secrets

import pytest

from tests.localpve.cluster import pick_host
from tests.localpve.config import Options
from tests.localpve.control import ControlClient
from tests.localpve.process import down, up

from .createrun import Controller
from .gitserver import GitHttpServer, Repo

GIT_USER = 'ci-bot'


def start_cluster(state_dir, **options):
    opts = Options(state_dir=str(state_dir), host=pick_host(), api_port=0, proxy_port=0, **options).check()
    return ControlClient(up(opts)), opts.state_dir


@pytest.fixture(scope='package')
def cluster(tmp_path_factory):
    client, state_dir = start_cluster(tmp_path_factory.mktemp('cluster'), time_scale=0)
    try:
        yield client
    finally:
        down(state_dir)


@pytest.fixture(autouse=True)
def _clear_faults(request):
    yield
    if 'cluster' in request.fixturenames:
        request.getfixturevalue('cluster').clear()


@pytest.fixture(scope='package')
def repo(tmp_path_factory):
    return Repo(str(tmp_path_factory.mktemp('repo')))


@pytest.fixture(scope='package')
def git_token():
    return 'tok-' + secrets.token_hex(16)


@pytest.fixture(scope='package')
def git_server(repo, git_token):
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, git_token)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def controller(cluster, tmp_path):
    ctl = Controller(cluster, tmp_path / 'controller')
    try:
        yield ctl
    finally:
        ctl.stop()
