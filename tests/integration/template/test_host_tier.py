"""A template build on the host guest tier is refused before provisioning: its guests are this machine.

On the host tier every guest's commands run on this machine. A build provisions and cleans as root with absolute
paths (apt-get, removing SSH host keys, emptying /etc/machine-id), so it must never run there: the build checks that
the machine answering at the candidate's address is the candidate (its host name), aborts otherwise, and removes
the candidate.
"""

import hashlib
import os

import pytest

from tests.integration.playbooks import running_cluster
from tests.integration.create.createrun import Controller

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(ROOT, 'playbooks', 'template_build.yml')
WATCHED = ('/etc/machine-id', '/etc/ssh')


def fingerprint(paths):
    """Names, sizes and contents of the files under ``paths`` that this user can read."""
    out = []
    for top in paths:
        if os.path.isfile(top):
            entries = [top]
        else:
            entries = sorted(os.path.join(base, name) for base, dirs, names in os.walk(top) for name in names)
        for path in entries:
            try:
                with open(path, 'rb') as src:
                    out.append((path, hashlib.sha256(src.read()).hexdigest()))
            except OSError:
                out.append((path, None))
    return out


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp('template-host')) as client:
        yield client


def test_a_build_never_provisions_or_cleans_this_machine(cluster, tmp_path):
    ctl = Controller(cluster, tmp_path / 'controller')
    before = fingerprint(WATCHED)
    extra = {'template': 'workspace', 'source': int(ctl.info['template_vmid']), 'ephemera_packages': [],
             'ephemera_npm_packages': [], 'ephemera_agent_commands': ['touch /tmp/ephemera-provisioned-the-host'],
             'ephemera_tools': ['git'], 'ephemera_agent_user': 'agent'}
    run = ctl.start(extra, playbook=BUILD).wait(300, fail=False)
    assert not run.ok
    message = run.failure()[1]['msg']
    assert 'failed at step 9/14 (provision)' in message and 'it is not the candidate container' in message, message
    assert 'The build was aborted' in message
    assert fingerprint(WATCHED) == before
    assert not os.path.exists('/tmp/ephemera-provisioned-the-host')
    with ctl.journal() as journal:
        version = journal.template_versions('workspace')[0]
        assert journal.template('workspace') is None
        assert journal.get_workspace(version['workspace'])['status'] == 'destroyed'
    assert version['state'] == 'failed'
    assert ctl.ours(version['workspace']) == []
