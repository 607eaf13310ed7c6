"""Request text is untrusted (an AWX survey, a person's words): a token in the repository URL, a purpose the agent
would read as an option, a checkout path whose directory is a system one, an agent user that would hold the
controller's login to the guest. Each is refused at the request, before anything is recorded or cloned.
docs/internals/security.md, findings 8, 10 and 13, and "The agent is a user of its own"."""

import os

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows import preflight
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    PURPOSE_MAX,
    CreateError,
    CreateFlow,
    validate_agent_user,
    validate_checkout_path,
    validate_purpose,
    validate_repo,
)

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure.provider import AzureProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider

from flowsite import SECRET

TOKEN = 'ghp_Z9yX8wV7uT6sR5qP4oN3mL2kJ1'


@pytest.mark.parametrize('url', [
    'https://%s@git.example.com/team/app.git' % TOKEN,
    'https://x-access-token:%s@git.example.com/team/app.git' % TOKEN,
    'http://%s@git.example.com/app.git' % TOKEN,
    'https://oauth2:%s@git.example.com:8443/app' % TOKEN,
    'git://%s@git.example.com/app.git' % TOKEN,
    'https://user@git.example.com/app.git',
])
def test_a_login_in_an_http_url_is_refused_and_never_repeated(url):
    with pytest.raises(CreateError) as refused:
        validate_repo(url)
    message = str(refused.value)
    assert 'git_token' in message and TOKEN not in message and 'user@' not in message
    assert 'git.example.com' in message
    with pytest.raises(preflight.RepositoryRefused) as probed:
        preflight.probe_repository(url, 'main', timeout=5)
    assert TOKEN not in str(probed.value)


@pytest.mark.parametrize('url', ['https://git.example.com/app.git', 'ssh://git@git.example.com/app.git',
                                 'git@git.example.com:team/app.git', '/srv/git/app.git', 'file:///srv/git/app.git'])
def test_urls_without_a_login_and_ssh_users_are_accepted(url):
    validate_repo(url)


@pytest.mark.parametrize('purpose', [
    '--dangerously-skip-permissions', '-p', '  --yolo do anything', '\t-x', 'a' * (PURPOSE_MAX + 1), 'fix\x00it', '  ',
])
def test_a_purpose_the_agent_would_read_as_an_option_or_that_is_too_long_is_refused(purpose):
    with pytest.raises(CreateError) as refused:
        validate_purpose(purpose)
    assert refused.value.details['step'] == 'request'


@pytest.mark.parametrize('purpose', ['Fix the login - then the logout', 'a' * PURPOSE_MAX, 'Résumé: "quote" & $HOME'])
def test_ordinary_purposes_are_accepted(purpose):
    validate_purpose(purpose)


@pytest.mark.parametrize('path', [
    '/repo', '/', '/etc/app', '/usr/local/src/app', '/workspace/../etc/app', '/workspace/./repo', '/workspace/repo/',
    'workspace/repo', '/home/repo', '/tmp/repo', '/var/lib/ephemera/repo', '/root/repo', '/proc/1/repo',
    '/workspace/re po', '/workspace/$(id)', '//workspace/repo',
])
def test_a_checkout_path_whose_directory_is_a_system_one_is_refused(path):
    with pytest.raises(CreateError) as refused:
        validate_checkout_path(path)
    assert 'checkout_path' in str(refused.value)


@pytest.mark.parametrize('path', ['/workspace/repo', '/home/agent/repo', '/srv/work/app', '/opt/work/app.git'])
def test_ordinary_checkout_paths_are_accepted(path):
    validate_checkout_path(path)


@pytest.mark.parametrize('changes, said', [
    ({'repo': 'https://%s@git.example.com/app.git' % TOKEN}, 'git_token'),
    ({'purpose': '--dangerously-skip-permissions fix it'}, 'starts with "-"'),
    ({'purpose': 'x' * (PURPOSE_MAX + 1)}, 'at most %d' % PURPOSE_MAX),
    ({'checkout_path': '/repo'}, 'must not be "/" or a system directory'),
    ({'agent_user': 'root'}, 'agent_user root is refused'),
    ({'agent_user': 'deploy', 'ssh_user': 'deploy'}, "would hold the controller's own login"),
    ({'agent_user': 'agent', 'agent_user_is_ssh_user': True}, "is not ssh_user 'root'"),
    ({'agent_user': 'Agent;id'}, 'is not a user name'),
])
def test_the_request_step_refuses_before_anything_is_recorded_or_cloned(site, changes, said):
    flow = CreateFlow(site.journal, site.provider, site.create_params('s-req', **changes), SECRET)
    with pytest.raises(CreateError) as refused:
        flow.run('request')
    assert said in str(refused.value) and TOKEN not in str(refused.value)
    assert site.journal.get_workspace('s-req') is None and site.changes_sent() == []
    site.journal.close()
    for suffix in ('', '-wal'):
        if os.path.exists(site.journal_path + suffix):
            with open(site.journal_path + suffix, 'rb') as journal:
                assert TOKEN.encode() not in journal.read()


@pytest.mark.parametrize('agent_user, ssh_user, logins, said', [
    ('root', 'root', {}, 'agent_user root is refused'),
    ('root', 'admin', {}, 'agent_user root is refused'),
    ('admin', 'admin', {}, "would hold the controller's own login"),
    ('ephemera', 'root', {'azure_admin_username': 'ephemera'}, 'the user azure_admin_username makes'),
    ('deploy', 'root', {'gcp_ssh_user': 'deploy'}, 'the user gcp_ssh_user makes'),
    ('', 'root', {}, 'is not a user name'),
    ('-o', 'root', {}, 'is not a user name'),
])
def test_an_agent_user_that_is_root_or_holds_the_controllers_login_is_refused(agent_user, ssh_user, logins, said):
    with pytest.raises(CreateError) as refused:
        validate_agent_user(agent_user, ssh_user, logins=logins)
    message = str(refused.value)
    assert said in message and 'unprivileged user of its own' in message, message


def test_an_agent_of_its_own_and_the_shared_mode_where_asked_for_are_accepted():
    validate_agent_user('agent', 'root')
    validate_agent_user('agent', 'root', logins={'azure_admin_username': 'ephemera'})
    # The try-out host tier: every guest is this machine's SSH user, and says so.
    validate_agent_user('root', 'root', shared=True)
    validate_agent_user('dev', 'dev', shared=True)


def test_the_providers_name_the_users_they_make_for_the_controllers_login():
    assert AzureProvider(None, launch={'admin_username': 'ephemera'}).login_users() == {
        'azure_admin_username': 'ephemera'}
    assert GcpProvider(None, launch={'ssh_user': 'root'}).login_users() == {'gcp_ssh_user': 'root'}


def test_a_run_that_logs_in_as_the_agent_is_refused_at_the_bootstrap(site):
    """The SSH user is a setting of each run: a later run logging in as the recorded agent user is refused before
    it reaches the guest."""
    assert CreateFlow(site.journal, site.provider, site.create_params('s-boot'), SECRET).run('request').changed
    flow = CreateFlow(site.journal, site.provider, site.create_params('s-boot', ssh_user='agent'), SECRET)
    with pytest.raises(CreateError) as refused:
        flow.run('bootstrap')
    assert "would hold the controller's own login" in str(refused.value)
    assert 'bootstrap' not in site.journal.get_workspace('s-boot')['progress']
