"""ephemera.workspaces.pve_task against a real fakepve server: in-process through AnsibleModule, and once
through the `ansible` command line as a playbook author runs it."""

import json
import os
import subprocess
import sys

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient
from ansible_collections.ephemera.workspaces.plugins.modules import pve_task

ANSIBLE = os.path.join(os.path.dirname(sys.executable), 'ansible')
ANSIBLE_DOC = ANSIBLE + '-doc'


def run_module(capsys, args):
    """Run the module's main() with args; returns (exit code, result dict)."""
    with patch_module_args(args):
        with pytest.raises(SystemExit) as info:
            pve_task.main()
    return info.value.code, json.loads(capsys.readouterr().out)


def start_ct(fakepve, cafile, start_error=None, start_secs=0):
    box = fakepve.add_ct(105, 'box')
    box.start_error = start_error
    box.start_secs = start_secs
    with PveClient(fakepve.url, api_user='root@pam', api_password='secret', ca_file=cafile) as client:
        return client.post('/nodes/pve1/lxc/105/status/start')


def connection(fakepve, cafile):
    return dict(api_host=fakepve.url, api_user='root@pam', api_password='secret', ca_file=cafile)


@pytest.mark.parametrize('check_mode', [False, True])
def test_waits_for_a_task_that_succeeds(fakepve, fakepve_cafile, capsys, check_mode):
    upid = start_ct(fakepve, fakepve_cafile)
    args = dict(upid=upid, _ansible_check_mode=check_mode, **connection(fakepve, fakepve_cafile))
    code, result = run_module(capsys, args)
    assert code == 0
    assert result['changed'] is False
    task = result['task']
    assert (task['upid'], task['status'], task['exitstatus'], task['succeeded']) == (upid, 'stopped', 'OK', True)
    assert (task['type'], task['id'], task['node']) == ('vzstart', '105', 'pve1')
    assert '"secret"' not in json.dumps(result)
    assert result['invocation']['module_args']['api_password'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'


def test_failed_task_fails_the_module_with_the_log_tail(fakepve, fakepve_cafile, capsys):
    upid = start_ct(fakepve, fakepve_cafile, start_error='cannot mount rootfs')
    code, result = run_module(capsys, dict(upid=upid, **connection(fakepve, fakepve_cafile)))
    assert code == 1 and result['failed'] is True
    assert 'vzstart 105 on node pve1 failed: cannot mount rootfs' in result['msg']
    assert 'TASK ERROR: cannot mount rootfs' in result['msg']
    assert result['kind'] == 'task_failed'
    assert result['task']['succeeded'] is False
    assert result['task']['log_tail'][-1] == 'TASK ERROR: cannot mount rootfs'


def test_inspect_does_not_fail_on_a_failed_task(fakepve, fakepve_cafile, capsys):
    upid = start_ct(fakepve, fakepve_cafile, start_error='cannot mount rootfs')
    code, result = run_module(capsys, dict(upid=upid, wait=False, **connection(fakepve, fakepve_cafile)))
    assert code == 0
    assert (result['task']['succeeded'], result['task']['exitstatus']) == (False, 'cannot mount rootfs')


@pytest.mark.fakepve(time_scale=1)
def test_inspect_a_running_task_and_time_out_waiting_for_it(fakepve, fakepve_cafile, capsys):
    upid = start_ct(fakepve, fakepve_cafile, start_secs=60)
    code, result = run_module(capsys, dict(upid=upid, wait=False, **connection(fakepve, fakepve_cafile)))
    assert code == 0
    assert (result['task']['status'], result['task']['succeeded'], result['task']['exitstatus']) == ('running', None, None)
    code, result = run_module(capsys, dict(upid=upid, timeout=1, **connection(fakepve, fakepve_cafile)))
    assert code == 1
    assert result['kind'] == 'task_timeout'
    assert 'still running' in result['msg'] and result['task']['status'] == 'running'


def test_connection_options_from_the_environment(fakepve, fakepve_cafile, capsys, monkeypatch):
    upid = start_ct(fakepve, fakepve_cafile)
    fakepve.apitokens['root@pam!ci'] = 'token-secret'
    for name, value in dict(PROXMOX_HOST=fakepve.url, PROXMOX_TOKEN_ID='root@pam!ci',
                            PROXMOX_TOKEN_SECRET='token-secret', PROXMOX_CA_FILE=fakepve_cafile).items():
        monkeypatch.setenv(name, value)
    code, result = run_module(capsys, dict(upid=upid))
    assert code == 0 and result['task']['succeeded'] is True
    assert 'token-secret' not in json.dumps(result)


@pytest.mark.parametrize('args, words, kind', [
    (dict(upid='UPID:nonsense'), ["'UPID:nonsense' is not a Proxmox VE task id", 'UPID:<node>'], None),
    (dict(upid='UPID:pve1:000003E8:00001B58:6B105231:vzstart:105:root@pam:', api_password='wrong'),
     ["refused the login of 'root@pam'", 'api_password'], 'auth'),
    (dict(upid='UPID:pve1:000003E8:00001B58:6B105231:vzstart:105:root@pam:', timeout=-1), ['timeout must be'], None),
])
def test_bad_input_gets_one_clear_message(fakepve, fakepve_cafile, capsys, args, words, kind):
    options = connection(fakepve, fakepve_cafile)
    options.update(args)
    code, result = run_module(capsys, options)
    assert code == 1
    for word in words:
        assert word in result['msg']
    assert result.get('kind') == kind
    assert '"wrong"' not in json.dumps(result)  # the password is not echoed


def test_runs_through_the_ansible_command_line(fakepve, fakepve_cafile):
    upid = start_ct(fakepve, fakepve_cafile)
    env = dict(os.environ, PROXMOX_HOST=fakepve.url, PROXMOX_USER='root@pam', PROXMOX_PASSWORD='secret',
               PROXMOX_CA_FILE=fakepve_cafile, ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_STDOUT_CALLBACK='json',
               ANSIBLE_LOAD_CALLBACK_PLUGINS='true', ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run([ANSIBLE, 'localhost', '-c', 'local', '-m', 'ephemera.workspaces.pve_task',
                           '-a', 'upid={0}'.format(upid)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    assert result['task']['upid'] == upid and result['task']['succeeded'] is True


def test_documentation_renders_and_equals_the_argument_spec():
    proc = subprocess.run([ANSIBLE_DOC, '--json', 'ephemera.workspaces.pve_task'], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)['ephemera.workspaces.pve_task']['doc']
    spec = pve_task.argument_spec()
    assert set(doc['options']) == set(spec)
    for name, option in spec.items():
        documented = doc['options'][name]
        assert documented['type'] == option['type'], name
        assert documented.get('default') == option.get('default'), name
        assert bool(documented.get('required')) == bool(option.get('required')), name
    assert [name for name, option in spec.items() if option.get('no_log')] == ['api_password', 'api_token_secret']
