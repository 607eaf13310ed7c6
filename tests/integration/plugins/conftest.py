"""Run real ansible-playbook processes against this checkout."""

import pytest

from tests.ansible_run import run_ansible


@pytest.fixture
def run_playbook(tmp_path):
    """run_playbook(yaml_text, env=None, check=False, extra_args=()) -> the finished tests.ansible_run.Run."""
    def run(text, env=None, check=False, extra_args=()):
        book = tmp_path / 'play.yml'
        book.write_text(text)
        return run_ansible(['ansible-playbook', str(book)] + (['--check'] if check else []) + list(extra_args),
                           timeout=300, env=env)
    return run
