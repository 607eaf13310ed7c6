"""The expiry sweep on the try-out cluster, with short leases: an idle workspace is released (its unsaved work
archived first) and nothing of it remains; a workspace whose agent works survives its idle expiry and goes at its
ttl, but one whose agent only says it works (runs, and does nothing) goes at its idle expiry; a failed release is
kept with its attempt, error and retry time, and the next due sweep finishes it; a release without delete retains
the workspace until its retain_ttl, the lease audit lists it and until when, and the sweep after that deletes it; a
workspace requested with keep=true is retained by the sweep when its lease ends, and deleted when that retention
ends.
"""

import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider import lease_labels_of

from .createrun import DESTROY, request_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXPIRE = os.path.join(ROOT, 'playbooks', 'expire.yml')
LEASE_AUDIT = os.path.join(ROOT, 'playbooks', 'lease_audit.yml')
# The agent finishes at once: the workspace is idle.
DONE_AGENT = ['sh', '-c', 'echo done']
# The agent works: it writes a line every second.
WORKING_AGENT = ['sh', '-c', 'while :; do echo working; sleep 1; done']
# The agent runs, so it is "active", and does nothing: no event, no output, no CPU time.
IDLING_AGENT = ['sh', '-c', 'sleep 300']


def sweep(ctl, **extra):
    run = ctl.create(extra, playbook=EXPIRE)
    assert run.ok, run.explain()
    return run.task('Release what expired')


def actions(result, name):
    return [e['action'] for e in result['entries'] if e['workspace'] == name]


def wait_until(moment):
    time.sleep(max(0.0, moment - time.time()) + 0.2)


def test_an_idle_workspace_is_archived_then_released_and_nothing_of_it_remains(controller, repo):
    # Long enough an idle timeout for the first sweep to come before it on a loaded machine.
    run = controller.create(request_vars(repo.url, 'idle', ttl=600, idle_timeout=30,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    ws = controller.workspace('idle')
    checkout = os.path.join(controller.guest_root(ws['vmid']), 'workspace', 'repo')
    with open(os.path.join(checkout, 'notes.txt'), 'w') as out:
        out.write('unsaved work\n')
    early = sweep(controller)
    assert actions(early, 'idle') == ['activity'] and controller.workspace('idle')['status'] == 'ready'
    assert controller.workspace('idle')['activity'] == 'idle'
    wait_until(ws['lease']['expires_at'])
    result = sweep(controller)
    assert actions(result, 'idle') == ['released'], result['report']
    after = controller.workspace('idle')
    assert after['status'] == 'destroyed' and controller.ours('idle') == [] and ws['vmid'] not in controller.guests()
    assert after['cleanup']['cleanup_completed_at'] is not None and after['cleanup'].get('cleanup_error') is None
    assert leasing.view(after, time.time())['cleanup_status'] == 'complete'
    # Archived before it went: pushed to its own branch of the repository.
    assert 'ephemera/idle' in os.popen('git -C %s branch --list "ephemera/*"' % repo.bare).read()
    events = [e['action'] for e in controller.events('idle')]
    assert events.index('expired') < events.index('archived') < events.index('destroyed')
    # The next sweep has nothing to do with it.
    assert actions(sweep(controller), 'idle') == []


def test_a_working_agent_keeps_its_workspace_past_idle_expiry_until_its_ttl(controller, repo):
    # The idle window starts at the request: on a loaded machine the create alone can take half a minute, so the
    # ttl leaves room for sweeps past the first idle timeout.
    run = controller.create(request_vars(repo.url, 'busy', ttl=90, idle_timeout=30,
                                         ephemera_agents={'worker': WORKING_AGENT}))
    assert run.ok, run.explain()
    # The idle window starts at the request; a heartbeat starts it again now that the workspace is ready.
    beat = controller.create({'workspace': 'busy'}, playbook=os.path.join(ROOT, 'playbooks', 'heartbeat.yml'))
    assert beat.ok, beat.explain()
    first = controller.workspace('busy')['lease']
    end_of_life = first['created_at'] + 90
    # Swept every 15 s, well within the idle timeout (the agent's activity counts only while its lease runs: a sweep
    # that comes after the idle timeout finds it expired), then at the ttl and every two seconds until it goes.
    swept_after_idle = False
    next_sweep = time.time()
    while time.time() < end_of_life + 15:
        if time.time() < end_of_life:
            wait_until(min(next_sweep, end_of_life))
        else:
            time.sleep(1.8)
        next_sweep = time.time() + 15
        result = sweep(controller)
        now = time.time()
        if 'released' in actions(result, 'busy'):
            break
        assert actions(result, 'busy') == ['activity'] and controller.workspace('busy')['status'] == 'ready'
        swept_after_idle = swept_after_idle or now > first['last_touched_at'] + 30
    released_at = time.time()
    assert swept_after_idle, 'no sweep ran after the idle timeout'
    assert released_at >= end_of_life, 'released before its ttl'
    ws = controller.workspace('busy')
    assert ws['status'] == 'destroyed' and ws['lease']['expires_at'] == end_of_life
    assert any(e['action'] == 'activity' for e in controller.events('busy'))


def test_an_agent_that_says_it_works_and_does_nothing_goes_at_its_idle_expiry(controller, repo):
    """Its activity is its own word: the lease counts it only as late as the agent last made progress."""
    # An idle timeout longer than a create takes on a loaded machine: the heartbeat comes before it.
    run = controller.create(request_vars(repo.url, 'posing', ttl=600, idle_timeout=40,
                                         ephemera_agents={'worker': IDLING_AGENT}))
    assert run.ok, run.explain()
    beat = controller.create({'workspace': 'posing'}, playbook=os.path.join(ROOT, 'playbooks', 'heartbeat.yml'))
    assert beat.ok, beat.explain()
    first = sweep(controller)
    assert actions(first, 'posing') == ['activity'] and controller.workspace('posing')['activity'] == 'active'
    touched = controller.workspace('posing')['lease']['last_touched_at']
    released = None
    # Swept once before the idle timeout (which sees no progress since the first sweep), once after it, then every
    # three seconds until it goes.
    moments = [touched + 8, touched + 41]
    while time.time() < touched + 40 + 45:
        wait_until(moments.pop(0) if moments else time.time() + 2.8)
        result = sweep(controller)
        if 'released' in actions(result, 'posing'):
            released = time.time()
            break
        assert controller.workspace('posing')['activity'] == 'active'
    assert released is not None, 'an agent that does nothing kept its workspace past its idle timeout'
    ws = controller.workspace('posing')
    assert ws['status'] == 'destroyed' and ws['lease']['expires_at'] < ws['lease']['created_at'] + 600
    stalled = [e for e in controller.events('posing') if e['action'] == 'activity'
               and e['detail'].get('no_progress_since')]
    assert stalled and stalled[0]['detail']['activity'] == 'active', controller.events('posing')


def test_a_failed_release_is_kept_with_its_attempt_and_retried_when_due(controller, repo):
    run = controller.create(request_vars(repo.url, 'stuck', ttl=600, idle_timeout=6,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    ws = controller.workspace('stuck')
    wait_until(ws['lease']['expires_at'])
    controller.cluster.proxy_add('error', 'DELETE', '/nodes/*/lxc/%d' % ws['vmid'], times=None, status=500,
                                 message='storage unavailable')
    try:
        failed = sweep(controller)
    finally:
        controller.cluster.proxy_clear()
    assert actions(failed, 'stuck') == ['failed'], failed['report']
    kept = controller.workspace('stuck')
    cleanup = kept['cleanup']
    assert cleanup['cleanup_attempts'] == 1 and 'storage unavailable' in cleanup['cleanup_error']
    assert cleanup['cleanup_retry_at'] == cleanup['cleanup_failed_at'] + 300
    assert leasing.view(kept, time.time())['cleanup_status'] == 'failed'
    assert ws['vmid'] in controller.guests()
    # Not due yet: the next sweep leaves it.
    assert actions(sweep(controller), 'stuck') == []
    # Five minutes on (the retry time moved into the past instead of waiting): the due sweep finishes it.
    with controller.journal() as journal:
        record = journal.get_workspace('stuck')
        journal.update_workspace('stuck', record['generation'],
                                 cleanup=dict(record['cleanup'], cleanup_retry_at=time.time() - 1))
    done = sweep(controller)
    assert actions(done, 'stuck') == ['released'], done['report']
    final = controller.workspace('stuck')
    assert final['status'] == 'destroyed' and ws['vmid'] not in controller.guests()
    assert final['cleanup']['cleanup_attempts'] == 1 and final['cleanup']['cleanup_completed_at'] is not None
    assert leasing.view(final, time.time())['cleanup_status'] == 'complete'


def audited(ctl, name):
    """The lease audit's entry and report line of ``name``, through the shipped playbook."""
    run = ctl.create({}, playbook=LEASE_AUDIT)
    assert run.ok, run.explain()
    result = run.task('Audit the leases and cleanups in the journal')
    [found] = [e for e in result['entries'] if e['name'] == name]
    [line] = [line for line in result['report'] if line.startswith(name + ':')]
    return found, line


def test_a_release_without_delete_is_retained_until_its_retain_ttl_then_the_sweep_deletes_it(controller, repo):
    run = controller.create(request_vars(repo.url, 'held', ttl=600, idle_timeout=6,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    retained = controller.create({'workspace': 'held', 'delete': False, 'retain_ttl': 40}, playbook=DESTROY)
    assert retained.ok, retained.explain()
    ws = controller.workspace('held')
    cleanup = ws['cleanup']
    assert cleanup['retained'] is True and ws['status'] == 'ready'
    assert cleanup['retained_until'] == cleanup['retained_at'] + 40
    assert leasing.view(ws, time.time())['cleanup_status'] == 'retained'
    assert controller.queue_entries('held')[-1]['result']['status'] == 'retained'
    # The container says so too: a sweep by labels (no journal) deletes it only once the retention is over.
    assert lease_labels_of(controller.config(ws['vmid'])['description']) == leasing.retained_labels(
        ws['lease'], cleanup['retained_until'])
    until = leasing.format_time(cleanup['retained_until'])
    found, line = audited(controller, 'held')
    assert (found['category'], found['retained_until']) == ('retained', until)
    assert 0 < found['retained_in'] <= 40
    assert line.startswith('held: retained (status ready, retained until %s): released without delete until %s, when '
                           'the expiry sweep deletes it' % (until, until)), line
    # Its lease ran out: the sweep leaves it, retained.
    wait_until(ws['lease']['expires_at'])
    assert actions(sweep(controller), 'held') == []
    assert ws['vmid'] in controller.guests()
    # Its retention ran out: the next sweep archives and deletes it.
    wait_until(cleanup['retained_until'])
    result = sweep(controller)
    assert actions(result, 'held') == ['released'], result['report']
    final = controller.workspace('held')
    assert final['status'] == 'destroyed' and 'retained' not in final['cleanup']
    assert controller.ours('held') == [] and ws['vmid'] not in controller.guests()
    assert leasing.view(final, time.time())['cleanup_status'] == 'complete'
    expired = [e for e in controller.events('held') if e['action'] == 'expired']
    assert [e['detail'] for e in expired] == [{'why': 'retention ended', 'retained_until': until}]


def test_a_destroy_with_delete_ends_a_retention_sooner(controller, repo):
    run = controller.create(request_vars(repo.url, 'held-short', ttl=600, ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    assert controller.create({'workspace': 'held-short', 'delete': False}, playbook=DESTROY).ok
    cleanup = controller.workspace('held-short')['cleanup']
    assert cleanup['retained_until'] == cleanup['retained_at'] + leasing.DEFAULT_RETAIN_TTL
    gone = controller.create({'workspace': 'held-short'}, playbook=DESTROY)
    assert gone.ok, gone.explain()
    final = controller.workspace('held-short')
    assert final['status'] == 'destroyed' and not set(final['cleanup']) & {'retained', 'retained_at', 'retained_until'}
    assert leasing.view(final, time.time())['cleanup_status'] == 'complete'


def test_a_kept_workspace_is_retained_at_its_expiry_and_deleted_when_the_retention_ends(controller, repo):
    run = controller.create(request_vars(repo.url, 'kept', ttl=600, idle_timeout=6, keep=True,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    ws = controller.workspace('kept')
    assert ws['lease']['keep'] is True
    wait_until(ws['lease']['expires_at'])
    result = sweep(controller, retain_ttl=40)
    assert actions(result, 'kept') == ['retained'], result['report']
    held = controller.workspace('kept')
    assert held['status'] == 'ready' and held['cleanup']['retained'] is True and ws['vmid'] in controller.guests()
    assert held['cleanup']['retained_until'] == held['cleanup']['retained_at'] + 40
    until = leasing.format_time(held['cleanup']['retained_until'])
    found, line = audited(controller, 'kept')
    assert (found['category'], found['keep'], found['retained_until']) == ('retained', True, until)
    assert 'retained until %s' % until in line
    # The sweep before the end of the retention leaves it.
    assert actions(sweep(controller), 'kept') == []
    wait_until(held['cleanup']['retained_until'])
    result = sweep(controller)
    assert actions(result, 'kept') == ['released'], result['report']
    assert controller.workspace('kept')['status'] == 'destroyed' and ws['vmid'] not in controller.guests()
    assert [e['detail']['why'] for e in controller.events('kept') if e['action'] == 'expired'] == [
        'kept', 'retention ended']


def test_check_mode_says_what_it_would_release_and_changes_nothing(controller, repo):
    run = controller.create(request_vars(repo.url, 'looked', ttl=600, idle_timeout=6,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    ws = controller.workspace('looked')
    wait_until(ws['lease']['expires_at'])
    dump = controller.journal_dump()
    state = controller.cluster_state()
    looked = controller.create({}, playbook=EXPIRE, check=True)
    assert looked.ok, looked.explain()
    assert actions(looked.task('Release what expired'), 'looked') == ['would_release']
    assert controller.journal_dump() == dump and controller.cluster_state() == state
