"""The playbooks a test session runs poll their workers every 10 ms (tests/ansible_run.py, harness_config), and an
ANSIBLE_CONFIG given from outside is kept."""

import os

from tests import ansible_run


def test_the_session_s_runs_read_the_harness_config_with_its_poll_interval():
    # tests/conftest.py set it for the session; a run started by the harness reads it.
    path = os.environ['ANSIBLE_CONFIG']
    assert path == ansible_run.harness_config()
    run = ansible_run.run_ansible(['ansible-config', 'dump', '--only-changed'], callback=None, timeout=120)
    assert run.ok, run.explain()
    assert 'DEFAULT_INTERNAL_POLL_INTERVAL(%s) = %s' % (path, ansible_run.POLL_INTERVAL) in run.output


def test_a_config_given_from_outside_is_kept(monkeypatch, tmp_path):
    mine = tmp_path / 'mine.cfg'
    mine.write_text('[defaults]\nforks = 7\n')
    monkeypatch.setenv('ANSIBLE_CONFIG', str(mine))
    assert ansible_run.harness_config() == str(mine) and os.environ['ANSIBLE_CONFIG'] == str(mine)


def test_a_missing_or_stale_harness_config_is_written_again(monkeypatch, tmp_path):
    monkeypatch.delenv('ANSIBLE_CONFIG')
    monkeypatch.setattr(ansible_run.tempfile, 'gettempdir', lambda: str(tmp_path))
    path = ansible_run.harness_config()
    assert os.path.dirname(path) == str(tmp_path)
    with open(path, 'w') as out:
        out.write('[defaults]\ninternal_poll_interval = 5\n')
    monkeypatch.delenv('ANSIBLE_CONFIG')
    assert ansible_run.harness_config() == path
    with open(path) as src:
        assert src.read() == '[defaults]\ninternal_poll_interval = %s\n' % ansible_run.POLL_INTERVAL
    assert os.listdir(str(tmp_path)) == [os.path.basename(path)]
