"""ansible-inventory with ephemera.workspaces.workspaces against the try-out cluster (tests/localpve).

Two workspaces are made by the real create playbook: one ready, one that fails at its brief step. A
third, cloned with its marker and recorded as being destroyed, is what the destroy flow leaves first.
Two containers join the pool without a journal record: one bare, one with a genuine marker of this
controller (a journal that lost a record). Every inventory is a real ansible-inventory process; API
requests are counted at the fake PVE.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, Queue
from tests.ansible_run import Run, core_version, run_ansible, said
from tests.localpve import LocalCluster, clone_workspace, proxmox
from tests.localpve.addresses import closed_port

GOOD_AGENT = ['true']
CREATE_TIMEOUT = 240


class Site:
    def __init__(self, cluster, journal_path, base):
        self.cluster = cluster
        self.info = cluster.info
        self.journal_path = journal_path
        self.base = base
        self.orphans = {}
        self.vmids = {}
        self.addresses = {}

    def requests_since(self, mark):
        return [(method, path.replace('/api2/json', '')) for method, path, _body in self.cluster.pve.requests[mark:]]

    def mark(self):
        return len(self.cluster.pve.requests)


def _create_runs(info, journal_path, repo, names_and_agents):
    runs = []
    for name, agent in names_and_agents:
        extra = dict(workspace=name, repo='file://' + repo, ref='main', purpose='make the tests pass: %s' % name,
                     agent='tool', ephemera_agents={'tool': agent}, ephemera_template_vmid=info['template_vmid'],
                     ephemera_pool=info['pool'], ephemera_api_host=info['proxy_url'], ephemera_api_user=info['user'],
                     ephemera_api_token_id=info['token_id'], ephemera_api_token_secret=info['token_secret'],
                     ephemera_ca_file=info['ca_file'], ephemera_guest_root=info['guest_root'],
                     ephemera_ssh_user=info['ssh_user'], ephemera_ssh_port=info['ssh_port'],
                     ephemera_ssh_private_key=info['ssh_private_key'], ephemera_agent_user=info['ssh_user'],
                     ephemera_agent_user_is_ssh_user=True,
                     ephemera_journal_path=journal_path)
        runs.append(Run.start(['ansible-playbook', 'ephemera.workspaces.create', '-e', json.dumps(extra)],
                              callback=None))
    for run in runs:
        run.wait(CREATE_TIMEOUT, fail=False)
    return [(run.output, 'timeout' if run.timed_out else run.returncode) for run in runs]


def _make_repo(path):
    git = ['git', '-c', 'user.email=tests@example.com', '-c', 'user.name=tests', '-C', path]
    subprocess.run(['git', 'init', '-q', '-b', 'main', path], check=True)
    with open(os.path.join(path, 'README'), 'w') as f:
        f.write('inventory tests\n')
    subprocess.run(git + ['add', 'README'], check=True)
    subprocess.run(git + ['commit', '-q', '-m', 'start'], check=True)


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    base = str(tmp_path_factory.mktemp('inventory'))
    cluster = LocalCluster.start(os.path.join(base, 'localpve'))
    try:
        journal_path = os.path.join(base, 'journal.sqlite')
        repo = os.path.join(base, 'repo')
        _make_repo(repo)
        requests = [('ws-ready', GOOD_AGENT), ('ws-broken', ['/nonexistent/agent'])]
        outputs = _create_runs(cluster.info, journal_path, repo, requests)
        assert [code for _out, code in outputs] == [0, 2], '\n\n'.join(out[-3000:] for out, _code in outputs)
        s = Site(cluster, journal_path, base)
        api = proxmox(cluster.info, via='api', auth='token')
        with Journal.open(journal_path, create=False) as journal:
            for name in ('ws-ready', 'ws-broken'):
                record = journal.get_workspace(name)
                s.vmids[name], s.addresses[name] = record['vmid'], record['address']
            secret = ownership.load_secret(journal_path)
            controller = ownership.controller_id(secret)
            # A workspace as the destroy flow leaves it first: marked for destruction, container still there.
            gone = int(api.cluster.nextid.get())
            clone_workspace(api, cluster.info, hostname='agent-ws-gone', start=False, vmid=gone,
                            description=ownership.render(secret, controller, 'ws-gone', gone))
            node = cluster.info['template_node']
            journal.create_workspace('ws-gone', status='destroying', desired_state='destroyed', vmid=gone, node=node,
                                     repo='file://' + repo, ref='main', purpose='done',
                                     params={'pool': cluster.info['pool'], 'agent_user': cluster.info['ssh_user']})
            journal.record_cleanup_debt('ws-gone', 'lxc/%d@%s' % (gone, node), 'CT is locked (backup)')
            s.vmids['ws-gone'] = gone
        s.orphans['bare'] = clone_workspace(api, cluster.info, hostname='stray', start=False).vmid
        lost = int(api.cluster.nextid.get())
        s.orphans['lost'] = clone_workspace(api, cluster.info, hostname='agent-ws-lost', start=False, vmid=lost,
                                            description=ownership.render(secret, controller, 'ws-lost', lost)).vmid
        yield s
    finally:
        cluster.stop()


@pytest.fixture
def inventory(tmp_path):
    """inventory(config_text or dict, *args, env=None, name='site') -> (returncode, parsed --list or None, stderr)."""
    def run(config, *args, env=None, name='site', command='ansible-inventory'):
        path = str(tmp_path / ('%s.workspaces.yml' % name))
        with open(path, 'w') as f:
            f.write(config if isinstance(config, str) else json.dumps(config))
        environ = dict(ANSIBLE_INVENTORY_UNPARSED_FAILED='1', ANSIBLE_HOME=str(tmp_path / 'home'),
                       ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'), XDG_CACHE_HOME=str(tmp_path / 'cache'))
        environ.update(env or {})
        default_args = ['--list'] if command == 'ansible-inventory' else []
        run = run_ansible([command, '-i', path] + list(args or default_args), timeout=180, env=environ, callback=None,
                          unset=('PROXMOX_', 'EPHEMERA_'))
        return run.returncode, run.data, run.output
    run.path = lambda name='site': str(tmp_path / ('%s.workspaces.yml' % name))
    return run


def config(site, **options):
    """The site's inventory configuration with ``options`` changed; an option set to None is left out."""
    data = dict(plugin='ephemera.workspaces.workspaces', journal_path=site.journal_path,
                api_host=site.info['proxy_url'], api_token_id=site.info['token_id'],
                api_token_secret=site.info['token_secret'], ca_file=site.info['ca_file'])
    data.update(options)
    return {k: v for k, v in data.items() if v is not None}


def hosts_of(data, group):
    return sorted(data.get(group, {}).get('hosts', []))


def copy_journal(site, tmp_path):
    """A private copy of the site's journal (and its controller secret), to change without touching the site's."""
    path = str(tmp_path / 'journal-copy.sqlite')
    source = sqlite3.connect(site.journal_path)
    target = sqlite3.connect(path)
    source.backup(target)
    source.close()
    target.close()
    shutil.copy(ownership.secret_path(site.journal_path), ownership.secret_path(path))
    return path


# ------------------------------------------------------------------------------------------ tests

def test_groups_and_variables_of_ready_failed_destroying_and_orphans(site, inventory):
    mark = site.mark()
    code, data, out = inventory(config(site))
    assert code == 0, out
    requests = site.requests_since(mark)
    # One cluster-wide read, then only the orphans' configs for their markers: no per-workspace calls.
    assert requests[0] == ('GET', '/cluster/resources')
    assert sorted(requests[1:]) == sorted(('GET', '/nodes/%s/lxc/%d/config' % (site.info['template_node'], vmid))
                                          for vmid in site.orphans.values())
    assert hosts_of(data, 'workspaces') == ['ws-broken', 'ws-gone', 'ws-ready']
    assert hosts_of(data, 'status_ready') == ['ws-ready']
    assert hosts_of(data, 'status_failed') == ['ws-broken']
    assert hosts_of(data, 'status_destroying') == ['ws-gone']
    assert hosts_of(data, 'cleanup_debt') == ['ws-gone']
    assert hosts_of(data, 'node_' + site.info['template_node']) == ['ws-broken', 'ws-gone', 'ws-ready']
    assert hosts_of(data, 'orphans') == sorted('orphan-%d' % v for v in site.orphans.values())
    assert 'missing' not in data
    hv = data['_meta']['hostvars']

    ready = hv['ws-ready']
    assert (ready['ansible_host'], ready['ansible_user'], ready['ansible_port']) == (
        site.addresses['ws-ready'], site.info['ssh_user'], site.info['ssh_port'])
    assert ready['ansible_ssh_private_key_file'] == site.info['ssh_private_key']
    assert ready['ansible_ssh_common_args'].endswith('-o StrictHostKeyChecking=yes')
    assert ready['ephemera_host_key'].startswith('ssh-ed25519 ')
    assert (ready['ephemera_status'], ready['ephemera_live_status'], ready['ephemera_step']) == ('ready', 'running', None)
    assert (ready['ephemera_vmid'], ready['ephemera_node'], ready['ephemera_pool']) == (
        site.vmids['ws-ready'], site.info['template_node'], site.info['pool'])
    assert ready['ephemera_repo'].endswith('/repo') and ready['ephemera_ref'] == 'main'
    assert ready['ephemera_purpose'] == 'make the tests pass: ws-ready'
    assert ready['ephemera_created_at'] <= ready['ephemera_updated_at']
    assert (ready['ephemera_last_failure'], ready['ephemera_cleanup_debt']) == (None, [])
    assert ready['ephemera_tags'] == ['ephemera'] and ready['ephemera_address_source'] == 'journal'
    assert 'ws-ready' in hosts_of(data, 'activity_' + ready['ephemera_activity'])

    broken = hv['ws-broken']
    assert (broken['ephemera_status'], broken['ephemera_step']) == ('failed', 'brief')
    assert broken['ephemera_last_failure']['step'] == 'brief'
    assert 'nonexistent' in broken['ephemera_last_failure']['message']
    assert broken['ephemera_live_status'] == 'running' and broken['ansible_host'] == site.addresses['ws-broken']

    gone = hv['ws-gone']
    assert (gone['ephemera_status'], gone['ephemera_desired_state'], gone['ephemera_step']) == (
        'destroying', 'destroyed', 'destroy')
    assert (gone['ephemera_live_status'], gone['ephemera_marker']) == ('stopped', None)
    assert 'ansible_host' not in gone
    [debt] = gone['ephemera_cleanup_debt']
    assert (debt['resource'], debt['attempts'], debt['last_error']) == (
        'lxc/%d@%s' % (site.vmids['ws-gone'], site.info['template_node']), 1, 'CT is locked (backup)')

    bare = hv['orphan-%d' % site.orphans['bare']]
    assert (bare['ephemera_orphan_reason'], bare['ephemera_marker'], bare['ephemera_name']) == (
        'not_in_journal', 'absent', 'stray')
    assert 'ansible_host' not in bare and bare['ephemera_pool'] == site.info['pool']
    lost = hv['orphan-%d' % site.orphans['lost']]
    assert (lost['ephemera_marker'], lost['ephemera_marker_workspace']) == ('verified', 'ws-lost')
    # Orphans are reported, never acted on: they are in no group but their own.
    for group, members in data.items():
        if group not in ('_meta', 'all', 'orphans'):
            assert not [h for h in members.get('hosts', []) if h.startswith('orphan-')], group


def adhoc(site, tmp_path, journal_path, pattern, *args):
    """``ansible -i <inventory> <pattern> <args>`` as the documentation shows it: no SSH option, key or known-hosts
    file of the caller's, host key checking on (whatever the environment of the tests says). The Run, its JSON
    output read, and the known-hosts file the inventory wrote."""
    known_hosts = str(tmp_path / 'known_hosts')
    path = str(tmp_path / 'adhoc.workspaces.yml')
    with open(path, 'w') as f:
        f.write(json.dumps(config(site, journal_path=journal_path, known_hosts_file=known_hosts)))
    # SSH reuses a persistent master connection to the same host, port and user without checking the key again:
    # each test has its own, so that one test's verified connection does not stand in for another's.
    env = dict(ANSIBLE_HOST_KEY_CHECKING='True', ANSIBLE_INVENTORY_UNPARSED_FAILED='1',
               ANSIBLE_HOME=str(tmp_path / 'home'), ANSIBLE_LOCAL_TEMP=str(tmp_path / 'tmp'),
               ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / 'cp'), XDG_CACHE_HOME=str(tmp_path / 'cache'))
    run = run_ansible(['ansible', '-i', path, pattern] + list(args), timeout=180, env=env,
                      unset=('PROXMOX_', 'EPHEMERA_', 'ANSIBLE_HOST_KEY_CHECKING', 'ANSIBLE_SSH_',
                             'ANSIBLE_PRIVATE_KEY_FILE', 'ANSIBLE_REMOTE_USER'))
    return run, known_hosts


def host_result(run, host):
    [(_task, result)] = run.results(host)
    return result


def test_adhoc_commands_reach_the_workspaces_with_host_key_checking_on(site, tmp_path):
    live = ['ws-broken', 'ws-ready']  # both got past the ssh step: their host keys are recorded
    with Journal.open(site.journal_path, create=False) as journal:
        keys = {name: journal.get_workspace(name)['facts']['host_key'] for name in live}

    run, known_hosts = adhoc(site, tmp_path, site.journal_path, 'workspaces:!status_destroying', '-m',
                             'ansible.builtin.ping')
    assert run.ok, run.explain()
    for name in live:
        assert host_result(run, name)['ping'] == 'pong', run.explain()
    # The file pins exactly the recorded keys, at the address and port Ansible connects to.
    with open(known_hosts) as f:
        lines = [line for line in f.read().splitlines() if not line.startswith('#')]
    port = site.info['ssh_port']
    endpoint = (lambda address: address) if port == 22 else (lambda address: '[%s]:%d' % (address, port))
    assert sorted(lines) == sorted('%s %s' % (endpoint(site.addresses[name]), keys[name]) for name in live)
    assert os.stat(known_hosts).st_mode & 0o777 == 0o600

    run, _known_hosts = adhoc(site, tmp_path, site.journal_path, 'workspaces:!status_destroying', '-m',
                              'ansible.builtin.command', '-a', 'printenv LOCALPVE_VMID')
    assert run.ok, run.explain()
    for name in live:
        assert host_result(run, name)['stdout'] == str(site.vmids[name])


def test_a_guest_whose_key_is_not_the_recorded_one_fails_host_key_verification(site, tmp_path):
    journal_path = copy_journal(site, tmp_path)
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(tmp_path / 'other')], check=True)
    other = ' '.join((tmp_path / 'other.pub').read_text().split()[:2])
    with Journal.open(journal_path, create=False) as journal:
        record = journal.get_workspace('ws-ready')
        assert record['facts']['host_key'] != other
        journal.update_workspace('ws-ready', record['generation'], facts=dict(record['facts'], host_key=other))

    run, _known_hosts = adhoc(site, tmp_path, journal_path, 'ws-ready:ws-broken', '-m', 'ansible.builtin.ping')
    assert not run.ok
    refused = host_result(run, 'ws-ready')
    assert refused.get('unreachable') and 'Host key verification failed' in refused['msg'], run.explain()
    assert host_result(run, 'ws-broken')['ping'] == 'pong', run.explain()


def awx_split(site, tmp_path, journal_path, **options):
    """What AWX does with an inventory: an inventory update lists it (ansible-inventory --list) in a container of its
    own, here a directory of its own (HOME, caches); a job later gets the stored JSON through a script, in another
    one, with host key checking off as ansible-runner sets it. Returns job(pattern, *args, listed=None) running
    ``ansible`` as that job (``listed``: the JSON text to hand it instead), and the listed JSON text."""
    update = tmp_path / 'inventory-update'
    update.mkdir()
    path = str(update / 'awx.workspaces.yml')
    with open(path, 'w') as f:
        f.write(json.dumps(config(site, journal_path=journal_path, **options)))
    listed = run_ansible(['ansible-inventory', '-i', path, '--list'], timeout=180, callback=None,
                         env=dict(HOME=str(update), ANSIBLE_HOME=str(update / 'ansible'),
                                  ANSIBLE_LOCAL_TEMP=str(update / 'tmp'), XDG_CACHE_HOME=str(update / 'cache')),
                         unset=('PROXMOX_', 'EPHEMERA_'))
    assert listed.returncode == 0, listed.output

    def job(pattern, *args, listed_text=None):
        top = tmp_path / ('job-%d' % len(list(tmp_path.glob('job-*'))))
        (top / 'inventory').mkdir(parents=True)
        (top / 'inventory' / 'listed.json').write_text(listed_text or listed.stdout)
        script = top / 'inventory' / 'hosts'
        script.write_text('#!/bin/sh\n[ "$1" = --list ] && exec cat "$(dirname "$0")/listed.json"\necho "{}"\n')
        script.chmod(0o755)
        # SSH's control socket path must fit a Unix socket's 108 bytes: a short directory of its own.
        control = tempfile.mkdtemp(prefix='cp-', dir='/tmp')
        env = dict(HOME=str(top), ANSIBLE_HOME=str(top / 'ansible'), ANSIBLE_LOCAL_TEMP=str(top / 'tmp'),
                   XDG_CACHE_HOME=str(top / 'cache'), ANSIBLE_HOST_KEY_CHECKING='False',
                   ANSIBLE_SSH_CONTROL_PATH_DIR=control, ANSIBLE_INVENTORY_UNPARSED_FAILED='1')
        try:
            return run_ansible(['ansible', '-i', str(script), pattern] + list(args), timeout=180, env=env,
                               unset=('PROXMOX_', 'EPHEMERA_', 'ANSIBLE_SSH_', 'ANSIBLE_PRIVATE_KEY_FILE',
                                      'ANSIBLE_REMOTE_USER'))
        finally:
            shutil.rmtree(control, ignore_errors=True)
    return job, listed.stdout


def test_inline_pinning_verifies_the_host_key_in_a_job_that_never_saw_the_inventory_update(site, tmp_path):
    """host_key_pinning: inline, as inventories/awx.workspaces.yml sets it: the keys reach the job in the host
    variables, and the job verifies them although ansible-runner turned host key checking off."""
    with Journal.open(site.journal_path, create=False) as journal:
        key = journal.get_workspace('ws-ready')['facts']['host_key']
    job, listed = awx_split(site, tmp_path, site.journal_path, host_key_pinning='inline',
                            known_hosts_file=str(tmp_path / 'never-written'))
    # No file is written anywhere: the inventory update's directory holds none, and the option is not used.
    assert not os.path.exists(str(tmp_path / 'never-written'))
    assert not list((tmp_path / 'inventory-update').glob('cache/ephemera/known_hosts/*'))
    run = job('ws-ready', '-m', 'ansible.builtin.command', '-a', 'printenv LOCALPVE_VMID')
    assert run.ok, run.explain()
    assert host_result(run, 'ws-ready')['stdout'] == str(site.vmids['ws-ready'])
    # The same job handed another key for the host: SSH refuses the guest, host key checking off or not.
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(tmp_path / 'other')], check=True)
    other = ' '.join((tmp_path / 'other.pub').read_text().split()[:2])
    assert key.split()[1] in listed
    run = job('ws-ready', '-m', 'ansible.builtin.ping', listed_text=listed.replace(key.split()[1], other.split()[1]))
    assert not run.ok
    refused = host_result(run, 'ws-ready')
    assert refused.get('unreachable') and 'Host key verification failed' in refused['msg'], run.explain()


def test_the_known_hosts_file_of_an_inventory_update_does_not_reach_a_job(site, tmp_path):
    """Why inline pinning exists: with the default known-hosts file, a job in another place than the inventory
    update finds no file, and with host key checking off (ansible-runner's default) it trusts any key."""
    job, listed = awx_split(site, tmp_path, site.journal_path)
    with Journal.open(site.journal_path, create=False) as journal:
        key = journal.get_workspace('ws-ready')['facts']['host_key']
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(tmp_path / 'other')], check=True)
    other = ' '.join((tmp_path / 'other.pub').read_text().split()[:2])
    run = job('ws-ready', '-m', 'ansible.builtin.ping', listed_text=listed.replace(key.split()[1], other.split()[1]))
    assert run.ok and host_result(run, 'ws-ready')['ping'] == 'pong', run.explain()


def test_a_listed_workspace_is_reachable_over_ssh(site, inventory):
    key, known = site.info['ssh_private_key'], site.info['ssh_known_hosts']
    code, _data, out = inventory(config(site), 'ws-ready', '-m', 'ansible.builtin.raw', '-a', 'echo "vmid=$LOCALPVE_VMID"',
                                 '--private-key', key, command='ansible',
                                 env={'ANSIBLE_SSH_ARGS': '-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes' % known})
    assert code == 0, out
    assert 'vmid=%d' % site.vmids['ws-ready'] in out


def test_compose_groups_keyed_groups_and_filters(site, inventory):
    options = config(site, compose={'ansible_user': "'ops'", 'short_repo': "ephemera_repo | basename"},
                     groups={'needs_attention': "ephemera_status in ['failed', 'destroying']"},
                     keyed_groups=[{'key': 'ephemera_live_status', 'prefix': 'live'}],
                     filters={'status': ['ready', 'failed']}, group_prefix='ws_', include_orphans=False)
    code, data, out = inventory(options)
    assert code == 0, out
    assert hosts_of(data, 'ws_workspaces') == ['ws-broken', 'ws-ready']
    assert hosts_of(data, 'needs_attention') == ['ws-broken']
    assert hosts_of(data, 'live_running') == ['ws-broken', 'ws-ready']
    assert 'ws_orphans' not in data and 'ws_status_ready' in data
    hv = data['_meta']['hostvars']
    assert hv['ws-ready']['ansible_user'] == 'ops' and hv['ws-ready']['short_repo'] == 'repo'

    code, data, out = inventory(config(site, filters={'node': 'no-such-node', 'tag': 'ephemera'}))
    assert code == 0, out
    assert hosts_of(data, 'workspaces') == [] and hosts_of(data, 'orphans') == []


def test_compose_error_is_fatal_only_when_strict(site, inventory):
    options = config(site, compose={'broken': 'no_such_variable.attribute'})
    code, _data, out = inventory(options)
    assert code == 0, out
    code, _data, out = inventory(dict(options, strict=True))
    assert code != 0 and 'no_such_variable' in out


def test_cache_hit_makes_no_api_call(site, inventory, tmp_path):
    journal_path = copy_journal(site, tmp_path)
    options = config(site, journal_path=journal_path, cache=True, cache_plugin='ansible.builtin.jsonfile',
                     cache_connection=str(tmp_path / 'cache'), cache_timeout=3600)
    mark = site.mark()
    code, first, out = inventory(options)
    assert code == 0, out
    assert site.requests_since(mark), 'the first run reads the cluster'
    with Journal.open(journal_path, create=False) as journal:
        journal.create_workspace('ws-new', params={'pool': site.info['pool']})

    mark = site.mark()
    code, second, out = inventory(options)
    assert code == 0, out
    assert site.requests_since(mark) == []
    assert second == first  # nor was the journal read: ws-new is not there yet

    if core_version() >= (2, 19):
        code, third, out = inventory(options, '--list', '--flush-cache')
        assert code == 0, out
        assert site.requests_since(mark)[0] == ('GET', '/cluster/resources')
    else:
        # ansible-inventory has --flush-cache from 2.19 on; before, a playbook run with it renews the cache.
        play = tmp_path / 'nothing.yml'
        play.write_text('- hosts: localhost\n  gather_facts: false\n  tasks: []\n')
        code, dummy, out = inventory(options, '--flush-cache', str(play), command='ansible-playbook')
        assert code == 0, out
        assert site.requests_since(mark)[0] == ('GET', '/cluster/resources')
        mark = site.mark()
        code, third, out = inventory(options)
        assert code == 0, out
        assert site.requests_since(mark) == [], 'the renewed cache answers'
    assert 'ws-new' in hosts_of(third, 'workspaces')


def test_unreachable_cluster_lists_the_journal_with_a_warning(site, inventory):
    options = config(site, api_host='https://127.0.0.1:%d' % closed_port(), request_timeout=5)
    code, data, out = inventory(options)
    assert code == 0, out
    assert said(inventory.path(), out) and said('option api_host', out) and said('from the journal alone', out)
    assert hosts_of(data, 'workspaces') == ['ws-broken', 'ws-gone', 'ws-ready']
    hv = data['_meta']['hostvars']
    assert hv['ws-ready']['ephemera_live_status'] == 'unknown'
    assert hv['ws-ready']['ansible_host'] == site.addresses['ws-ready']
    assert hosts_of(data, 'orphans') == []

    code, data, out = inventory(dict(options, strict=True))
    assert code != 0 and said(inventory.path(), out) and said('option api_host', out), out
    assert said('connection refused', out), out


def test_journal_alone_without_a_cluster(site, inventory):
    mark = site.mark()
    code, data, out = inventory({'plugin': 'ephemera.workspaces.workspaces'}, env={'EPHEMERA_JOURNAL': site.journal_path})
    assert code == 0, out
    assert 'WARNING' not in out and site.requests_since(mark) == []
    assert hosts_of(data, 'status_ready') == ['ws-ready']


@pytest.mark.parametrize('case, change, env, expected', [
    ('unknown option', {'journal': '/x'}, {}, ["unknown option 'journal'", "did you mean 'journal_path'"]),
    ('unknown filter', {'filters': {'state': 'ready'}}, {}, ["unknown filter 'state' in option filters"]),
    ('unknown status', {'filters': {'status': 'readyy'}}, {}, ['option filters.status', 'readyy']),
    ('missing journal', {'journal_path': '/nonexistent/journal.sqlite'}, {},
     ['option journal_path', 'No journal at /nonexistent/journal.sqlite']),
    ('missing journal from env', {'journal_path': None}, {'EPHEMERA_JOURNAL': '/nonexistent/j.sqlite'},
     ['option journal_path (from EPHEMERA_JOURNAL)', '/nonexistent/j.sqlite']),
    ('bad token', {'api_token_secret': 'wrong'}, {}, ['options api_token_id, api_token_secret', 'refused API token']),
    ('bad password', {'api_token_id': None, 'api_token_secret': None, 'api_user': 'root@pam'},
     {'PROXMOX_PASSWORD': 'wrong'}, ['api_password (from PROXMOX_PASSWORD)', 'refused the login']),
    ('no credentials', {'api_token_id': None, 'api_token_secret': None}, {},
     ['connection options', 'no Proxmox VE credentials']),
    ('wrong CA', {'ca_file': '/etc/ssl/certs/ca-certificates.crt'}, {}, ['options ca_file, validate_certs',
                                                                         'does not verify']),
])
def test_bad_input_names_the_file_and_the_option(site, inventory, case, change, env, expected):
    code, data, out = inventory(config(site, **change), env=env)
    assert code != 0, out
    assert said(inventory.path(), out), out
    for text in expected:
        assert said(text, out), case


def test_templates_in_journal_data_are_never_evaluated(site, inventory, tmp_path):
    journal_path = copy_journal(site, tmp_path)
    canary = tmp_path / 'evaluated'
    purpose = "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % canary
    with Journal.open(journal_path, create=False) as journal:
        journal.create_workspace('ws-sneaky', status='ready', purpose=purpose)
    play = tmp_path / 'show.yml'
    play.write_text('- hosts: ws-sneaky\n  gather_facts: false\n  tasks:\n'
                    '    - ansible.builtin.debug:\n        msg: "purpose={{ ephemera_purpose }}"\n')
    code, _data, out = inventory(config(site, journal_path=journal_path, api_host=None), str(play),
                                 command='ansible-playbook')
    assert code == 0, out
    assert 'purpose=%s' % purpose in out
    assert not canary.exists()


def test_current_step_comes_from_the_running_operation(site, inventory, tmp_path):
    journal_path = copy_journal(site, tmp_path)
    with Journal.open(journal_path, create=False) as journal:
        journal.create_workspace('ws-busy', status='provisioning', params={'pool': site.info['pool']},
                                 progress={'request': 1, 'vmid': 1})
        queue = Queue(journal)
        turn = queue.poll(queue.enqueue('create', 'ws-busy').request_id)
        assert turn.outcome == CLAIMED
        queue.step(turn.claim, 'wait_clone')
    code, data, out = inventory(config(site, journal_path=journal_path, api_host=None, filters={'status': 'provisioning'}))
    assert code == 0, out
    busy = data['_meta']['hostvars']['ws-busy']
    assert busy['ephemera_step'] == 'wait_clone'
    assert (busy['ephemera_operation']['kind'], busy['ephemera_operation']['step']) == ('create', 'wait_clone')
