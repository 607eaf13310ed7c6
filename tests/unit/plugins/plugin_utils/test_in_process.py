"""Modules run in-process: the module's own argument spec decides, no_log values never come back, check mode
writes nothing. The same modules run as Ansible module processes in tests/integration."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import environment, from_variables, run_in_process


@pytest.fixture
def journal_path(tmp_path):
    return str(tmp_path / 'controller' / 'journal.sqlite')


def test_unknown_options_are_refused_as_the_module_would(journal_path):
    result = run_in_process('workspace_info', {'journal_path': journal_path, 'bogus': 1})
    assert result['failed']
    assert result['msg'].startswith('Unsupported parameters for (workspace_info) module: bogus.')


def test_choices_types_and_required_options_come_from_the_modules_own_spec(journal_path):
    wrong_choice = run_in_process('workspace_info', {'journal_path': journal_path, 'status': ['sleeping']})
    assert wrong_choice['failed'] and 'sleeping' in wrong_choice['msg'] and 'status' in wrong_choice['msg']
    no_name = run_in_process('workspace_destroy', {'journal_path': journal_path, 'step': 'mark'})
    assert no_name['failed'] and 'one of the following is required: name, vmid' in no_name['msg']
    not_an_int = run_in_process('workspace_info', {'journal_path': journal_path, 'events_limit': 'many'})
    assert not_an_int['failed'] and 'events_limit' in not_an_int['msg']


def test_no_log_values_never_come_back_in_the_result(journal_path):
    token = 'gtok-never-shown-4711'
    result = run_in_process('workspace_create', {
        'journal_path': journal_path, 'name': 'w1', 'step': 'request', 'template': 9000, 'repo': 'not a url',
        'purpose': 'p', 'git_token': token, 'api_host': 'pve.invalid', 'api_token_id': 'u@pve!t',
        'api_token_secret': 'secret-value-0815'}, check_mode=True)
    assert result['failed'] and "Repository 'not a url' is not a URL" in result['msg']
    text = repr(result)
    assert token not in text and 'secret-value-0815' not in text
    assert result['invocation']['module_args']['git_token'] == 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER'


def test_environment_fallbacks_are_read_and_the_task_environment_is_undone_after(journal_path):
    with environment({'EPHEMERA_JOURNAL': journal_path, 'EPHEMERA_NEW_JOURNAL': 'true'}):
        result = run_in_process('workspace_info', {})
    assert result['journal_path'] == journal_path and result['workspaces'] == []
    assert os.environ.get('EPHEMERA_JOURNAL') != journal_path
    assert 'EPHEMERA_NEW_JOURNAL' not in os.environ


def test_check_mode_on_a_controller_with_no_journal_writes_nothing(journal_path):
    connection = {'journal_path': journal_path, 'api_host': 'pve.invalid', 'api_token_id': 'u@pve!t',
                  'api_token_secret': 'token-secret-value'}
    # A run that expects history refuses a journal that is not there, in check mode too ...
    for module, args in (('workspace_reconcile', {}), ('workspace_destroy', dict(vmid=117, confirm_orphan=True))):
        refused = run_in_process(module, dict(connection, **args), check_mode=True)
        assert refused['failed'] and 'No journal at %s, and this run expects one' % journal_path in refused['msg']
        assert 'ephemera_new_journal=true' in refused['msg']
    # ... unless told that this is the controller's first run.
    connection['new_journal'] = True
    reconciled = run_in_process('workspace_reconcile', connection, check_mode=True)
    assert not reconciled.get('failed') and not reconciled['changed'], reconciled
    assert 'nothing to reconcile' in reconciled['report'][0]
    orphan = run_in_process('workspace_destroy', dict(connection, vmid=117, confirm_orphan=True), check_mode=True)
    assert not orphan.get('failed') and not orphan['changed'] and 'nothing would be destroyed' in orphan['msg']
    assert not os.path.exists(os.path.dirname(journal_path))


def test_options_a_task_lacks_come_from_ephemera_variables_and_the_task_wins():
    variables = {'ephemera_journal_path': '{{ base }}/journal.sqlite', 'ephemera_api_host': 'pve.example.com',
                 'ephemera_template_vmid': 9000, 'ephemera_cores': 4, 'ephemera_name': 'never',
                 'ephemera_step': 'clone', 'ephemera_resume': True, 'ephemera_discard_unsaved_work': True}

    def template(value):
        return value.replace('{{ base }}', '/srv/ephemera') if isinstance(value, str) else value

    args = from_variables('workspace_create', {'name': 'w1', 'step': 'request', 'cores': 8}, variables, template)
    assert args['journal_path'] == '/srv/ephemera/journal.sqlite' and args['api_host'] == 'pve.example.com'
    assert args['template'] == 9000 and args['cores'] == 8
    # What one task acts on or decides never comes from the inventory.
    assert args['name'] == 'w1' and args['step'] == 'request' and 'resume' not in args
    destroy = from_variables('workspace_destroy', {'name': 'w1', 'step': 'guard'}, variables, template)
    assert 'discard_unsaved_work' not in destroy and destroy['journal_path'] == '/srv/ephemera/journal.sqlite'


# An inventory that serves Proxmox VE and AWS hosts: the AWS variable is a template only AWS hosts can render.
MIXED = {'ephemera_api_host': 'pve.example.com', 'ephemera_aws_region': '{{ aws_only }}',
         'ephemera_hetzner_networks': {'not': 'a list'}, 'ephemera_journal_path': '/srv/journal.sqlite'}


def rendered(value):
    if value == '{{ aws_only }}':
        raise AssertionError('templated a variable of a provider the task does not use')
    return value


def test_options_of_providers_a_task_does_not_use_are_not_taken_from_variables():
    args = from_variables('workspace_create', {'name': 'w1', 'step': 'request'}, MIXED, rendered, {})
    assert args['api_host'] == 'pve.example.com' and args['journal_path'] == '/srv/journal.sqlite'
    assert 'aws_region' not in args and 'hetzner_networks' not in args
    # The task's own arguments are the task's: given, they are validated whatever the provider.
    args = from_variables('workspace_create', {'name': 'w1', 'aws_region': 'eu-west-1'}, MIXED, rendered, {})
    assert args['aws_region'] == 'eu-west-1'


def test_the_provider_a_task_uses_is_its_option_its_variable_or_its_environment():
    aws = dict(MIXED, ephemera_aws_region='eu-west-1')
    for args, variables, environ in (({'provider': 'aws'}, aws, {}), ({}, dict(aws, ephemera_provider='aws'), {}),
                                     ({}, aws, {'EPHEMERA_PROVIDER': 'aws'})):
        got = from_variables('workspace_destroy', dict(args, name='w1'), variables, rendered, environ)
        assert got['aws_region'] == 'eu-west-1' and 'api_host' not in got and 'hetzner_networks' not in got, got
    # A provider that is none is left to the module, which names the providers there are.
    got = from_variables('workspace_destroy', {'name': 'w1', 'provider': 'nimbus'}, aws, rendered, {})
    assert got['aws_region'] == 'eu-west-1' and got['api_host'] == 'pve.example.com'


def test_a_sweep_of_the_whole_fleet_takes_every_providers_variables():
    aws = dict(MIXED, ephemera_aws_region='eu-west-1')
    swept = from_variables('workspace_expire', {'fleet': True}, aws, rendered, {})
    assert swept['aws_region'] == 'eu-west-1' and swept['api_host'] == 'pve.example.com'
    assert swept['hetzner_networks'] == {'not': 'a list'}
    one = from_variables('workspace_expire', {'fleet': 'false'}, aws, rendered, {})
    assert 'aws_region' not in one and one['api_host'] == 'pve.example.com'


def test_a_deleting_sweep_is_never_applied_by_an_inventory_variable():
    variables = {'ephemera_apply': True, 'ephemera_pool': 'workspaces'}
    args = from_variables('workspace_cleanup', {}, variables, lambda value: value)
    assert 'apply' not in args and args['pool'] == 'workspaces'


PRELOAD = '''
import sys
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import MODULES, InProcessAction
wanted = [MODULES + 'workspace_destroy', 'ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy',
          'ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.provider', 'requests',
          'proxmoxer']
before = [name for name in wanted if name in sys.modules]


class ActionModule(InProcessAction):
    MODULE = 'workspace_destroy'


after = [name for name in wanted if name in sys.modules]
clouds = [name for name in ('boto3', 'hcloud', 'googleapiclient', 'google.cloud.compute_v1', 'azure.mgmt.compute')
          if name in sys.modules]
print(len(before), len(after) == len(wanted), clouds)
'''


def fresh_interpreter(code, env):
    """Run ``code`` in a new interpreter with ``env``: the finished process, its output and errors captured."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, check=True,
                          env=env)


def test_defining_an_action_plugin_loads_its_module_and_the_default_provider_once_before_any_fork():
    # In a fresh interpreter: Ansible's strategy defines the action plugin's class in ansible-playbook's own
    # process, so what the class definition imports every forked worker inherits. No cloud SDK is among it.
    env = {k: v for k, v in os.environ.items() if k not in ('EPHEMERA_PRELOAD', 'EPHEMERA_PROVIDER')}
    done = fresh_interpreter(PRELOAD, env)
    assert done.stdout.split() == ['0', 'True', '[]'], done.stdout + done.stderr


def test_the_cloud_sdks_that_ephemera_preload_names_are_loaded_before_the_fork_too():
    done = fresh_interpreter(PRELOAD, dict(os.environ, EPHEMERA_PRELOAD='gcp, Azure,nothing', EPHEMERA_PROVIDER='hetzner'))
    assert done.stdout.split()[:2] == ['0', 'True'], done.stdout + done.stderr
    assert "'google.cloud.compute_v1'" in done.stdout and "'azure.mgmt.compute'" in done.stdout
    assert "'hcloud'" in done.stdout and "'boto3'" not in done.stdout


FREEZE = '''
import gc, os, resource
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import InProcessAction
before = gc.get_freeze_count()

class ActionModule(InProcessAction):
    MODULE = 'workspace_info'

frozen = gc.get_freeze_count()
# A forked worker's full collection: does it write into what it inherited (its pages copied one by one)?
pid = os.fork()
if pid == 0:
    gc.collect()
    os._exit(0)
os.waitpid(pid, 0)
print(before, frozen > 1000, resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt)
'''


def test_defining_an_action_plugin_takes_what_the_run_holds_out_of_the_garbage_collector_s_sight():
    # The objects a run's main process holds when it forks its workers live as long as the run: frozen, a worker's
    # collections no longer walk them, which wrote into each of them and so copied the parent's pages.
    def faults(env):
        done = fresh_interpreter(FREEZE, env)
        before, frozen, minflt = done.stdout.split()
        assert before == '0', done.stdout + done.stderr
        return frozen, int(minflt)

    env = {k: v for k, v in os.environ.items() if k != 'EPHEMERA_NO_FREEZE'}
    frozen, copied = faults(env)
    kept, copied_without = faults(dict(env, EPHEMERA_NO_FREEZE='1'))
    assert (frozen, kept) == ('True', 'False')
    # The child's page faults: far fewer when its inherited objects are frozen.
    assert copied * 2 < copied_without, (copied, copied_without)


def test_a_variable_several_options_are_made_of_is_rendered_once_for_the_task(monkeypatch):
    import jinja2  # pylint: disable=import-outside-toplevel
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar, trust_as_template  # pylint: disable=import-outside-toplevel
    from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import sharing_templar  # pylint: disable=import-outside-toplevel
    compiled = []
    plain_compile = jinja2.Environment.compile

    def counted(self, source, *args, **kwargs):
        compiled.append(source)
        return plain_compile(self, source, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, 'compile', counted)
    # As the try-out inventory's localpve (a file lookup parsed as JSON) that every option's variable reads.
    variables = {k: trust_as_template(v) for k, v in {
        'place': "{{ {'api': 'pve.example.com', 'port': 2222, 'root': '/g'} }}",
        'ephemera_api_host': '{{ place.api }}', 'ephemera_ssh_port': '{{ place.port }}',
        'ephemera_guest_root': '{{ place.root }}/{vmid}'}.items()}
    templar = Templar(loader=DataLoader(), variables=variables)
    args = from_variables('workspace_create', {'name': 'w1', 'step': 'clone'}, variables,
                          sharing_templar(templar, variables).template)
    assert (args['api_host'], args['ssh_port'], args['guest_root']) == ('pve.example.com', 2222, '/g/{vmid}')
    shared = len(compiled)
    del compiled[:]
    plain = from_variables('workspace_create', {'name': 'w1', 'step': 'clone'}, variables, templar.template)
    assert plain == args
    # place once, then each option's own: against place once for each option.
    assert (shared, len(compiled)) == (4, 6), compiled
