"""The expiry sweep on the try-out cluster, with short leases: an idle workspace is released (its unsaved work
archived first) and nothing of it remains; a workspace whose agent works survives its idle expiry and goes at its
ttl, but one whose agent only says it works (runs, and does nothing) goes at its idle expiry; a failed release is
kept with its attempt, error and retry time, and the next due sweep finishes it; a release without delete retains
the workspace and expiry leaves it alone.
"""

import os
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing

from .createrun import DESTROY, request_vars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXPIRE = os.path.join(ROOT, 'playbooks', 'expire.yml')
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
    # The idle window starts at the request: on a loaded machine the create alone can take a good part of 15 s,
    # so the windows are wide; sweeps come every few seconds, well within them.
    run = controller.create(request_vars(repo.url, 'busy', ttl=60, idle_timeout=30,
                                         ephemera_agents={'worker': WORKING_AGENT}))
    assert run.ok, run.explain()
    # The idle window starts at the request; a heartbeat starts it again now that the workspace is ready.
    beat = controller.create({'workspace': 'busy'}, playbook=os.path.join(ROOT, 'playbooks', 'heartbeat.yml'))
    assert beat.ok, beat.explain()
    first = controller.workspace('busy')['lease']
    end_of_life = first['created_at'] + 60
    swept_after_idle = False
    while time.time() < end_of_life + 15:
        result = sweep(controller)
        now = time.time()
        if 'released' in actions(result, 'busy'):
            break
        assert actions(result, 'busy') == ['activity'] and controller.workspace('busy')['status'] == 'ready'
        swept_after_idle = swept_after_idle or now > first['last_touched_at'] + 30
        time.sleep(1)
    released_at = time.time()
    assert swept_after_idle, 'no sweep ran after the idle timeout'
    assert released_at >= end_of_life, 'released before its ttl'
    ws = controller.workspace('busy')
    assert ws['status'] == 'destroyed' and ws['lease']['expires_at'] == end_of_life
    assert any(e['action'] == 'activity' for e in controller.events('busy'))


def test_an_agent_that_says_it_works_and_does_nothing_goes_at_its_idle_expiry(controller, repo):
    """Its activity is its own word: the lease counts it only as late as the agent last made progress."""
    run = controller.create(request_vars(repo.url, 'posing', ttl=600, idle_timeout=20,
                                         ephemera_agents={'worker': IDLING_AGENT}))
    assert run.ok, run.explain()
    beat = controller.create({'workspace': 'posing'}, playbook=os.path.join(ROOT, 'playbooks', 'heartbeat.yml'))
    assert beat.ok, beat.explain()
    first = sweep(controller)
    assert actions(first, 'posing') == ['activity'] and controller.workspace('posing')['activity'] == 'active'
    touched = controller.workspace('posing')['lease']['last_touched_at']
    released = None
    while time.time() < touched + 20 + 45:
        result = sweep(controller)
        if 'released' in actions(result, 'posing'):
            released = time.time()
            break
        assert controller.workspace('posing')['activity'] == 'active'
        time.sleep(2)
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


def test_a_release_without_delete_retains_the_workspace_and_expiry_leaves_it(controller, repo):
    run = controller.create(request_vars(repo.url, 'held', ttl=600, idle_timeout=6,
                                         ephemera_agents={'worker': DONE_AGENT}))
    assert run.ok, run.explain()
    retained = controller.create({'workspace': 'held', 'delete': False}, playbook=DESTROY)
    assert retained.ok, retained.explain()
    ws = controller.workspace('held')
    assert ws['cleanup']['retained'] is True and ws['status'] == 'ready'
    assert leasing.view(ws, time.time())['cleanup_status'] == 'retained'
    assert controller.queue_entries('held')[-1]['result']['status'] == 'retained'
    wait_until(ws['lease']['expires_at'])
    assert actions(sweep(controller), 'held') == []
    assert ws['vmid'] in controller.guests()
    # A release with delete resumes the cleanup it owns.
    gone = controller.create({'workspace': 'held'}, playbook=DESTROY)
    assert gone.ok, gone.explain()
    final = controller.workspace('held')
    assert final['status'] == 'destroyed' and 'retained' not in final['cleanup']
    assert leasing.view(final, time.time())['cleanup_status'] == 'complete'


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
