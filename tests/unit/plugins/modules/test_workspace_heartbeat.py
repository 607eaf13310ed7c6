"""workspace_heartbeat reaches a provider (to rewrite the lease labels on the workspace's resource) when its options
name one: any cloud provider, or Proxmox VE with its API host given."""

import contextlib

import pytest

from ansible_collections.ephemera.workspaces.plugins.modules import workspace_heartbeat


class Exited(Exception):
    pass


class FakeModule:
    check_mode = False

    def __init__(self, params):
        self.params = dict(name='fix-login', journal_path='/nonexistent/journal.db', journal_url=None, **params)

    def exit_json(self, **result):
        raise Exited(result)

    def fail_json(self, **result):
        raise AssertionError(result)


@pytest.mark.parametrize('params, reached', [
    (dict(provider='proxmox', api_host=None), False),
    (dict(provider=None, api_host=None), False),
    (dict(provider='proxmox', api_host='pve1'), True),
    (dict(provider='aws', api_host=None), True),
    (dict(provider='hetzner', api_host=None), True),
    (dict(provider='gcp', api_host=None), True),
    (dict(provider='azure', api_host=None), True),
])
def test_a_heartbeat_reaches_the_provider_its_options_name(params, reached, monkeypatch):
    seen = []
    monkeypatch.setattr(workspace_heartbeat.Journal, 'open', lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(workspace_heartbeat, 'api_from_params', lambda p: 'client of %s' % p['provider'])
    monkeypatch.setattr(workspace_heartbeat.lease_flow, 'heartbeat',
                        lambda journal, client, name, now, check_mode: seen.append(client) or ({}, None))
    monkeypatch.setattr(workspace_heartbeat.leasing, 'view', lambda ws, now: {'lease': {'expires_at': 'later'}})
    with pytest.raises(Exited):
        workspace_heartbeat.run(FakeModule(params))
    assert seen == ['client of %s' % params['provider'] if reached else None]
