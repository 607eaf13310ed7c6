"""docs/localpve.md's "A first workspace by hand", run as written: its commands are read from the doc's code block, so
a change to the doc that breaks the path fails here. The cluster starts in a state directory of the test's own
(LOCALPVE_STATE_DIR; `make cluster-up` takes the test's address and ports through CLUSTER_ARGS), HOME and
XDG_STATE_HOME point at empty directories, and the test asserts that the try-out's journal lies in the state
directory and that nothing is written to the default journal. The SSH command the create prints is run as printed,
with BatchMode, against the workspace, and the checkout it names is asked for its HEAD over it.

(A try-out inventory without its place up: tests/integration/plugins/test_tryout_inventories.py.)
"""

import os
import re
import shlex
import subprocess

import pytest

from tests.ansible_run import collections_path
from tests.localpve.cluster import pick_host

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DOC = os.path.join(ROOT, 'docs', 'localpve.md')
BIN = os.path.join(ROOT, '.venv', 'bin')
HEADING = '### A first workspace by hand'


def documented_commands():
    """The commands of the first ``sh`` block after HEADING, continuation lines joined."""
    with open(DOC) as src:
        text = src.read()
    section = text[text.index(HEADING):]
    block = re.search(r'```sh\n(.*?)```', section, re.S).group(1)
    return [line.strip() for line in block.replace('\\\n', ' ').splitlines() if line.strip()]


def environment(tmp_path, **extra):
    home = tmp_path / 'home'
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('EPHEMERA_', 'LOCALPVE_', 'LOCALCLOUD_', 'ANSIBLE_', 'PROXMOX_'))}
    env.update(PATH=BIN + os.pathsep + env.get('PATH', os.defpath), HOME=str(home),
               XDG_STATE_HOME=str(tmp_path / 'xdg-state'), XDG_CACHE_HOME=str(tmp_path / 'xdg-cache'),
               ANSIBLE_NOCOLOR='1', **extra)
    if os.environ.get('EPHEMERA_TEST_ANSIBLE'):
        # Another ansible-core (make test-cores): its ansible-playbook first, with this checkout as the collection.
        env.update(PATH=os.environ['EPHEMERA_TEST_ANSIBLE'] + os.pathsep + env['PATH'],
                   ANSIBLE_COLLECTIONS_PATH=collections_path())
    return env


def run(command, env, timeout=300):
    return subprocess.run(['bash', '-c', command], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def make_repo(path):
    subprocess.run(['git', 'init', '-q', '-b', 'main', str(path)], check=True)
    (path / 'greet.py').write_text('def greet(name):\n    return "hello " + name\n')
    subprocess.run(['git', '-C', str(path), 'add', 'greet.py'], check=True)
    subprocess.run(['git', '-C', str(path), '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'commit',
                    '-q', '-m', 'a greeting'], check=True)
    return subprocess.run(['git', '-C', str(path), 'rev-parse', 'HEAD'], check=True, capture_output=True,
                          text=True).stdout.strip()


def report_lines(output):
    """The create's report: the checkout and the ssh command it prints (ansible's default callback)."""
    found = re.search(r'"address [^;]*; the checkout: (.*)",\n\s*"(ssh .*)"\n', output)
    assert found, output[-3000:]
    # The debug callback prints the message as JSON strings: undo its escapes of quotes and backslashes.
    return (found.group(2).replace('\\"', '"').replace('\\\\', '\\'), found.group(1))


@pytest.fixture(scope='module')
def walk(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('by-hand')
    state = tmp_path / 'cluster'
    head = make_repo(tmp_path / 'repo')
    # The doc's `make cluster-up` with its defaults (time scale 0.1: PVE-like task times), on a loopback /24 and
    # ports nothing else uses, so that it runs beside other clusters.
    env = environment(tmp_path, LOCALPVE_STATE_DIR=str(state),
                      CLUSTER_ARGS='--host %s --api-port 0 --proxy-port 0' % pick_host())
    commands = documented_commands()
    assert commands[0] == 'make cluster-up' and commands[-1] == 'make cluster-down', commands
    seen = {'head': head, 'state': state, 'tmp': tmp_path, 'runs': [], 'env': env}
    try:
        for command in commands:
            command = command.replace('/path/to/repo', str(tmp_path / 'repo'))
            done = run(command, env)
            seen['runs'].append((command, done))
            assert done.returncode == 0, '%s\n%s\n%s' % (command, done.stdout[-4000:], done.stderr[-2000:])
            if 'ephemera.workspaces.create' in command:
                ssh, checkout = report_lines(done.stdout)
                seen['ssh'], seen['checkout'] = ssh, checkout
                seen['over_ssh'] = run('%s -o BatchMode=yes -o ConnectTimeout=20 git -C %s rev-parse HEAD'
                                       % (ssh, shlex.quote(checkout)), env, timeout=60)
                seen['journal_after_create'] = sorted(os.listdir(str(state)))
        yield seen
    finally:
        run(os.path.join(BIN, 'python') + ' -m tests.localpve down', env, timeout=120)


def test_the_documented_by_hand_path_makes_a_ready_workspace_with_its_journal_in_the_state_dir(walk):
    create = [done for command, done in walk['runs'] if 'ephemera.workspaces.create' in command][0]
    # The report is read while the agent may still be in its turn: either activity is the truth then.
    assert re.search(r'try: ready, activity (idle|active)\b', create.stdout), create.stdout[-3000:]
    assert 'journal.sqlite' in walk['journal_after_create']
    destroy = [done for command, done in walk['runs'] if 'ephemera.workspaces.destroy' in command][0]
    assert 'failed=0' in destroy.stdout
    # Nothing of the default journal ($XDG_STATE_HOME/ephemera, ~/.local/state/ephemera), nor anywhere in HOME.
    assert not os.path.exists(str(walk['tmp'] / 'xdg-state'))
    assert not [f for _d, _s, files in os.walk(str(walk['tmp'] / 'home')) for f in files if 'journal' in f]


def test_the_printed_ssh_command_works_as_printed_and_names_the_checkout(walk):
    over_ssh = walk['over_ssh']
    assert over_ssh.returncode == 0, (walk['ssh'], over_ssh.stderr)
    assert over_ssh.stdout.strip() == walk['head']
    assert 'StrictHostKeyChecking=yes' in walk['ssh'] and 'KnownHostsCommand' in walk['ssh']
    assert walk['checkout'].startswith(str(walk['state'])) and walk['checkout'].endswith('/workspace/repo')
