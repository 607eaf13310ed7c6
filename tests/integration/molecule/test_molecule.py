"""The Molecule scenarios (extensions/molecule: create, destroy and archive roles against the try-out cluster, the
create role once more with its journal on PostgreSQL, the default scenario starting and stopping the cluster for all
of them) run as `make molecule` runs them, and with the checkout's
collection only: HOME is a temporary directory whose ~/.ansible/collections holds a stale, broken copy of
ephemera.workspaces (what a release install or Molecule itself would put there). The scenarios pass, so the stale
copy never ran; Molecule installed nothing there (the copy is unchanged), and the cluster it started is stopped.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

from tests.ansible_run import ROOT, collections_path
from tests.localpve.cluster import pick_host

BIN = os.path.dirname(sys.executable)
STALE_ROLE = '''---
- name: Fail as a stale copy
  ansible.builtin.fail:
    msg: "stale copy: its role ran"
'''


def plant_stale_copy(home):
    copy = home / '.ansible' / 'collections' / 'ansible_collections' / 'ephemera' / 'workspaces'
    files = {
        'MANIFEST.json': json.dumps({'collection_info': {'namespace': 'ephemera', 'name': 'workspaces',
                                                         'version': '0.0.1'}, 'file_manifest_file': None}),
        'meta/runtime.yml': '---\nrequires_ansible: ">=2.15"\n',
    }
    for role in ('workspace_create', 'workspace_destroy', 'workspace_archive'):
        files['roles/%s/tasks/main.yml' % role] = STALE_ROLE
    for name, text in files.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text)
    return home / '.ansible' / 'collections'


def digest(top):
    out = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(str(top))):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            out.update(path.encode() + b'\0' + open(path, 'rb').read())
    return out.hexdigest()


def test_the_scenarios_pass_with_the_checkouts_collection_beside_a_stale_copy(tmp_path):
    home = tmp_path / 'home'
    stale = plant_stale_copy(home)
    before = digest(stale)
    state = tmp_path / 'state'
    state.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('ANSIBLE_', 'EPHEMERA_', 'LOCALPVE_', 'MOLECULE_'))}
    env.update(HOME=str(home), PATH=BIN + os.pathsep + env.get('PATH', ''), EPHEMERA_COLLECTIONS_PATH=collections_path(),
               EPHEMERA_MOLECULE_DIR=str(state), EPHEMERA_MOLECULE_HOST=pick_host(), ANSIBLE_NOCOLOR='1',
               NO_COLOR='1')
    done = subprocess.run([os.path.join(BIN, 'molecule'), 'test', '--all', '--shared-state'], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stdout[-8000:]
    assert 'stale copy' not in done.stdout
    text = re.sub(r'\x1b\[[0-9;]*m', '', done.stdout)

    def ran(scenario, action):
        return re.search(r'(?m)^\S*\s*%s\W+%s: Executed: Successful' % (scenario, action), text)
    for scenario in ('create', 'destroy', 'archive', 'postgresql'):
        for action in ('converge', 'idempotence', 'verify'):
            assert ran(scenario, action), (scenario, action, text[-6000:])
        summary = re.search(r'(?m)^%s\s+: actions=(\d+)\s+successful=(\d+).*failed=(\d+)' % scenario, text)
        assert summary and summary.group(1) == summary.group(2) and summary.group(3) == '0', text[-3000:]
    assert ran('default', 'create') and ran('default', 'destroy'), text[-6000:]
    # Molecule installed nothing into HOME's collections: the stale copy is as it was, and alone.
    assert digest(stale) == before
    assert os.listdir(str(stale / 'ansible_collections')) == ['ephemera']
    # Everything was destroyed and the cluster is stopped.
    status = subprocess.run([sys.executable, '-m', 'tests.localpve', 'status', '--json'], cwd=ROOT,
                            env=dict(env, LOCALPVE_STATE_DIR=str(state / 'cluster')), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=60, check=False)
    assert status.returncode != 0 or '"running": false' in status.stdout, status.stdout
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(str(state / 'journal.sqlite'), readonly=True) as journal:
        records = {ws['name']: ws['status'] for ws in journal.list_workspaces()}
    assert records == {'mol-create': 'destroyed', 'mol-destroy': 'destroyed', 'mol-archive': 'destroyed'}, records
    # The postgresql scenario's workspace was recorded in its database alone, and destroyed by its cleanup, which
    # stopped the server.
    assert ran('postgresql', 'cleanup'), text[-6000:]
    with open(str(state / 'postgresql' / 'pid')) as handle:
        pid = int(handle.read())
    assert not os.path.exists('/proc/%d' % pid) or open('/proc/%d/stat' % pid).read().split(') ')[1][0] == 'Z'
