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


# Version 3: a cloud's machine bound by its own id.
NONCE = '5e7d' * 8
TOKEN_64 = 'ephemera-' + 'w' * 30 + '-' + '0123456789abcdef01234567'


def test_a_version_3_marker_binds_the_id_itself():
    marker = ownership.render_resource(SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1c2d3e4f50', NONCE)
    assert ' v3 ' in marker and ' id=eph-fix-login-0b1c2d3e4f50 ' in marker and 'vmid=' not in marker
    verify = ownership.verify
    assert verify(marker, SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1c2d3e4f50', NONCE) == ownership.VERIFIED
    assert verify(marker, SECRET, CONTROLLER, None, None) == ownership.VERIFIED
    # Copied onto a machine of another name, even one whose version 2 number would be the same: not ours.
    same_number = ownership.Bound('eph-fix-login-ffffffffffff', ownership.legacy_number('eph-fix-login-0b1c2d3e4f50'))
    assert verify(marker, SECRET, CONTROLLER, 'fix-login', same_number, NONCE) == ownership.MISMATCH
    assert verify(marker, SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-ffffffffffff', NONCE) == ownership.MISMATCH
    assert verify(marker, SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1c2d3e4f50', '0' * 32) == \
        ownership.REPLAYED


@pytest.mark.parametrize('edit', [
    lambda m: m.replace('id=eph-', 'id=epx-'),                       # the id changed: the token no longer matches
    lambda m: m.replace('token=', 'token=a')[:-1],                   # another token of the same form
    lambda m: m.replace('token=', 'token=A'),                        # not the token's form
    lambda m: m.replace(' id=eph-fix-login-0b1c2d3e4f50', ''),       # no id
    lambda m: m.replace(' nonce=' + NONCE, ''),                      # version 3 has a nonce always
    lambda m: m.replace('id=eph-', 'id=-eph-'),                      # not an id's form
])
def test_an_edited_version_3_marker_is_forged(edit):
    marker = edit(ownership.render_resource(SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1c2d3e4f50', NONCE))
    assert ownership.verify(marker, SECRET, CONTROLLER, 'fix-login', None, ownership.ANY) == ownership.FORGED


def test_a_version_2_marker_of_a_cloud_still_verifies_against_the_digest_of_its_id():
    legacy = ownership.render(SECRET, CONTROLLER, 'fix-login', ownership.legacy_number('eph-fix-login-0b1c'), NONCE)
    assert ownership.verify(legacy, SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1c', NONCE) == ownership.VERIFIED
    assert ownership.verify(legacy, SECRET, CONTROLLER, 'fix-login', 'eph-fix-login-0b1d', NONCE) == ownership.MISMATCH
    # A container's VMID, as a number or its digits, is the number itself.
    container = ownership.render(SECRET, CONTROLLER, 'fix-login', 105, NONCE)
    for vmid in (105, '105', ownership.Bound.of(105)):
        assert ownership.verify(container, SECRET, CONTROLLER, 'fix-login', vmid, NONCE) == ownership.VERIFIED
    assert ownership.verify(container, SECRET, CONTROLLER, 'fix-login', '106', NONCE) == ownership.MISMATCH


def test_the_longest_version_3_marker_fits_a_tag_value_of_256_characters():
    controller = ownership.controller_id(SECRET)
    marker = ownership.render_resource(SECRET, controller, 'w' * 40, TOKEN_64, ownership.new_nonce())
    assert len(marker) <= 256 and ownership.verify(marker, SECRET, controller) == ownership.VERIFIED
    # Letters, digits and "=:-" alone besides the spaces: what EC2 tags, Azure tags and Hetzner labels take.
    assert set(marker) <= set('abcdefghijklmnopqrstuvwxyz0123456789-=: ')
    with pytest.raises(ValueError):
        ownership.render_resource(SECRET, controller, 'w', 'an id with spaces', ownership.new_nonce())
