"""Controller restarted: the run is SIGKILLed (with everything it started) in the middle of a step, and the
next run resumes from the journal: the persisted candidate, the UPIDs and what the cluster shows.

A cluster of its own with real task durations (time_scale 1: a clone takes 4 s, a start 2 s), so that
there is a step in the middle of which to die.
"""

import time

import pytest

from tests.ansible_run import wait_until
from tests.localpve.process import down

from .conftest import start_cluster
from .createrun import Controller, request_vars


@pytest.fixture(scope='module')
def slow_cluster(tmp_path_factory):
    client, state_dir = start_cluster(tmp_path_factory.mktemp('slow-cluster'), time_scale=1)
    try:
        yield client
    finally:
        down(state_dir)


def in_clone_answer(ctl, name):
    """The clone was made and its answer is still on its way (held back by the proxy)."""
    ws = ctl.workspace(name)
    candidate = ws and ws['facts'].get('clone_dispatched')
    return candidate and 'clone' not in ws['upids'] and candidate in ctl.guests()


def in_clone_task(ctl, name):
    """The clone task's UPID is recorded and the task still runs."""
    ws = ctl.workspace(name)
    return ws and 'clone' in ws['upids'] and 'wait_clone' not in ws['progress']


def in_start_task(ctl, name):
    ws = ctl.workspace(name)
    return ws and 'start' in ws['upids'] and 'start' not in ws['progress']


@pytest.mark.parametrize('where', [in_clone_answer, in_clone_task, in_start_task],
                         ids=['clone-answer-pending', 'clone-task-running', 'start-task-running'])
def test_a_killed_run_is_resumed_by_the_next_one_with_exactly_one_container(slow_cluster, repo, tmp_path, where):
    ctl = Controller(slow_cluster, tmp_path / 'controller')
    name = 'killed-' + where.__name__.replace('_', '-')[3:]
    since = time.time() - 1
    if where is in_clone_answer:
        slow_cluster.proxy_add('delay', 'POST', '/nodes/*/lxc/*/clone', seconds=5, times=1)
    try:
        request = request_vars(repo.url, name)
        run = ctl.start(request)
        wait_until(lambda: where(ctl, name), 'the run in the middle of the step', runs=[run])
        run.kill()
        killed = ctl.workspace(name)
        assert killed['status'] == ('booting' if where is in_start_task else 'provisioning')

        rerun = ctl.create(request)
        assert rerun.ok, rerun.explain()
        queue = [result for step, result in rerun.results() if step.startswith('Queue: wait')][0]
        assert queue['resumed'] is True
        ws = ctl.workspace(name)
        assert ws['status'] == 'ready' and ws['vmid'] == killed['candidate_vmid']
        assert ctl.ours(name) == [ws['vmid']]
        # One clone was made, by the killed run, and the next run waited for that very task.
        tasks = ctl.api.nodes(ctl.info['template_node']).tasks.get(
            typefilter='vzclone', vmid=ctl.info['template_vmid'], source='all', limit=500)
        ours = [t for t in tasks if t['user'] == ctl.info['token_id'] and int(t['starttime']) >= since]
        assert [t['upid'] for t in ours] == [ws['upids']['clone']]
        if where is in_clone_answer:
            assert [e['detail']['reason'] for e in ctl.events(name) if e['action'] == 'adopted'] == [
                'found after an earlier run lost track of its clone']
        else:
            # The UPIDs the killed run recorded are the ones the workspace was made with.
            assert all(ws['upids'][step] == upid for step, upid in killed['upids'].items())
    finally:
        ctl.stop()
        slow_cluster.clear()
