"""Leases end to end through the shipped playbooks on Hetzner Cloud, Compute Engine and Azure (the try-out cloud's
fakes, with SSH guests): one create run makes four workspaces, and three expiry sweeps then show that a working agent
keeps its workspace past its idle timeout until its ttl; an idle workspace is archived and released with nothing
left on the cloud; a kept one (keep=true) is retained for its retain_ttl, then deleted; a release the cloud refuses
is kept as cleanup debt with its attempt and error, and the next due sweep finishes it. One cloud for the file; one
controller (a journal) per provider."""

import json
import os
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from tests.integration.aws.awsrun import PLAYBOOKS
from tests.integration.gcp.gcprun import GcpSite
from tests.integration.hetzner.hzrun import HetznerSite
from tests.integration.playbooks import make_repo
from tests.ansible_run import run_ansible

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DONE_AGENT = ['sh', '-c', 'echo done']
WORKING_AGENT = ['sh', '-c', 'while :; do echo working; sleep 1; done']
IDLE, RETAIN = 8, 3
# The working workspace's idle timeout and ttl, counted from the end of the create (see restart_lease): long
# enough for two sweeps to come between its touches on a loaded machine.
WORK_LEASE = (40, 65)


class AzureSite(HetznerSite):
    """One controller working on the try-out cloud's ARM fake (inventories/localcloud-azure)."""
    inventory = os.path.join(ROOT, 'inventories', 'localcloud-azure')

    def playbook(self, playbook, env=None, check=False, timeout=300, **extra_vars):
        cmd = ['ansible-playbook', '-i', self.inventory, os.path.join(PLAYBOOKS, playbook),
               '-e', json.dumps(extra_vars)]
        return run_ansible(cmd, timeout=timeout, env=self.env(**(env or {})))


def left_on(site, kind, name):
    """What the cloud still holds of workspace ``name``."""
    if kind == 'hetzner':
        return site.servers(name)
    if kind == 'gcp':
        return site.instances(name)
    return [r['name'] for r in site.cloud.azure('resources') if (r.get('tags') or {}).get('ephemera:workspace') == name]


def refuse_delete(site, kind, ws):
    """Every delete of ``ws``'s machine refused until the cloud's faults are cleared."""
    if kind == 'hetzner':
        site.rule('error', method='DELETE', path='/servers', status=403, times=50,
                  match='/servers/%s' % site.servers(ws['name'])[0]['id'])
    elif kind == 'gcp':
        site.fault('fail_delete', 'DELETE', r'/instances/%s$' % ws['resource_id'], times=50,
                   message='Disk detach failed on the host.')
    else:
        site.cloud.azure('rule', action='error', operation='VirtualMachines_Delete', times=None, status=403,
                         code='AuthorizationFailed', message='The client may not delete this VM.',
                         match='*%s*' % ws['name'])


SITES = {'hetzner': HetznerSite, 'gcp': GcpSite, 'azure': AzureSite}


@pytest.fixture(scope='module', params=sorted(SITES))
def site(request, localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    site = SITES[request.param](localcloud, directory)
    site.kind = request.param
    site.repo = make_repo(str(directory / 'repo'))
    return site


def sweep(site, **extra):
    run = site.playbook('expire.yml', fleet=False, **extra)
    assert run.ok, run.explain()
    result = run.task('Release what expired')
    return {e['workspace']: e['action'] for e in result['entries'] if e['workspace']}, result['report']


def restart_lease(site, name):
    """The record of ``name`` with its lease started again now. A lease starts at the request, and how long the
    create takes depends on the machine's load (four Azure sets took from 45 s to over 75 s); the working workspace's
    idle timeout and ttl are to count from its being ready, so that the sweeps come where the test means them to."""
    with site.journal() as journal:
        record = journal.get_workspace(name)
        now = time.time()
        lease = dict(record['lease'], created_at=now, last_touched_at=now)
        lease['expires_at'] = leasing.compute_expires_at(lease)
        journal.update_workspace(name, record['generation'], lease=lease)
        return journal.get_workspace(name)


def wait_until(moment):
    time.sleep(max(0.0, moment - time.time()) + 0.3)


def test_leases_on_the_cloud(site):
    kind = site.kind
    work_idle, ttl = WORK_LEASE
    work, idle, kept, debt = ('%s-%s' % (kind, role) for role in ('work', 'idle', 'kept', 'debt'))

    def own(agent, idle_timeout=IDLE, **lease):
        return dict(agent='worker', ephemera_agents={'worker': agent}, idle_timeout=idle_timeout, **lease)

    created = site.many('create.yml', {
        work: own(WORKING_AGENT, ttl=ttl, idle_timeout=work_idle), idle: own(DONE_AGENT, ttl=600),
        kept: own(DONE_AGENT, ttl=600, keep=True), debt: own(DONE_AGENT, ttl=600)}, repo=site.repo)
    assert created.ok, created.explain()
    records = {name: site.workspace(name) for name in (work, idle, kept, debt)}
    assert all(ws['status'] == 'ready' and ws['provider'] == kind for ws in records.values()), records
    assert records[kept]['lease']['keep'] is True
    records[work] = restart_lease(site, work)
    wait_until(max(records[name]['lease']['expires_at'] for name in (idle, kept, debt)))

    # The first sweep: the working agent's activity touches its lease; the idle one goes; the kept one is retained;
    # the refused delete is kept as debt.
    refuse_delete(site, kind, records[debt])
    try:
        actions, report = sweep(site, retain_ttl=RETAIN)
    finally:
        site.cloud.clear()
    assert (actions.get(work), actions[idle], actions[kept], actions[debt]) == (
        'activity', 'released', 'retained', 'failed'), '\n'.join(report + [
            'lease of %s when the sweep began: %r; now: %r; time: %f'
            % (work, records[work]['lease'], site.workspace(work)['lease'], time.time())])
    gone = site.workspace(idle)
    assert gone['status'] == 'destroyed' and left_on(site, kind, idle) == [] and site.debt(idle) == []
    assert gone['cleanup']['cleanup_completed_at'] is not None
    assert any(e['action'].startswith('archive') for e in site.events(idle)), [e['action'] for e in site.events(idle)]
    held = site.workspace(kept)
    assert held['status'] == 'ready' and held['cleanup']['retained'] is True and left_on(site, kind, kept) != []
    stuck = site.workspace(debt)
    assert stuck['cleanup']['cleanup_attempts'] == 1 and stuck['cleanup']['cleanup_error'], stuck['cleanup']
    assert stuck['cleanup']['cleanup_retry_at'] == stuck['cleanup']['cleanup_failed_at'] + 300
    assert left_on(site, kind, debt) != []

    # The second sweep, once the retention ended and the retry is due (moved into the past instead of waiting five
    # minutes): both are deleted; the working one is touched again, past its first idle expiry.
    wait_until(held['cleanup']['retained_until'])
    with site.journal() as journal:
        record = journal.get_workspace(debt)
        journal.update_workspace(debt, record['generation'],
                                 cleanup=dict(record['cleanup'], cleanup_retry_at=time.time() - 1))
    actions, report = sweep(site)
    assert (actions.get(work), actions[kept], actions[debt]) == ('activity', 'released', 'released'), report
    for name in (kept, debt):
        assert site.workspace(name)['status'] == 'destroyed' and left_on(site, kind, name) == [], name
    assert site.workspace(debt)['cleanup']['cleanup_attempts'] == 1
    working = site.workspace(work)
    assert working['status'] == 'ready' and working['activity'] == 'active'
    assert working['lease']['last_touched_at'] > records[work]['lease']['last_touched_at']

    # Past its first idle expiry it still works; its ttl reached, it goes too, whatever its agent does.
    wait_until(records[work]['lease']['created_at'] + ttl)
    assert time.time() > records[work]['lease']['created_at'] + work_idle
    actions, report = sweep(site)
    assert actions.get(work) == 'released', report
    assert site.workspace(work)['status'] == 'destroyed' and left_on(site, kind, work) == []
