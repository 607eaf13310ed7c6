"""workspace_pool's refill (the create playbook's, after a create took a member): a refill that fails ends as a
warning that the workspace is ready and the pool short, never as a failure; a fill that fails still fails."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError
from ansible_collections.ephemera.workspaces.plugins.modules import workspace_pool


class Ended(Exception):
    def __init__(self, failed, result):
        super().__init__(result.get('msg'))
        self.failed = failed
        self.result = result


class StandIn:
    def __init__(self, **params):
        self.params = dict({'pools': [], 'refill': None, 'refill_workspace': None}, **params)
        self.check_mode = False
        self.warnings = []

    def warn(self, warning):
        self.warnings.append(warning)

    def exit_json(self, **result):
        raise Ended(False, result)

    def fail_json(self, **result):
        raise Ended(True, result)


def fake_fill(entries=(), error=None):
    class FakeFill:
        def __init__(self, *args, **kwargs):
            self.entries = list(entries)
            self.changed = bool(entries)

        def run(self):
            if error is not None:
                raise EphemeraError(error)
            return {'py': {'filling': 0, 'warm': 0, 'claimed': 1, 'released': 1}}
    return FakeFill


FAILED = [{'pool': 'py', 'member': 'py-0a1b2c3d', 'action': 'failed', 'detail': 'its runner did not answer'}]


@pytest.fixture(autouse=True)
def no_journal(monkeypatch):
    monkeypatch.setattr(workspace_pool, 'open_journal', lambda module: None)


def run(monkeypatch, fill, **params):
    monkeypatch.setattr(workspace_pool, 'PoolFill', fill)
    module = StandIn(**params)
    with pytest.raises(Ended) as ended:
        workspace_pool.run(module)
    return ended.value, module.warnings


@pytest.mark.parametrize('fill, why', [
    (fake_fill(entries=FAILED), 'py-0a1b2c3d: its runner did not answer'),
    (fake_fill(error='the journal is locked'), 'the journal is locked'),
])
def test_a_refill_that_fails_warns_that_the_workspace_is_ready_and_the_pool_short(monkeypatch, fill, why):
    ended, warnings = run(monkeypatch, fill, refill='py', refill_workspace='fix')
    assert not ended.failed and ended.result['refill_failed'] is True
    [warning] = warnings
    assert warning.startswith('Workspace fix is ready; the refill of warm pool py failed (')
    assert why in warning
    assert warning.endswith('The pool is short of its size until a fill: run pool_fill '
                            '(ansible-playbook -i INVENTORY ephemera.workspaces.pool_fill).')


def test_a_refill_that_succeeds_says_so_and_warns_nothing(monkeypatch):
    done = [{'pool': 'py', 'member': 'py-1', 'action': 'warm', 'detail': 'warm: CT 104 at 10.0.0.2'}]
    ended, warnings = run(monkeypatch, fake_fill(entries=done), refill='py', refill_workspace='fix')
    assert not ended.failed and ended.result['refill_failed'] is False and warnings == []
    assert ended.result['report'][0] == 'refill: py 0 warm, 0 filling'


def test_a_fill_that_fails_still_fails(monkeypatch):
    ended, warnings = run(monkeypatch, fake_fill(entries=FAILED))
    assert ended.failed and 'refill_failed' not in ended.result and warnings == []
    ended, dummy = run(monkeypatch, fake_fill(error='the journal is locked'))
    assert ended.failed and ended.result['msg'] == 'The pool fill stopped: the journal is locked'
