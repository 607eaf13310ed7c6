"""Jobs the way AWX runs them: ansible-runner, each job in a fresh private data directory (the project, an inventory,
env/extravars, env/envvars as the ephemera.workspaces credential injects them, env/ssh_key as a Machine credential
hands its key over through an ssh-agent), the collection installed into the job's requirements_collections from the
project's collections/requirements.yml, and nothing shared between the jobs but the PostgreSQL journal and the
try-out cluster: a create job, a status job, a destroy job (in another directory) and a reconcile job.

The state survives from job to job through the journal in PostgreSQL alone (no journal file anywhere: every job's
XDG_STATE_HOME and HOME are its own, and are searched after), and the job events show the named step tasks.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.integration.playbooks import FAKE_AGENTS, make_repo, running_cluster
from tests import pgserver

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.path.dirname(sys.executable)
SECRET = 'a5' * 32
WORKSPACE = 'awx-job'
# One PostgreSQL server for the session (tests/pgserver.py).
pg_server = pgserver.pg_server


@pytest.fixture(scope='module')
def site(tmp_path_factory, pg_server):
    base = tmp_path_factory.mktemp('awx')
    # The project as AWX checks it out (the files git tracks) and its collections as a project update installs them.
    project = base / 'project-cache' / 'project'
    tracked = subprocess.run(['git', '-C', ROOT, 'ls-files', '-z'], stdout=subprocess.PIPE, check=True).stdout
    for name in tracked.decode().split('\0'):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), str(project / name))
    collections = base / 'project-cache' / 'requirements_collections'
    subprocess.run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--offline', '--force', '-r',
                    'collections/requirements.yml', '-p', str(collections)], cwd=str(project), check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, HOME=str(base)))
    journal_url = pg_server.new_database('awx_jobs')
    with running_cluster(base / 'cluster') as control:
        yield dict(base=base, project=project, collections=collections, journal_url=journal_url, pg=pg_server,
                   cluster=control.info, repo=make_repo(str(base / 'repo')), jobs=[])


def job(site, name, playbook, extravars, credential=None):
    """One job in a fresh private data directory; returns (the finished process, events, directory). ``credential``
    changes what the credential injects (a value None leaves the variable out)."""
    top = site['base'] / ('job-%d-%s' % (len(site['jobs']) + 1, name))
    site['jobs'].append(top)
    private = top / 'private'
    shutil.copytree(str(site['project']), str(private / 'project'))
    shutil.copytree(str(site['collections']), str(private / 'requirements_collections'))
    info = site['cluster']
    # The controller's inventory: localhost, with the site's settings as host variables.
    (private / 'inventory').mkdir(parents=True)
    (private / 'inventory' / 'hosts.json').write_text(json.dumps({'all': {'hosts': {'localhost': {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'ephemera_node': info['template_node'], 'ephemera_template_vmid': info['template_vmid'],
        'ephemera_pool': info['pool'], 'ephemera_guest_root': info.get('guest_prefix') or info['guest_root'],
        'ephemera_ssh_user': info['ssh_user'], 'ephemera_ssh_port': info['ssh_port'],
        'ephemera_agent_user': info.get('agent_user') or info['ssh_user'],
        'ephemera_agent_user_is_ssh_user': info.get('agent_user', info['ssh_user']) == info['ssh_user']}}}}))
    (private / 'env').mkdir()
    ca = top / 'credential-ca.pem'
    shutil.copy(info['ca_file'], str(ca))
    # What the ephemera.workspaces credential injects (playbooks/awx_configure.yml): the environment, and its fields
    # that are no secret as extra variables.
    envvars = {
        'PROXMOX_HOST': info['proxy_url'], 'PROXMOX_TOKEN_ID': info['token_id'],
        'PROXMOX_TOKEN_SECRET': info['token_secret'], 'PROXMOX_CA_FILE': str(ca),
        'EPHEMERA_CONTROLLER_SECRET': SECRET, 'EPHEMERA_JOURNAL_URL': site['journal_url'],
        'ANSIBLE_COLLECTIONS_PATH': str(private / 'requirements_collections'),
        'ANSIBLE_COLLECTIONS_SCAN_SYS_PATH': '1',
        'HOME': str(top / 'home'), 'XDG_STATE_HOME': str(top / 'state'),
    }
    for key, value in (credential or {}).items():
        if value is None:
            envvars.pop(key)
        else:
            envvars[key] = value
    (top / 'home').mkdir()
    (top / 'state').mkdir()
    values = {'ephemera_api_host': info['proxy_url'], 'ephemera_api_token_id': info['token_id'],
              'ephemera_ca_file': str(ca)}
    values.update(extravars)
    (private / 'env' / 'envvars').write_text(json.dumps(envvars))
    (private / 'env' / 'extravars').write_text(json.dumps(values))
    # A Machine credential: its key is loaded into an ssh-agent for the job (ansible-runner does it as AWX does).
    (private / 'env' / 'ssh_key').write_text(open(info['ssh_private_key']).read())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('ANSIBLE_', 'EPHEMERA_', 'PROXMOX_', 'SSH_AUTH_SOCK', 'LOCALPVE_'))}
    env['PATH'] = BIN + os.pathsep + env.get('PATH', '')
    done = subprocess.run([os.path.join(BIN, 'ansible-runner'), 'run', str(private), '-p', playbook, '--ident', name],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=600,
                          check=False)
    events = []
    for path in sorted(glob.glob(str(private / 'artifacts' / name / 'job_events' / '*.json')),
                       key=lambda p: int(os.path.basename(p).split('-')[0])):
        with open(path) as handle:
            events.append(json.load(handle))
    return done, events, private


def state_files(top):
    """Journal and secret files under ``top``, relative to it."""
    return set(os.path.relpath(path, str(top)) for pattern in ('*.sqlite*', '*.secret')
               for path in glob.glob(str(top / '**' / pattern), recursive=True))


def ok_results(events):
    """(task name, result) of every runner_on_ok event, in order."""
    return [(e['event_data']['task'], e['event_data'].get('res', {})) for e in events if e['event'] == 'runner_on_ok']


def result_of(events, task):
    found = [res for name, res in ok_results(events) if name == task]
    assert found, 'no task %r in %s' % (task, [name for name, dummy in ok_results(events)])
    return found[-1]


def assert_ok(done, events):
    assert done.returncode == 0, done.stdout[-6000:]
    assert [e for e in events if e['event'] == 'playbook_on_stats'], 'no stats event'
    assert not [e for e in events if e['event'] in ('runner_on_failed', 'runner_on_unreachable')
                and not e['event_data'].get('ignore_errors')], done.stdout[-4000:]


def failed_messages(events):
    return [e['event_data']['res'].get('msg', '') for e in events if e['event'] == 'runner_on_failed']


def test_create_status_destroy_and_reconcile_as_awx_jobs_share_only_the_database(site):
    request = {'workspace': WORKSPACE, 'repo': site['repo'], 'purpose': 'work on awx-job', 'agent': 'fake',
               'ttl': 3600, 'ephemera_agents': FAKE_AGENTS}
    # An empty database is as likely the wrong one: the first create does not start the journal in it unless told.
    refused, events, dummy = job(site, 'create-new-database', 'playbooks/create.yml', request)
    assert refused.returncode != 0
    [message] = failed_messages(events)
    assert message.startswith('No journal in postgresql://') and 'does not start one in a database' in message
    assert '-e ephemera_new_journal=true' in message and site['pg'].password not in refused.stdout
    assert site['pg'].admin("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
                            database='awx_jobs') == ['0']
    # The admin of the template sets ephemera_new_journal for that one first job.
    create, events, create_dir = job(site, 'create', 'playbooks/create.yml', dict(request, ephemera_new_journal=True))
    assert_ok(create, events)
    steps = [name for name, dummy in ok_results(events) if '/13 ' in name]
    assert steps[0] == '1/13 persist request' and steps[-1] == '13/13 mark ready' and len(set(steps)) == 13
    assert result_of(events, '13/13 mark ready')['changed'] is True
    # The role that ran is the copy the job installed from collections/requirements.yml.
    [path] = set(e['event_data']['task_path'].split(':')[0] for e in events
                 if e['event'] == 'runner_on_ok' and e['event_data']['task'] == '13/13 mark ready')
    assert path.startswith(str(create_dir / 'requirements_collections' / 'ansible_collections' / 'ephemera')), path
    # The key came from the ssh-agent: no key file was given to the job.
    assert 'ssh_private_key' not in json.loads((create_dir / 'env' / 'extravars').read_text())

    status, events, dummy = job(site, 'status', 'playbooks/status.yml', {})
    assert_ok(status, events)
    shown = result_of(events, 'Print the workspaces with their lease and cleanup status')['msg']
    assert len(shown) == 1 and shown[0].startswith('%s: ready, cleanup ' % WORKSPACE), shown
    assert result_of(events, 'Read the workspaces from the journal')['workspaces'][0]['name'] == WORKSPACE

    destroy, events, destroy_dir = job(site, 'destroy', 'playbooks/destroy.yml', {'workspace': WORKSPACE})
    assert destroy_dir.parent != create_dir.parent
    assert_ok(destroy, events)
    steps = [name for name, dummy in ok_results(events) if '/6 ' in name]
    assert '2/6 mark destroying' in steps and '6/6 mark destroyed' in steps, steps
    assert result_of(events, '5/6 verify ownership and delete')['changed'] is True

    reconcile, events, dummy = job(site, 'reconcile', 'playbooks/reconcile.yml', {})
    assert_ok(reconcile, events)
    compared = result_of(events, 'Compare the journal with the cluster')
    kinds = [finding['kind'] for finding in compared['findings']]
    assert 'foreign' not in kinds and 'orphan' not in kinds, compared['report']

    # What the jobs shared: the database, which holds the workspace's whole life; no journal file anywhere.
    from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
    with Journal.open(url=site['journal_url'], readonly=True) as journal:
        record = journal.get_workspace(WORKSPACE)
        actions = [event['action'] for event in journal.events(WORKSPACE)]
    assert record['status'] == 'destroyed' and 'ready' in actions and 'destroyed' in actions, actions

    # The project's own test data holds journals; every job directory has those and nothing more.
    shipped = set(os.path.join('private', 'project', name) for name in state_files(site['project']))
    assert [sorted(state_files(top) - shipped) for top in site['jobs']] == [[]] * len(site['jobs'])
    # Nothing was made at a path derived from the journal's URL (in the project, the jobs' working directory).
    assert [path for top in site['jobs'] for path in glob.glob(str(top / '**' / 'postgresql:*'), recursive=True)] == []


def test_a_job_without_the_journal_or_with_another_secret_refuses_and_makes_nothing(site):
    """What went wrong before: a job whose container has no journal quietly started an empty one (and a new secret)
    and reported the workspaces as foreign. Now the job fails and says what to do; nothing is made."""
    lost, events, private = job(site, 'reconcile-no-journal', 'playbooks/reconcile.yml', {},
                                credential={'EPHEMERA_JOURNAL_URL': None})
    assert lost.returncode != 0
    [message] = failed_messages(events)
    assert message.startswith('No journal at %s' % (private.parent / 'state' / 'ephemera' / 'journal.sqlite')), message
    assert 'ephemera_new_journal=true' in message
    assert state_files(private.parent) - set(os.path.join('private', 'project', name)
                                             for name in state_files(site['project'])) == set()

    other, events, dummy = job(site, 'reconcile-other-secret', 'playbooks/reconcile.yml', {},
                               credential={'EPHEMERA_CONTROLLER_SECRET': 'b7' * 32})
    assert other.returncode != 0
    [message] = failed_messages(events)
    assert 'The controller secret (from EPHEMERA_CONTROLLER_SECRET) is not the one of the journal' in message
    assert 'b7' * 32 not in other.stdout

    none, events, dummy = job(site, 'reconcile-no-secret', 'playbooks/reconcile.yml', {},
                              credential={'EPHEMERA_CONTROLLER_SECRET': None})
    assert none.returncode != 0
    [message] = failed_messages(events)
    assert 'records workspaces of controller' in message and 'but there is no controller secret' in message
