"""write_durable against the real filesystem."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import durable


def test_writes_content_with_mode_and_no_temporary_left(tmp_path):
    target = tmp_path / 'state.json'
    durable.write_durable(str(target), '{"a": 1}', mode=0o640)
    assert target.read_text() == '{"a": 1}'
    assert target.stat().st_mode & 0o777 == 0o640
    assert os.listdir(str(tmp_path)) == ['state.json']


def test_replaces_atomically(tmp_path):
    target = tmp_path / 'state.json'
    target.write_bytes(b'old')
    durable.write_durable(str(target), b'new')
    assert target.read_bytes() == b'new'


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / 'state.json'
    target.write_bytes(b'old')

    def broken_fsync(fd):
        raise OSError(5, 'Input/output error')
    monkeypatch.setattr(durable.os, 'fsync', broken_fsync)
    with pytest.raises(OSError):
        durable.write_durable(str(target), b'new')
    assert target.read_bytes() == b'old'
    assert os.listdir(str(tmp_path)) == ['state.json']
