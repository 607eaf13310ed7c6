"""The playbooks' inputs, checked before anything is queued or recorded: a variable a playbook does not read but a
user types for one it does (-e template=NAME for ephemera_template) is refused with the playbook's own variables, a
missing input fails with one line naming it and an example command line, and a destroy of a name the journal does not
know fails with the names it does know (a destroyed one still succeeds as before:
tests/integration/destroy/test_destroy.py destroys twice on the try-out cluster). Each run leaves the journal as it was (or absent). Nothing here reaches a
cluster: the API host does not resolve, and every refusal comes before any API call."""

import os
import sqlite3

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.ansible_run import run_ansible
from tests.integration.playbooks import PLAYBOOKS

API = {'PROXMOX_HOST': 'pve.invalid', 'PROXMOX_TOKEN_ID': 'u@pve!t', 'PROXMOX_TOKEN_SECRET': 'token-secret-value'}
REQUEST = ('workspace=w1', 'repo=https://git.invalid/r.git', 'purpose=fix')


def play(name, journal, *extra):
    argv = ['ansible-playbook', os.path.join(PLAYBOOKS, name)]
    for value in extra:
        argv += ['-e', value]
    return run_ansible(argv, timeout=300, env=dict(API, EPHEMERA_JOURNAL=journal))


def seed(path):
    with Journal.open(path) as journal:
        for name in ('alpha', 'beta', 'gamma'):
            journal.create_workspace(name, provider='proxmox', location='pve1', status='ready', resource_id=101,
                                     desired_state='present')
        journal.create_workspace('gone', provider='proxmox', location='pve1', status='destroyed', resource_id=102,
                                 desired_state='destroyed')


def dump(path):
    connection = sqlite3.connect('file:%s?mode=ro' % path, uri=True)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def only_failure(run):
    assert not run.ok, run.explain()
    [message] = run.failed_messages()
    return message


@pytest.mark.parametrize('name, extra, mistaken, meant', [
    ('create.yml', REQUEST + ('template=nosuch',), 'template', 'ephemera_template'),
    ('create.yml', REQUEST + ('ttl_seconds=60',), 'ttl_seconds', 'ttl'),
    ('create.yml', REQUEST + ('node=pve2',), 'node', 'ephemera_node'),
    ('destroy.yml', ('workspace=alpha', 'force=true'), 'force', 'discard_unsaved_work'),
    ('heartbeat.yml', ('name=alpha',), 'name', 'workspace'),
    ('status.yml', ('workspace=alpha',), 'workspace', 'queue_target'),
    ('template_build.yml', ('name=workspace',), 'name', 'template'),
])
def test_a_mistaken_variable_is_refused_with_the_playbooks_own(tmp_path, name, extra, mistaken, meant):
    journal = str(tmp_path / 'journal.sqlite')
    seed(journal)
    before = dump(journal)
    message = only_failure(play(name, journal, *extra))
    assert message.startswith('The %s playbook does not read -e %s: did you mean %s?' % (
        name[:-len('.yml')], mistaken, meant)), message
    assert 'Its variables are ' in message and ', and the ephemera_<option> variables' in message, message
    assert dump(journal) == before


def test_a_create_from_a_misnamed_template_makes_no_journal(tmp_path):
    journal = str(tmp_path / 'journal.sqlite')
    message = only_failure(play('create.yml', journal, *REQUEST + ('template=nosuch',)))
    assert 'did you mean ephemera_template?' in message
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize('name, extra, missing, example', [
    ('heartbeat.yml', (), 'workspace', '-e workspace=NAME'),
    ('destroy.yml', (), 'workspace', '-e workspace=NAME'),
    ('archive.yml', (), 'workspace', '-e workspace=NAME'),
    ('brief.yml', ('{"message": "go on"}',), 'workspace', '-e workspace=NAME'),
    ('brief.yml', ('workspace=alpha',), 'message', '-e workspace=NAME'),
    ('create.yml', ('workspace=w1', 'purpose=fix'), 'repo', '-e \'{"workspace": "NAME", "repo": "URL"'),
    ('create.yml', ('workspace=w1', 'repo=https://git.invalid/r.git'), 'purpose', '"purpose": "Fix the login"}'),
    ('template_build.yml', (), 'template', '-e \'{"template": "workspace", "source": 9000}\''),
])
def test_a_missing_input_fails_first_with_one_line(tmp_path, name, extra, missing, example):
    journal = str(tmp_path / 'journal.sqlite')
    seed(journal)
    before = dump(journal)
    message = only_failure(play(name, journal, *extra))
    assert message.startswith('The %s playbook needs -e %s, e.g. ansible-playbook ephemera.workspaces.%s ' % (
        name[:-len('.yml')], missing, name[:-len('.yml')])), message
    assert example in message and '\n' not in message, message
    assert 'undefined' not in message
    assert dump(journal) == before


def test_a_destroy_of_an_unknown_name_fails_with_the_known_ones(tmp_path):
    journal = str(tmp_path / 'journal.sqlite')
    seed(journal)
    before = dump(journal)
    message = only_failure(play('destroy.yml', journal, 'workspace=alpah'))
    assert message == 'No workspace alpah in this journal (%s); known: alpha, beta, gamma, gone' % journal, message
    assert dump(journal) == before


def test_a_first_run_destroy_of_any_name_fails_listing_none(tmp_path):
    journal = str(tmp_path / 'journal.sqlite')
    message = only_failure(play('destroy.yml', journal, 'workspace=never-seen', 'ephemera_new_journal=true'))
    assert message == 'No workspace never-seen in this journal (%s); known: none' % journal, message
    assert os.listdir(str(tmp_path)) == []


AWX_SITE = ('ephemera_awx_project_url=https://git.invalid/workspaces.git', 'ephemera_awx_api_host=pve.invalid',
            'ephemera_awx_api_token_id=u@pve!t', 'ephemera_awx_api_token_secret=s', 'ephemera_awx_journal_url=x')


def test_awx_configure_names_a_missing_site_variable_before_any_awx_call(tmp_path):
    """Without the controller secret it fails with one line naming it, not with an undefined-variable error from
    the credential task (nor after the credential type was made: no AWX is reachable here either way)."""
    message = only_failure(play('awx_configure.yml', str(tmp_path / 'journal.sqlite'), *AWX_SITE))
    assert message == ('The awx_configure playbook needs -e ephemera_awx_controller_secret, e.g. ansible-playbook '
                       'ephemera.workspaces.awx_configure -e @awx-site.yml -e @awx-secrets.vault.yml '
                       '--ask-vault-pass'), message
    assert os.listdir(str(tmp_path)) == []


def test_awx_configure_refuses_a_mistaken_site_variable_with_its_own(tmp_path):
    message = only_failure(play('awx_configure.yml', str(tmp_path / 'journal.sqlite'),
                                *AWX_SITE + ('ephemera_awx_controller_secret=s', 'project_url=https://git.invalid/r')))
    assert message.startswith('The awx_configure playbook does not read -e project_url: did you mean '
                              'ephemera_awx_project_url? Its variables are ephemera_awx_project_url, '), message
    # It reads no ephemera_<option> variable of its own, so the message does not offer them.
    assert message.endswith('ephemera_awx_hetzner_token.') and 'ephemera_<option>' not in message, message


@pytest.mark.parametrize('given, said', [
    ((), "No provider's credentials: give those of each provider the site uses"),
    (('ephemera_awx_api_host=pve.invalid',), 'ephemera_awx_api_host is given without ephemera_awx_api_token_id'),
    (('{"ephemera_awx_aws": {"access_key_id": "AKIA"}}',), 'ephemera_awx_aws is {access_key_id: AKIA...'),
    (('{"ephemera_awx_gcp_key": "{\\"client_email\\": \\"e@p\\"}"}',),
     "ephemera_awx_gcp_key is a service account's JSON key"),
    (('{"ephemera_awx_azure": {"subscription_id": "s"}}',), 'ephemera_awx_azure is {subscription_id, tenant_id'),
])
def test_awx_configure_checks_each_providers_credentials_before_any_awx_call(tmp_path, given, said):
    site = ('ephemera_awx_project_url=https://git.invalid/workspaces.git', 'ephemera_awx_journal_url=x',
            'ephemera_awx_controller_secret=s')
    message = only_failure(play('awx_configure.yml', str(tmp_path / 'journal.sqlite'), *site + given))
    assert message.startswith(said), message
    assert os.listdir(str(tmp_path)) == []
