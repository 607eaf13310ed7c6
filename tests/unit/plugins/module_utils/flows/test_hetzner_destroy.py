"""The create and destroy flows on the Hetzner provider against the Hetzner Cloud fake (hcloud making the requests):
a deletion whose server hides behind 404 while its action runs is not complete until the action succeeded; a
rejected DELETE retires its attempt and keeps the debt; a failed deletion action keeps the server and the debt."""

import subprocess
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import CreateFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import DestroyFlow
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import client as hclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import provider as hprovider
from ansible_collections.ephemera.workspaces.plugins.modules import workspace_create, workspace_destroy

pytest.importorskip('hcloud')
SECRET = b'flow-test-controller-secret-of-40-chars!'
TOKEN = 'flow-token-' + 'y' * 53
PUBLIC_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHetznerFlowKeyForTestsOnly00000000000000000 t@h'


def no_sleep(seconds):
    time.sleep(min(seconds, 0.2))


@pytest.fixture(scope='module')
def fake():
    from tests.localcloud.fixtures import hetzner_fake
    with hetzner_fake(TOKEN, '127.1.98.10-127.1.98.100', 'hetzner-flow-fake', boot_secs=0.2, delete_secs=0.2) as cloud:
        yield cloud


@pytest.fixture
def site(fake, tmp_path):
    fake.clear_rules()
    key = str(tmp_path / 'id_ed25519')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', key], check=True)
    api = hclient.HCloud(TOKEN, fake.url, request_timeout=15, retry_timeout=15)
    provider = hprovider.HetznerProvider(api, SECRET, 'fsn1', {'server_type': 'cx22', 'ssh_public_key': PUBLIC_KEY,
                                                               'networks': [], 'labels': {}}, action_timeout=10)
    journal = Journal.open(str(tmp_path / 'journal.sqlite'))
    yield {'fake': fake, 'provider': provider, 'journal': journal, 'key': key, 'path': str(tmp_path / 'journal.sqlite')}
    journal.close()
    fake.clear_rules()


def created(site, name):
    params = {k: v.get('default') for k, v in workspace_create.argument_spec().items()}
    params.update(name=name, template='ubuntu-24.04', repo='/srv/git/app.git', purpose='fix it',
                  ssh_private_key=site['key'], agents={'claude-code': ['claude', '{purpose}']}, task_timeout=30,
                  lock_timeout=5, provider='hetzner', node='fsn1', journal_path=site['path'],
                  controller_secret=SECRET.decode())
    for step in ('request', 'vmid', 'clone', 'wait_clone'):
        CreateFlow(site['journal'], site['provider'], params, SECRET, sleep=no_sleep).run(step)
    return site['journal'].get_workspace(name)['resource_id']


def destroy(site, name, steps, **changes):
    params = {k: v.get('default') for k, v in workspace_destroy.argument_spec().items()}
    params.update(name=name, shutdown_timeout=5, task_timeout=30, lock_timeout=1, provider='hetzner',
                  journal_path=site['path'], controller_secret=SECRET.decode())
    params.update(changes)
    return [DestroyFlow(site['journal'], site['provider'], params, SECRET, sleep=no_sleep).run(s) for s in steps]


def test_404_while_the_deletion_action_runs_does_not_complete_the_destroy(site):
    server_id = created(site, 'hz-hidden')
    site['fake'].add_rule('hide', 'DELETE', '/servers', seconds=3.0)
    destroy(site, 'hz-hidden', ('mark', 'shutdown', 'stop'))
    with pytest.raises(base.TaskTimeout):
        destroy(site, 'hz-hidden', ('delete',), task_timeout=1)
    assert site['provider'].find(server_id) is None          # hidden: the server answers 404
    ws = site['journal'].get_workspace('hz-hidden')
    assert ws['status'] != 'destroyed'
    # The finish step does not take the 404 for the end: it waits for the recorded action, then the 404.
    destroy(site, 'hz-hidden', ('finish',))
    handle = site['journal'].get_workspace('hz-hidden')['provider_tasks']['delete']
    assert site['fake'].actions[hprovider.parse_handle(handle)[2]]['status'] == 'success'
    assert site['journal'].get_workspace('hz-hidden')['status'] == 'destroyed'


def test_failed_deletion_action_keeps_the_server_and_the_debt(site):
    server_id = created(site, 'hz-failing')
    site['fake'].add_rule('fail_delete', 'DELETE', '/servers')
    destroy(site, 'hz-failing', ('mark', 'shutdown', 'stop'))
    with pytest.raises(base.TaskFailed):
        destroy(site, 'hz-failing', ('delete',))
    assert site['provider'].find(server_id) is not None
    assert site['journal'].get_workspace('hz-failing')['status'] != 'destroyed'
    destroy(site, 'hz-failing', ('delete', 'finish'))
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace('hz-failing')['status'] == 'destroyed'


def test_rejected_delete_retires_its_attempt_and_the_next_run_finishes(site):
    server_id = created(site, 'hz-rejected')
    site['fake'].add_rule('error', 'DELETE', '/servers', status=403)
    destroy(site, 'hz-rejected', ('mark', 'shutdown', 'stop'))
    with pytest.raises(base.Refused):
        destroy(site, 'hz-rejected', ('delete',))
    events = [e['action'] for e in site['journal'].events('hz-rejected')]
    assert 'delete_rejected' in events
    assert site['provider'].find(server_id) is not None
    destroy(site, 'hz-rejected', ('delete', 'finish'))
    assert site['provider'].find(server_id) is None
