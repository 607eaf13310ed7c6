"""tests/agentcli.py's cache: one build per pinned set under a lock, renamed into place only when complete.
npm is replaced by a stand-in here (the real install is what the CLI tests' agent_bin fixture does)."""

import os
import threading

import pytest

from tests import agentcli


def _fake_install(calls, fail=False, versions=None):
    def install(prefix, npm_cache, announce):
        calls.append(prefix)
        os.makedirs(os.path.join(prefix, 'bin'))
        if fail:
            raise agentcli.InstallError('npm install exited 1')
        for name, version in (versions or agentcli.VERSIONS).items():
            path = os.path.join(prefix, 'bin', name)
            with open(path, 'w', encoding='utf-8') as out:
                out.write('#!/bin/sh\nsleep 0.2\necho "%s (%s)"\n' % (version, name))
            os.chmod(path, 0o755)
    return install


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv('EPHEMERA_AGENT_CACHE', str(tmp_path / 'cache'))
    return str(tmp_path / 'cache')


def test_cache_root_and_hash(cache, monkeypatch):
    assert agentcli.cache_root() == cache
    assert agentcli.install_dir() == os.path.join(cache, 'clis-%s' % agentcli.pinned_hash())
    before = agentcli.pinned_hash()
    monkeypatch.setitem(agentcli.PINNED, 'opencode-ai', '0.0.1')
    assert agentcli.pinned_hash() != before
    monkeypatch.delenv('EPHEMERA_AGENT_CACHE')
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    monkeypatch.setenv('HOME', '/home/someone')
    assert agentcli.cache_root() == '/home/someone/.cache/ephemera-agents'


def test_parallel_callers_build_once_and_share_the_result(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(agentcli, '_npm_install', _fake_install(calls))
    results = []
    threads = [threading.Thread(target=lambda: results.append(agentcli.ensure_clis())) for _caller in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 4
    bin_dir = results[0]
    assert bin_dir == os.path.join(agentcli.install_dir(), 'bin')
    assert sorted(os.listdir(bin_dir)) == ['claude', 'codex', 'opencode']
    assert os.path.isfile(os.path.join(agentcli.install_dir(), '.complete'))
    assert not [n for n in os.listdir(cache) if n.startswith('.build-')]
    assert agentcli.ensure_clis() == bin_dir and len(calls) == 1


def test_a_failed_build_leaves_nothing_that_looks_finished(cache, monkeypatch):
    monkeypatch.setattr(agentcli, '_npm_install', _fake_install([], fail=True))
    with pytest.raises(agentcli.InstallError):
        agentcli.ensure_clis()
    assert not os.path.exists(agentcli.install_dir())
    monkeypatch.setattr(agentcli, '_npm_install', _fake_install([], versions=dict(agentcli.VERSIONS, codex='9.9.9')))
    with pytest.raises(agentcli.InstallError, match='codex --version'):
        agentcli.ensure_clis()
    assert not os.path.exists(agentcli.install_dir())
    assert not [n for n in os.listdir(cache) if n.startswith('.build-')]


def test_what_a_dead_build_left_is_removed_by_the_next(cache, monkeypatch):
    os.makedirs(os.path.join(cache, '.build-%s-dead' % agentcli.pinned_hash(), 'prefix', 'bin'))
    os.makedirs(os.path.join(agentcli.install_dir(), 'bin'))  # a directory without .complete is not finished
    calls = []
    monkeypatch.setattr(agentcli, '_npm_install', _fake_install(calls))
    assert agentcli.ensure_clis() == os.path.join(agentcli.install_dir(), 'bin') and len(calls) == 1
    assert not [n for n in os.listdir(cache) if n.startswith('.build-')]
