"""The operation runner against a real SQLite journal: claim, steps, outcome, rescue."""

import subprocess
import sys

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import CLAIMED, Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.run_identity import Owner
from ansible_collections.ephemera.workspaces.plugins.module_utils.operation import Operation, record_step


@pytest.fixture
def journal(tmp_path):
    with Journal.open(str(tmp_path / 'journal.sqlite')) as j:
        j.create_workspace('w1', status='ready', desired_state='present')
        yield j


def test_run_records_every_step_then_the_outcome(journal):
    operation = Operation.claim_if_free(journal, 'destroy', 'w1', 'busy')
    done = []
    entry = operation.run([('first', lambda: done.append(1)), ('second', lambda: done.append(2))],
                          {'workspace': 'w1', 'status': 'destroyed'})
    assert done == [1, 2]
    assert entry['state'] == 'done' and entry['result'] == {'workspace': 'w1', 'status': 'destroyed'}
    assert [s['step'] for s in entry['steps']] == ['first', 'second']


def test_a_failing_step_is_recorded_as_the_operations_failure_and_raised_again(journal):
    operation = Operation.claim_if_free(journal, 'destroy', 'w1', 'busy')
    done = []

    def refuse():
        raise EphemeraError('not ours')

    with pytest.raises(EphemeraError, match='not ours'):
        operation.run([('first', refuse), ('second', lambda: done.append(2))])
    entry = Queue(journal).get(operation.claim['entry_id'])
    assert done == [] and entry['state'] == 'failed' and entry['result']['msg'] == 'not ours'
    assert [s['step'] for s in entry['steps']] == ['first']


def test_a_busy_target_is_not_claimed_and_the_request_is_withdrawn(journal):
    holder = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
    try:
        other = Queue(journal, owner=Owner.current(pid=holder.pid))
        turn = other.poll(other.enqueue('create', 'w1').request_id)
        assert turn.outcome == CLAIMED
        assert Operation.claim_if_free(journal, 'destroy', 'w1', 'found it busy') is None
        entries = Queue(journal).entries(target='w1', recent=10)
        destroy = [e for e in entries if e['kind'] == 'destroy']
        assert len(destroy) == 1 and destroy[0]['state'] == 'cancelled'
        assert 'found it busy' in destroy[0]['result']['reason']
    finally:
        holder.kill()
        holder.wait()


def test_record_step_writes_only_under_a_claim_and_never_in_check_mode(journal):
    operation = Operation.claim_if_free(journal, 'destroy', 'w1', 'busy')
    record_step(journal, operation.claim, 'checked', 'w1', check_mode=True)
    record_step(journal, None, 'unclaimed', 'w1')
    record_step(journal, operation.claim, 'delete', 'w1')
    entry = Queue(journal).get(operation.claim['entry_id'])
    assert [s['step'] for s in entry['steps']] == ['delete']
