"""Fixtures of the stand-in model endpoint's tests: a running stub, a workspace (a git repository and a HOME for
the agent), and the real agent CLIs, installed once per machine (tests/agentcli.py)."""

import os
import subprocess

import pytest

from tests.agentcli import ensure_clis
from tests.modelstub import ModelStub


@pytest.fixture
def stub():
    with ModelStub() as running:
        yield running


@pytest.fixture(scope='session')
def agent_bin():
    """The bin directory of the pinned claude, codex and opencode (the first install takes ~20 s)."""
    return ensure_clis(announce=lambda line: print(line, flush=True))


class Workspace:
    def __init__(self, base):
        self.base = base
        self.repo = os.path.join(base, 'repo')
        self.home = os.path.join(base, 'home')
        os.makedirs(self.repo)
        os.makedirs(self.home)
        git = ['git', '-c', 'user.name=stub', '-c', 'user.email=stub@example.invalid', '-C', self.repo]
        subprocess.run(['git', 'init', '-q', self.repo], check=True)
        with open(os.path.join(self.repo, 'README.md'), 'w', encoding='utf-8') as out:
            out.write('A repository for the agent.\n')
        subprocess.run(git + ['add', 'README.md'], check=True)
        subprocess.run(git + ['commit', '-q', '-m', 'init'], check=True)

    def path(self, *parts):
        return os.path.join(self.repo, *parts)

    def read(self, *parts):
        with open(self.path(*parts), encoding='utf-8') as src:
            return src.read()


@pytest.fixture
def workspace(tmp_path):
    return Workspace(str(tmp_path / 'ws'))
