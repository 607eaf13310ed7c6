"""Fork through the shipped playbooks on the try-out cluster: real sshd guests, a real git repository."""

import json
import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint

from tests.integration.playbooks import FAKE_AGENTS, site_with_workspaces

PARENTS = ['f-par', 'f-bad', 'f-fail', 'f-kill', 'f-aban']


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    with site_with_workspaces(str(tmp_path_factory.mktemp('fork')), PARENTS, forks=2) as site:
        yield site


def guest_file(site, vmid, path):
    with open(os.path.join(site.cluster.guest_root(vmid), path.lstrip('/'))) as handle:
        return handle.read()


def snapshots(site, ws):
    listed = site.cluster.api().get('/nodes/%s/lxc/%d/snapshot' % (ws['node'], ws['vmid']))
    return [s['name'] for s in listed if s['name'] != 'current']


def made_side_by_side(journal, names):
    """True when every child's record was made before any child reached identity reset."""
    def first(name, action=None):
        return min(e['id'] for e in journal.events(name) if action in (None, e['action']))
    return max(first(n) for n in names) < min(first(n, 'identity_reset') for n in names)


def fork(site, parent, **extra):
    values = dict(workspace=parent, agent_credentials={'ANTHROPIC_API_KEY': 'child-key'}, ephemera_agents=FAKE_AGENTS)
    values.update(extra)
    return site.playbook('fork.yml', **values)


def test_fork_makes_n_ready_children_each_its_own(site):
    parent_before = site.workspace('f-par')
    parent_root = site.cluster.guest_root(parent_before['vmid'])
    os.makedirs(os.path.join(parent_root, 'etc'), exist_ok=True)
    with open(os.path.join(parent_root, 'etc/machine-id'), 'w') as out:
        out.write('0' * 32 + '\n')
    with open(os.path.join(parent_root, 'var/lib/ephemera/agent.env'), 'w') as out:
        out.write('ANTHROPIC_API_KEY=parent-secret\n')
    result = fork(site, 'f-par', count=2)
    assert result.ok, result.output[-4000:]
    children = [site.workspace('f-par-%d' % i) for i in (1, 2)]
    assert [c['status'] for c in children] == ['ready', 'ready']
    ids = set()
    keys = set()
    for child in children:
        assert child['facts']['fork']['parent'] == 'f-par'
        assert child['facts']['fork']['fork_point'] == parent_before['facts']['head']
        machine_id = guest_file(site, child['vmid'], '/etc/machine-id').strip()
        ids.add(machine_id)
        keys.add(child['facts']['host_key'])
        env = guest_file(site, child['vmid'], '/var/lib/ephemera/agent.env')
        assert 'parent-secret' not in env and 'child-key' in env
    assert len(ids) == 2 and '0' * 32 not in ids
    assert len(keys) == 2 and parent_before['facts']['host_key'] not in keys
    parent = site.workspace('f-par')
    assert parent['status'] == 'ready' and parent['vmid'] == parent_before['vmid']
    assert parent['facts']['host_key'] == parent_before['facts']['host_key']
    assert 'parent-secret' in guest_file(site, parent['vmid'], '/var/lib/ephemera/agent.env')
    assert parent['facts']['fork']['state'] == 'done'
    assert sorted(parent['facts']['fork_children']) == ['f-par-1', 'f-par-2']
    assert snapshots(site, parent) == []
    # Made side by side: each child was recorded before the other reached identity reset.
    assert made_side_by_side(site.journal(), ['f-par-1', 'f-par-2'])
    status = site.playbook('status.yml')
    assert status.ok and 'forked into f-par-1, f-par-2' in status.output
    # The children are ordinary workspaces: one is destroyed as any other, the parent and its sibling stay.
    gone = site.playbook('destroy.yml', workspace='f-par-1', discard_unsaved_work=True)
    assert gone.ok, gone.output[-3000:]
    assert site.workspace('f-par-1')['status'] == 'destroyed'
    assert site.workspace('f-par-2')['status'] == 'ready' and site.workspace('f-par')['status'] == 'ready'


def test_check_mode_changes_nothing(site):
    before = site.workspace('f-bad')
    result = site.playbook('fork.yml', check=True, workspace='f-bad', count=2)
    assert result.ok, result.output[-3000:]
    assert site.workspace('f-bad')['generation'] == before['generation']
    assert site.workspace('f-bad-1') is None and snapshots(site, before) == []


def test_bad_inputs_are_refused_before_anything_is_copied(site):
    before = site.workspace('f-bad')
    for extra, words in [({'count': 40}, 'at most 16'),
                         ({'children': [{'name': 'f-par'}]}, 'exists already'),
                         ({'children': [{'name': 'x-1'}, {'name': 'x-1'}]}, 'given twice')]:
        result = fork(site, 'f-bad', **extra)
        assert not result.ok
        assert words in result.output, result.output[-3000:]
    assert site.workspace('f-bad')['generation'] == before['generation']
    assert snapshots(site, before) == []
    assert site.workspace('x-1') is None


def test_a_child_that_cannot_reach_identity_reset_undoes_the_whole_fork(site):
    before = site.workspace('f-fail')
    # The first child starts and is reset; the second child's start fails (twice: the create retries a start once),
    # so it never reaches identity reset.
    site.cluster.control.proxy_add('error', 'POST', '/nodes/*/lxc/*/status/start', skip=1, times=2, status=403,
                                   message='Permission check failed (/vms, VM.PowerMgmt)')
    result = fork(site, 'f-fail', count=2)
    assert not result.ok, (site.cluster.control.proxy_rules(), result.output[-3000:])
    assert 'is as it was' in result.output
    # The children are made side by side: whichever child's start failed, the other stopped or was reset, and
    # neither was briefed.
    for name in ('f-fail-1', 'f-fail-2'):
        done = [e['action'] for e in site.journal().events(name)]
        assert 'brief' not in done and 'ready' not in done, (name, done)
    for name in ('f-fail-1', 'f-fail-2'):
        child = site.workspace(name)
        assert (child['status'], child['desired_state']) == ('destroyed', 'destroyed'), name
        assert not os.path.exists(site.cluster.guest_root(child['vmid'] or 0))
    parent = site.workspace('f-fail')
    assert parent['status'] == 'ready' and parent['facts']['fork']['state'] == 'abandoned'
    assert snapshots(site, before) == []


def fork_killed_after_second_reset(site, parent, tmp_path):
    """A fork of ``parent`` into two children, killed once the second child's identity reset is recorded."""
    trace = tmp_path / 'trace'
    trace.write_text('')
    kill = json.dumps({'workspace': parent + '-2', 'point': 'fork.reset journal identity_reset', 'nth': 1})
    killed = fork(site, parent, count=2, env={failpoint.TRACE_ENV: str(trace), failpoint.KILL_ENV: kill})
    assert not killed.ok


def test_a_killed_fork_run_again_converges_to_all_children(site, tmp_path):
    before = site.workspace('f-kill')
    fork_killed_after_second_reset(site, 'f-kill', tmp_path)
    # Killed between the second child's identity reset and the adoption: no child is adopted.
    children = [site.workspace('f-kill-%d' % i) for i in (1, 2)]
    assert [c['status'] for c in children] != ['ready', 'ready']
    assert all('brief' not in c['progress'] for c in children)
    assert snapshots(site, before)
    # Neither reconcile nor a resumed create takes a child of the unfinished fork on alone.
    looked = site.playbook('reconcile.yml')
    assert looked.ok, looked.output[-3000:]
    assert 'unfinished_fork' in looked.output
    assert all('brief' not in site.workspace('f-kill-%d' % i)['progress'] for i in (1, 2))
    resumed = site.playbook('create.yml', workspace='f-kill-1', workspace_create_resume=True)
    assert not resumed.ok and 'child of an unfinished fork of f-kill' in resumed.output
    again = fork(site, 'f-kill', count=2)
    assert again.ok, again.output[-3000:]
    assert [site.workspace('f-kill-%d' % i)['status'] for i in (1, 2)] == ['ready', 'ready']
    assert site.workspace('f-kill')['facts']['fork']['state'] == 'done'
    assert snapshots(site, before) == []


def test_a_child_of_an_unfinished_fork_is_destroyed_by_its_fork_only(site, tmp_path):
    before = site.workspace('f-aban')
    fork_killed_after_second_reset(site, 'f-aban', tmp_path)
    child = site.workspace('f-aban-1')
    # The destroy playbook refuses the child alone, says how to end the fork, and changes nothing.
    refused = site.playbook('destroy.yml', workspace='f-aban-1', discard_unsaved_work=True)
    assert not refused.ok
    assert 'f-aban-1 is a child of fork %s of f-aban, which is not finished' % child['facts']['fork']['id'] \
        in refused.output, refused.output[-3000:]
    assert 'ansible-playbook ephemera.workspaces.fork -e workspace=f-aban -e fork_abandon=true' in refused.output
    assert 'Run it again to finish it' in refused.output
    after = site.workspace('f-aban-1')
    assert (after['generation'], after['status'], after['desired_state']) == (
        child['generation'], child['status'], 'present')
    assert site.cluster.api().get('/nodes/%s/lxc/%d/status/current' % (after['node'], after['vmid']))['status'] \
        == 'running'
    # The fork's own abandon destroys every child, and the parent is as it was.
    abandoned = fork(site, 'f-aban', fork_abandon=True)
    assert abandoned.ok, abandoned.output[-3000:]
    for name in ('f-aban-1', 'f-aban-2'):
        gone = site.workspace(name)
        assert (gone['status'], gone['desired_state']) == ('destroyed', 'destroyed'), name
    parent = site.workspace('f-aban')
    assert parent['status'] == 'ready' and parent['vmid'] == before['vmid']
    assert parent['facts']['fork']['state'] == 'abandoned' and snapshots(site, before) == []
    # Once the fork ended, a destroy of a child is an ordinary one again (here: already destroyed, nothing to do).
    again = site.playbook('destroy.yml', workspace='f-aban-1')
    assert again.ok, again.output[-3000:]
