"""What a rerun may change, what the request check refuses before anything is cloned, and how a failure reads.

- A purpose amended on a ready workspace briefs its agent again (the old agent stopped, the new one working on
  the corrected purpose); the repository, ref and template cannot be amended.
- Connection settings (the SSH key's path) are the run's: a rerun from a key at another path changes nothing, a
  rerun with the right key after a wrong one goes on where the wrong one stopped.
- The SSH key and a repository the controller can reach are checked at the request check, before the queue, the
  journal or the cluster see anything.
- A failed step fails once, in a plain log: one fatal line, short, naming the workspace and the step, and the
  queue's operation recorded as failed without a rescue; the whole record only from -v on.
"""

import os
import re
import shlex
import shutil
import subprocess

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest

from tests.ansible_run import run_ansible

from .conftest import GIT_USER
from .createrun import DESTROY, Controller, request_vars

RUNNING_AGENT = ['sh', '-c', 'echo "brief: {purpose}"; sleep 300']


def runner(ctl, name, request):
    """Ask the workspace's agent runner, the way the collection does (wherever the runner keeps its socket)."""
    ws = ctl.workspace(name)
    params = ws['params']
    layout = guest_ops.Layout(params['guest_root'], ws['vmid'], params['checkout_path'], params['agent_user'])
    with Guest(ws['address'], port=params['ssh_port'], user=params['ssh_user'], key_file=ctl.info['ssh_private_key'],
               host_key=ws['facts']['host_key']).connect() as guest:
        return guest_ops.runner_call(guest, layout, params['ssh_user'], request)


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open('/proc/%d/stat' % pid) as stat:
        return stat.read().split(') ', 1)[1].split()[0] != 'Z'


@pytest.fixture(scope='module')
def ready(cluster, repo, tmp_path_factory):
    """A controller with workspace 'rebrief' ready, its agent working on the first purpose."""
    ctl = Controller(cluster, tmp_path_factory.mktemp('rerun'))
    ctl.request = request_vars(repo.url, 'rebrief', purpose='Add a farewell', ephemera_agents={'worker': RUNNING_AGENT})
    run = ctl.create(ctl.request)
    assert run.ok, run.explain()
    try:
        yield ctl
    finally:
        ctl.stop()


def test_a_corrected_purpose_briefs_the_agent_again_and_a_rerun_of_it_changes_nothing(ready):
    first = runner(ready, 'rebrief', {'op': 'status'})
    assert first['brief']['purpose'] == 'Add a farewell' and first['agent_process']['ended_at'] is None
    old_pid = first['agent_process']['pid']
    corrected = dict(ready.request, purpose='Add a farewell function named bye, with a test')
    run = ready.create(corrected)
    assert run.ok, run.explain()
    steps = run.step_results()
    assert steps[1]['changed'] and 'purpose amended, the agent is briefed again' in steps[1]['msg']
    assert steps[12]['changed'] and steps[13]['changed']
    assert not any(steps[n].get('changed') for n in range(2, 12)), steps
    ws = ready.workspace('rebrief')
    assert (ws['status'], ws['purpose'], ws['params']['purpose']) == ('ready', corrected['purpose'], corrected['purpose'])
    assert 'rebrief' not in ws['facts']
    now = runner(ready, 'rebrief', {'op': 'status'})
    assert now['brief']['purpose'] == corrected['purpose'] and now['agent_process']['ended_at'] is None
    assert now['agent_process']['pid'] != old_pid and not alive(old_pid)
    assert 'brief: %s' % corrected['purpose'] in now['log_tail']
    amended = [e for e in ready.events('rebrief') if e['action'] == 'amended']
    assert [e['detail'] for e in amended] == [{'changed': ['purpose'], 'rebrief': True}]
    # The same corrected request again: nothing to do.
    again = ready.create(corrected)
    assert again.ok and again.stats()['changed'] == 0, again.explain()


def test_someone_elses_request_cannot_brief_the_agent_again_unless_the_job_says_so(ready):
    """A create for the same name by another AWX user with another purpose is refused at the request, before the
    queue: the agent keeps working for the one who asked. With rebrief_others (set by the template's admin) it goes,
    and the workspace is then the new requester's."""
    before = ready.workspace('rebrief')
    requester = before['params']['requester']
    assert requester['by'] and requester['by'] != 'mallory'
    working = runner(ready, 'rebrief', {'op': 'status'})['agent_process']['pid']
    other = dict(ready.request, purpose='Delete every test', awx_user_name='mallory', awx_job_id=4711)
    run = ready.create(other)
    assert not run.ok
    message = run.failure()[1]['msg']
    assert ("Workspace 'rebrief' was requested by %s; this request by mallory would change purpose and brief its "
            "running agent again, replacing its work." % requester['by']) in message, message
    assert 'rebrief_others=true' in message
    after = ready.workspace('rebrief')
    assert after['generation'] == before['generation'] and after['purpose'] == before['purpose']
    status = runner(ready, 'rebrief', {'op': 'status'})
    assert status['agent_process']['pid'] == working and status['agent_process']['ended_at'] is None
    # The same request from the workspace's own requester, or a plain rerun from anyone, is no amendment.
    again = ready.create(dict(ready.request, purpose=before['purpose'], awx_user_name='mallory'))
    assert again.ok and again.stats()['changed'] == 0, again.explain()
    # The template's admin lets the job take the workspace over.
    taken = ready.create(dict(other, rebrief_others=True))
    assert taken.ok, taken.explain()
    ws = ready.workspace('rebrief')
    assert ws['purpose'] == 'Delete every test'
    assert ws['params']['requester'] == {'by': 'mallory', 'job_id': '4711'}
    assert runner(ready, 'rebrief', {'op': 'status'})['brief']['purpose'] == 'Delete every test'
    # Back to the original request for the tests that follow, by its original requester's leave.
    back = ready.create(dict(ready.request, purpose=before['purpose'], rebrief_others=True))
    assert back.ok, back.explain()


def test_the_repository_ref_and_template_cannot_be_amended(ready, repo):
    before = ready.workspace('rebrief')
    run = ready.create(dict(ready.request, ref='feature'))
    assert not run.ok
    message = run.failure()[1]['msg']
    assert "Workspace 'rebrief' has checked out %s@main already; another repository or ref is another workspace" % (
        ready.request['repo']) in message, message
    assert 'ansible-playbook ephemera.workspaces.destroy -e workspace=rebrief' in message
    assert ready.workspace('rebrief')['generation'] == before['generation']


def test_a_key_at_another_path_is_a_setting_of_the_run_not_a_change(ready, tmp_path):
    moved = str(tmp_path / 'moved_key')
    shutil.copy(ready.info['ssh_private_key'], moved)
    os.chmod(moved, 0o600)
    before = ready.workspace('rebrief')
    run = ready.create(dict(ready.request, purpose=before['purpose'], ephemera_ssh_private_key=moved))
    assert run.ok and run.stats()['changed'] == 0, run.explain()
    after = ready.workspace('rebrief')
    assert after['params']['ssh_key_path'] == moved
    recorded = [e for e in ready.events('rebrief') if e['action'] == 'connection']
    assert [e['detail'] for e in recorded] == [{'changed': ['ssh_key_path']}]


def ssh_keygen(path, passphrase=''):
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', passphrase, '-f', path], check=True)
    return path


def test_a_key_that_cannot_log_in_anywhere_is_refused_before_anything(controller, repo, tmp_path):
    garbage = str(tmp_path / 'not-a-key')
    with open(garbage, 'w') as out:
        out.write('this is not a key\n')
    locked = ssh_keygen(str(tmp_path / 'locked'), passphrase='secret words')
    cases = {
        str(tmp_path / 'missing'): 'Cannot read the SSH private key %s (it does not exist)' % (tmp_path / 'missing'),
        ssh_keygen(str(tmp_path / 'pair')) + '.pub': 'is a public key: give the private half',
        locked: 'is protected by a passphrase',
        garbage: 'is not an SSH private key',
    }
    state = controller.cluster_state()
    for number, (key, expected) in enumerate(cases.items()):
        name = 'bad-key-%d' % number
        run = controller.create(request_vars(repo.url, name, ephemera_ssh_private_key=key))
        assert not run.ok and run.failure()[0] == 'Check the request for %s' % name, run.explain()
        assert expected in run.failure()[1]['msg'], run.failure()[1]['msg']
        assert run.failure()[1]['msg'].startswith('The request for workspace %s was refused: ' % name)
        assert controller.workspace(name) is None and controller.queue_entries(name) == []
    assert controller.cluster_state() == state
    assert not os.path.exists(controller.journal_path)


def test_a_rerun_with_the_right_key_goes_on_where_a_wrong_key_stopped(controller, repo, tmp_path):
    wrong = ssh_keygen(str(tmp_path / 'not-authorized'))
    request = request_vars(repo.url, 'wrong-key', ephemera_ssh_timeout=3)
    run = controller.create(dict(request, ephemera_ssh_private_key=wrong))
    assert not run.ok and run.failure()[0].startswith('8/13'), run.explain()
    ws = controller.workspace('wrong-key')
    assert (ws['status'], ws['failure']['step']) == ('failed', 'ssh')
    # The right key, from another path than the cluster's: the run's key is used, not the one recorded.
    right = str(tmp_path / 'right')
    shutil.copy(controller.info['ssh_private_key'], right)
    rerun = controller.create(dict(request, ephemera_ssh_private_key=right))
    assert rerun.ok, rerun.explain()
    steps = rerun.step_results()
    assert not any(steps[n].get('changed') for n in range(2, 8)) and steps[8]['changed']
    after = controller.workspace('wrong-key')
    assert (after['status'], after['vmid']) == ('ready', ws['vmid']) and controller.ours('wrong-key') == [ws['vmid']]


def test_a_repository_the_controller_can_ask_is_checked_before_anything(controller, repo, git_server, git_token):
    url = git_server.url_of(repo.bare)
    login = {'git_token': git_token, 'git_username': GIT_USER}
    cases = [
        ('repo-missing', dict(login, repo=url.replace('app.git', 'missing.git')), 'does not exist'),
        ('ref-missing', dict(login, ref='no-such-branch'), "Ref 'no-such-branch' is neither a branch nor a tag of"),
        ('no-login', {}, 'refused the login without a git_token'),
        ('bad-login', dict(login, git_token='wrong-' + git_token), 'refused the login with the given git_token'),
    ]
    state = controller.cluster_state()
    for name, change, expected in cases:
        run = controller.create(dict(request_vars(url, name), **change))
        assert not run.ok and run.failure()[0] == 'Check the request for %s' % name, run.explain()
        message = run.failure()[1]['msg']
        assert expected in message and git_token not in run.output, message
        assert controller.workspace(name) is None and controller.queue_entries(name) == []
    assert controller.cluster_state() == state
    # A repository the controller cannot reach is not refused by the controller: the guest may reach it.
    unreachable = controller.create(request_vars('http://127.0.0.1:9/app.git', 'unreachable'), check=True)
    assert unreachable.ok, unreachable.explain()
    assert 'repository not checked: the controller cannot reach it' in unreachable.step_results()[1]['msg']


FATAL = re.compile(r'^fatal: \[localhost\]: FAILED! => (.*)$', re.M)


def test_a_failed_step_fails_once_in_a_plain_log(controller, repo):
    request = request_vars(repo.url.replace('app.git', 'gone.git'), 'fails-once')
    run = controller.create(request, callback=None)
    assert run.returncode != 0
    fatal = FATAL.findall(run.output)
    assert len(fatal) == 1, run.output
    line = fatal[0]
    assert 'Workspace fails-once failed at step 10/13 (checkout)' in line and 'run the create' in line, line
    # The record is not on the line: no parameters, timestamps or host key.
    assert len(line) < 1500 and '"params"' not in line and 'host_key' not in line, line
    assert re.search(r'localhost\s*: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1\s+skipped=\d+\s+rescued=0',
                     run.output), run.output
    assert 'Fail the run' not in run.output
    # The operation was recorded as failed by the step itself.
    entry = controller.queue_entries('fails-once')[-1]
    assert entry['state'] == 'failed' and 'failed at step 10/13' in entry['result']['msg']
    # With -v the result carries the workspace's whole record.
    verbose = controller.create(request, callback=None, verbose=1)
    fatal = FATAL.findall(verbose.output)
    assert len(fatal) == 1 and '"params"' in fatal[0] and '"failure"' in fatal[0], verbose.output


def test_destroy_says_where_the_work_went_and_its_check_mode_predicts_the_run(controller, repo):
    name = 'report-archive'
    run = controller.create(request_vars(repo.url, name))
    assert run.ok, run.explain()
    ws = controller.workspace(name)
    with open(os.path.join(controller.guest_root(ws['vmid']), 'workspace', 'repo', 'notes.txt'), 'w') as out:
        out.write('unsaved\n')
    predicted = controller.create({'workspace': name}, playbook=DESTROY, check=True)
    assert predicted.ok, predicted.explain()
    real = controller.create({'workspace': name}, playbook=DESTROY)
    assert real.ok, real.explain()

    def changes(run):
        return [(title, result.get('changed')) for title, result in run.results() if re.match(r'^\d/6 ', title)]
    assert changes(predicted) == changes(real)
    assert [title[:3] for title, dummy in changes(real)] == ['%d/6' % n for n in range(1, 7)]
    report = real.task('Report %s' % name)['msg']
    assert report[0] == '%s: destroyed' % name
    assert report[1].startswith('unsaved work: archived %s: pushed ' % name) and 'refs/heads/ephemera/%s' % name in report[1]


def test_the_documented_orphan_destroy_reads_cleanly(controller):
    foreign = controller.cluster.foreign_create(how='create')
    run = controller.create({'orphan_vmid': foreign['vmid'], 'confirm_orphan': True}, playbook=DESTROY, callback=None)
    assert 'is undefined' not in run.output and '[WARNING]' not in run.output, run.output
    assert 'TASK [Destroy workspace (none: an orphan is deleted)]' in run.output
    # Not ours: refused, and left alone.
    assert run.returncode != 0 and foreign['vmid'] in controller.guests()


def test_status_reads_the_journal_the_inventory_names(ready, tmp_path):
    inventory = tmp_path / 'controllers.yml'
    inventory.write_text('all:\n  children:\n    controllers:\n      hosts:\n        ctl1:\n          ansible_connection: local\n'
                         '          ephemera_journal_path: %s\n' % ready.journal_path)
    run = run_ansible(['ansible-playbook', '-i', str(inventory), 'ephemera.workspaces.status', '-e', 'target=controllers'],
                      unset=('EPHEMERA_JOURNAL',), fail=False)
    assert run.ok, run.explain()
    lines = run.task('Print the queue as a tree', host='ctl1')['msg']
    assert lines[0] == 'Journal %s:' % ready.journal_path
    assert any('create workspace rebrief' in line for line in lines[1:]), lines


def test_the_printed_ssh_command_reaches_the_checkout_pinned_to_the_recorded_key(ready, tmp_path):
    """The create's report prints an ssh command line and the checkout's path: run as printed (no known_hosts file
    of the user's, BatchMode), it reaches the guest and the checkout holds the recorded commit; with another key
    recorded for the guest, the same command is refused."""
    # The report of the fixture's own create (no run of its own: the workspace has not moved since).
    run = ready.runs[0]
    assert run.ok, run.explain()
    lines = run.task('Report rebrief')['msg']
    [command] = [line for line in lines if line.startswith('ssh ')]
    [checkout] = [line.split('the checkout: ', 1)[1] for line in lines if 'the checkout: ' in line]
    ws = ready.workspace('rebrief')
    env = dict(os.environ, HOME=str(tmp_path))  # nothing of the user's ~/.ssh
    done = subprocess.run(shlex.split(command) + ['-o', 'BatchMode=yes', 'git', '-C', checkout, 'rev-parse', 'HEAD'],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == ws['facts']['head'], done.stdout
    assert not (tmp_path / '.ssh' / 'known_hosts').exists()
    other = ssh_keygen(str(tmp_path / 'other'))
    forged = command.replace(ws['facts']['host_key'].split()[1], open(other + '.pub').read().split()[1])
    refused = subprocess.run(shlex.split(forged) + ['-o', 'BatchMode=yes', 'true'], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env, timeout=60, check=False)
    assert refused.returncode != 0 and 'Host key verification failed' in refused.stdout, refused.stdout
