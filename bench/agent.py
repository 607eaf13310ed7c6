"""How long until a real agent works in a workspace, and how much of that is the agent's own start-up?

    .venv/bin/python bench/agent.py [--repeat 3]

On a try-out cluster of the host tier at time scale 0 (Proxmox tasks end at once), with the real CLIs
(tests/models/clis.py) against the cluster's scripted model endpoint answering at once: for each of claude-code, codex
and opencode, --repeat creates through playbooks/create.yml of a workspace whose model script is "write farewell.py,
then say done", each destroyed after. The same creates with a stand-in agent (`sh -c 'echo done'`) give the
collection's own part. Measured from the create's start (this process's clock; guest and runner share it):

- ready: the ready step recorded in the journal;
- first edit: farewell.py's modification time in the checkout;
- idle: the runner's record of the agent's exit;
- per step, the median seconds spent in it (the journal's step timestamps), and within the brief step: the CLI's
  start until its first event (the session), and from there until the model's first answer reached it.

The last line: `agent: claude-code ready A s, first edit B s, idle C s; codex ...; opencode ...; stand-in ready D s`.
Each run is checked (ready, the file written by the CLI, the agent idle); no figure is asserted.
"""

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.ansible_run import run_ansible  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve import LocalCluster  # noqa: E402 pylint: disable=wrong-import-position
from tests.models.client import StubClient  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal  # noqa: E402 pylint: disable=wrong-import-position

PLAYBOOKS = os.path.join(ROOT, 'playbooks')
INVENTORY = os.path.join(ROOT, 'inventories', 'localpve')
AGENTS = ('claude-code', 'codex', 'opencode')
KEY_VARIABLE = {'claude-code': 'ANTHROPIC_API_KEY', 'codex': 'OPENAI_API_KEY', 'opencode': 'OPENAI_API_KEY'}
STAND_IN = ['sh', '-c', 'echo done']


def make_repo(workdir):
    path = os.path.join(workdir, 'repo')
    subprocess.run(['git', 'init', '--quiet', '--initial-branch=main', path], check=True)
    with open(os.path.join(path, 'greet.py'), 'w') as out:
        out.write('def greet(name):\n    return "hello " + name\n')
    env = dict(os.environ, GIT_AUTHOR_NAME='b', GIT_AUTHOR_EMAIL='b@example.invalid', GIT_COMMITTER_NAME='b',
               GIT_COMMITTER_EMAIL='b@example.invalid')
    subprocess.run(['git', '-C', path, 'add', '.'], check=True, env=env)
    subprocess.run(['git', '-C', path, 'commit', '--quiet', '-m', 'greet'], check=True, env=env)
    return 'file://' + path


class Bench:
    def __init__(self, workdir, cluster):
        self.workdir = workdir
        self.cluster = cluster
        self.info = cluster.info
        self.journal = os.path.join(workdir, 'journal.sqlite')
        self.repo = make_repo(workdir)
        self.stub = StubClient.of_site(self.info)
        self.count = 0

    def playbook(self, name, values):
        self.count += 1
        path = os.path.join(self.workdir, 'vars-%d.json' % self.count)
        with open(path, 'w') as out:
            json.dump(values, out)
        run = run_ansible(['ansible-playbook', '-i', INVENTORY, os.path.join(PLAYBOOKS, name), '-e', '@' + path],
                          env={'LOCALPVE_STATE_DIR': self.info['state_dir'], 'EPHEMERA_JOURNAL': self.journal},
                          timeout=600, fail=False)
        if not run.ok:
            sys.exit('%s failed (rc %s):\n%s' % (name, run.returncode, run.explain()))
        return run

    def workspace(self, name):
        with Journal.open(self.journal, create=False) as journal:
            return journal.get_workspace(name)

    def root(self, ws):
        return self.info['guest_root'].replace('{vmid}', str(ws['vmid']))

    def runner_state(self, ws):
        with open(os.path.join(self.root(ws), 'var', 'lib', 'ephemera', 'runner', 'state.json')) as src:
            return json.load(src)

    def one(self, agent, number):
        """One create of a workspace whose agent writes a file; its figures."""
        name = 'bench-%s-%d' % (agent or 'stand-in', number)
        values = {'workspace': name, 'repo': self.repo, 'purpose': 'Add a farewell function next to greet'}
        if agent:
            key = 'bench-' + secrets.token_hex(8)
            self.stub.add_script(key, [{'write': 'farewell.py', 'content': 'def farewell():\n    return "bye"\n'},
                                       {'text': 'Done.'}])
            values.update(agent=agent, agent_credentials={KEY_VARIABLE[agent]: key})
        else:
            values.update(agent='stand-in', ephemera_agents={'stand-in': STAND_IN})
        started = time.time()
        self.playbook('create.yml', values)
        ws = self.workspace(name)
        if ws['status'] != 'ready':
            sys.exit('%s is %s, not ready' % (name, ws['status']))
        figures = {'ready': ws['progress']['ready'] - started, 'steps': {}}
        previous = started
        for step in STEPS:
            figures['steps'][step] = ws['progress'][step] - previous
            previous = ws['progress'][step]
        if agent:
            edited = os.path.join(self.root(ws), 'workspace', 'repo', 'farewell.py')
            deadline = time.monotonic() + 120
            while True:
                state = self.runner_state(ws)
                if (state.get('agent_process') or {}).get('ended_at') and os.path.exists(edited):
                    break
                if time.monotonic() > deadline:
                    sys.exit('%s: the agent did not write farewell.py and finish within 120 s: %s' % (name, state))
                time.sleep(0.1)
            events = state.get('events') or []
            at = {kind: next((e['at'] for e in events if e['type'] == kind), None) for kind in
                  ('brief', 'session', 'tool')}
            figures.update(first_edit=os.path.getmtime(edited) - started,
                           idle=state['agent_process']['ended_at'] - started,
                           cli_start=(at['session'] or at['tool']) - at['brief'],
                           first_answer=at['tool'] - (at['session'] or at['brief']))
        self.playbook('destroy.yml', {'workspace': name, 'workspace_destroy_archive': False,
                                      'workspace_destroy_discard_unsaved_work': True})
        return figures


def median(runs, key, step=None):
    values = [r['steps'][step] if step else r[key] for r in runs if (step or key in r)]
    return statistics.median(values) if values else float('nan')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix='ephemera-bench-agent-')
    cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), time_scale=0)
    results = {}
    try:
        bench = Bench(workdir, cluster)
        for agent in AGENTS + (None,):
            results[agent] = [bench.one(agent, n) for n in range(args.repeat)]
            for number, run in enumerate(results[agent]):
                print('%-12s run %d: ready %.2f s%s' % (agent or 'stand-in', number + 1, run['ready'], (
                    ', first edit %.2f s, idle %.2f s' % (run['first_edit'], run['idle']) if agent else '')))
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print('median seconds per step, from the create\'s start (%d runs each):' % args.repeat)
    names = [a or 'stand-in' for a in AGENTS + (None,)]
    print('%-16s' % 'step' + ''.join('%12s' % n for n in names))
    for step in STEPS:
        print('%-16s' % step + ''.join('%12.2f' % median(results[a], None, step) for a in AGENTS + (None,)))
    for key, label in (('cli_start', 'brief: CLI start'), ('first_answer', 'brief: 1st answer'),
                       ('ready', 'ready'), ('first_edit', 'first edit'), ('idle', 'idle')):
        print('%-16s' % label + ''.join('%12.2f' % median(results[a], key) for a in AGENTS)
              + '%12s' % ('%.2f' % median(results[None], key) if key == 'ready' else '-'))
    base = median(results[None], 'ready')
    print()
    print('of a create to ready, the agent\'s own start-up (ready minus the stand-in\'s ready): '
          + ', '.join('%s %.2f s (%.0f %%)' % (a, median(results[a], 'ready') - base,
                                               100 * (median(results[a], 'ready') - base) / median(results[a], 'ready'))
                      for a in AGENTS))
    print('agent: ' + '; '.join('%s ready %.1f s, first edit %.1f s, idle %.1f s' % (
        a, median(results[a], 'ready'), median(results[a], 'first_edit'), median(results[a], 'idle')) for a in AGENTS)
        + '; stand-in ready %.1f s' % base)


if __name__ == '__main__':
    main()
