"""How a fork waits for a snapshot whose request's answer was lost (flows/fork.py await_snapshot)."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.fork import await_snapshot


class Snapshots:
    """A provider whose snapshot is missing, pending or finished as ``states`` says, one state per look: every
    question the flow asks is one read of the cloud, and the snapshot may move on between two of them."""

    def __init__(self, states):
        self.states = list(states)
        self.looks = 0

    def _look(self):
        self.looks += 1
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def snapshot_exists(self, resource, name):
        return self._look() == 'done'

    def snapshot_pending(self, resource, name):
        return self._look() == 'pending'


@pytest.mark.parametrize('pending_looks', [1, 2, 3, 4])
def test_a_snapshot_that_finishes_between_two_looks_is_seen_finished(pending_looks):
    # Pending for a number of reads, finished from the next one on: wherever the change falls between the two
    # questions of one look, the wait ends with the snapshot there.
    provider = Snapshots(['pending'] * pending_looks + ['done'])
    assert await_snapshot(provider, None, 'ephemera-fork-0a1b2c3d4e', 60, sleep=lambda s: None)


def test_a_snapshot_that_is_neither_there_nor_on_its_way_fails_at_once():
    provider = Snapshots(['missing'])
    assert not await_snapshot(provider, None, 'ephemera-fork-0a1b2c3d4e', 60, sleep=lambda s: None)
    assert provider.looks == 2


def test_a_snapshot_still_on_its_way_at_the_deadline_is_not_taken():
    provider = Snapshots(['pending'])
    assert not await_snapshot(provider, None, 'ephemera-fork-0a1b2c3d4e', 0, sleep=lambda s: None)
