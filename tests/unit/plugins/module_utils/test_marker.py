"""Ownership markers: what verifies and what never does."""

import multiprocessing
import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

SECRET = b'0123456789abcdef' * 4
CONTROLLER = 'c0ffee00-0000-4000-8000-000000000001'


def desc(workspace='ws1', vmid=105, controller=CONTROLLER, secret=SECRET, extra=''):
    return extra + ownership.render(secret, controller, workspace, vmid)


def test_own_marker_verifies():
    assert ownership.verify(desc(), SECRET, CONTROLLER, 'ws1', 105) == ownership.VERIFIED
    assert ownership.verify(desc(extra='operator note\n'), SECRET, CONTROLLER) == ownership.VERIFIED


@pytest.mark.parametrize('description, expected', [
    (None, ownership.ABSENT),
    ('', ownership.ABSENT),
    ('a container somebody made by hand', ownership.ABSENT),
    (desc(controller='another-controller'), ownership.FOREIGN),
    (desc(secret=b'not our secret'), ownership.FORGED),
    (desc().replace('vmid=105', 'vmid=106'), ownership.FORGED),
    (desc().replace('workspace=ws1', 'workspace=ws2'), ownership.FORGED),
    (desc().replace('vmid=105', 'vmid=abc'), ownership.FORGED),
    (desc()[:-4] + '0000', ownership.FORGED),
])
def test_markers_that_do_not_verify(description, expected):
    assert ownership.verify(description, SECRET, CONTROLLER, 'ws1', 105) == expected


def test_marker_copied_onto_another_vmid_does_not_verify():
    copied = desc(vmid=105)
    assert ownership.verify(copied, SECRET, CONTROLLER, 'ws1', 106) == ownership.MISMATCH


def test_genuine_marker_of_another_workspace_is_a_mismatch():
    assert ownership.verify(desc(workspace='ws2'), SECRET, CONTROLLER, 'ws1', 105) == ownership.MISMATCH


def test_parse_reads_fields():
    fields = ownership.parse('note\n' + desc())
    assert (fields['workspace'], fields['controller'], fields['vmid'], fields['version']) == ('ws1', CONTROLLER, '105', 'v1')


def test_secret_made_once_with_0600_next_to_the_journal(tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)
    journal = str(tmp_path / 'journal.sqlite')
    first = ownership.load_secret(journal)
    path = ownership.secret_path(journal)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ownership.load_secret(journal) == first and len(first) == 64
    assert sorted(os.listdir(str(tmp_path))) == ['journal.sqlite.secret']


def test_given_secret_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(ownership.SECRET_ENV, 'from-env' * 4)
    assert ownership.load_secret(str(tmp_path / 'j'), given='from-vault' * 4) == b'from-vault' * 4
    assert ownership.load_secret(str(tmp_path / 'j')) == b'from-env' * 4
    assert os.listdir(str(tmp_path)) == []


def _load(journal, out):
    out.put(ownership.load_secret(journal))


def test_concurrent_first_use_agrees_on_one_secret(tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.SECRET_ENV, raising=False)
    journal = str(tmp_path / 'journal.sqlite')
    ctx = multiprocessing.get_context('fork')
    out = ctx.Queue()
    procs = [ctx.Process(target=_load, args=(journal, out)) for dummy in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    secrets = {out.get(timeout=5) for dummy in procs}
    assert len(secrets) == 1 and len(secrets.pop()) == 64
    assert sorted(os.listdir(str(tmp_path))) == ['journal.sqlite.secret']


def test_controller_id_follows_the_secret_not_the_journal():
    assert ownership.controller_id(SECRET) == ownership.controller_id(bytes(SECRET))
    assert ownership.controller_id(SECRET) != ownership.controller_id(b'another secret')
    assert ownership.controller_id(SECRET).startswith('c-') and len(ownership.controller_id(SECRET)) == 26
