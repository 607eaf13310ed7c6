"""The template_build playbook on the debian guest tier: a real build, creates from it, failures, switches, folding.

One cluster process (`up --guests debian`, time scale 0) and one journal for the module. The first build makes
version 1 of template "workspace" from the seed template (jq and Node.js from Debian, one npm package installed as
the agent user) and runs its smoke create; the tests after it build on that: a workspace from the template name,
failed builds, refusals, version 2 and a switch back, two builds requested at once.
"""

import json
import os
import secrets

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.template import SMOKE_REPO
from tests.integration.playbooks import running_cluster
from tests.integration.create.createrun import Controller, request_vars
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.ansible_run import wait_until
from tests.localpve import ssh, ssh_run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(ROOT, 'playbooks', 'template_build.yml')
CREATE = os.path.join(ROOT, 'playbooks', 'create.yml')
DESTROY = os.path.join(ROOT, 'playbooks', 'destroy.yml')
GIT_USER = 'ci-bot'
NAME = 'workspace'
# What installs here: a Debian package over the mirror, and a tool the agent makes in its own ~/.local/bin (an agent
# command, run as the agent in a login shell). The default toolset, npm packages as the agent included, is built for
# real by test_toolset.py.
GREETER = "printf '#!/bin/sh\\necho greeter 1.0\\n' > ~/.local/bin/greeter && chmod 755 ~/.local/bin/greeter"
SMALL = {'ephemera_packages': ['jq'], 'ephemera_npm_packages': [], 'ephemera_agent_commands': [GREETER],
         'ephemera_tools': ['jq', {'name': 'greeter', 'command': 'greeter --version'}]}
# A build with nothing to install: the steps around provisioning, quickly.
EMPTY = {'ephemera_packages': [], 'ephemera_npm_packages': [], 'ephemera_agent_commands': [],
         'ephemera_tools': ['git', 'python3']}


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp('template-build'), guests='debian') as client:
        yield client


@pytest.fixture(scope='module')
def site(cluster, tmp_path_factory):
    repo = Repo(str(tmp_path_factory.mktemp('repo')))
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)
    ctl = Controller(cluster, tmp_path_factory.mktemp('controller'))
    ctl.repo_url, ctl.token = server.url_of(repo.bare), token
    ctl.smoke = {'repo': ctl.repo_url, 'ref': 'main'}
    try:
        yield ctl
    finally:
        ctl.stop()
        server.stop()


@pytest.fixture(scope='module')
def first(site):
    """Version 1 from the seed template, with its smoke create."""
    run = build(site, source=int(site.info['template_vmid']), smoke=True, **SMALL)
    assert run.ok, run.explain()
    return run


def build(ctl, timeout=600, smoke=False, **extra):
    """A build of template NAME: with ``smoke`` its smoke create from the test's repository, with ``smoke='default'``
    the default smoke create, else none (turned off as documented: an empty template_build_smoke)."""
    extra = dict({'template': NAME}, **extra)
    if smoke:
        extra.update(ephemera_agents={'claude-code': ['sh', '-c', 'sleep 300']})
    if smoke is True:
        extra.update(template_build_smoke=ctl.smoke, git_token=ctl.token, git_username=GIT_USER)
    elif not smoke:
        extra.setdefault('template_build_smoke', {})
    return ctl.start(extra, playbook=BUILD).wait(timeout, fail=False)


def every_guest(ctl):
    """{vmid: /cluster/resources entry} of every container, templates too."""
    return {int(g['vmid']): g for g in ctl.api.cluster.resources.get(type='vm')}


def records(ctl):
    with ctl.journal() as journal:
        return journal.template(NAME), journal.template_versions(NAME)


def inside(ctl, address, command):
    client = ssh(ctl.info, address, timeout=5)
    try:
        status, out, err = ssh_run(client, command)
    finally:
        client.close()
    return status, out.decode(), err.decode()


def files_of(ctl, vmid):
    return os.path.join(ctl.info['state_dir'], 'guests', str(vmid), 'root')


# ---------------------------------------------------------------------------------------------- the first build

def test_a_build_makes_a_new_version_whose_tools_answer_as_the_agent(site, first):
    pointer, versions = records(site)
    assert (pointer['current'], pointer['previous']) == (1, None)
    version = versions[0]
    assert version['state'] == 'built' and version['errors'] == []
    assert version['source'] == {'vmid': int(site.info['template_vmid']), 'node': site.info['template_node']}
    assert version['tools']['jq'].startswith('jq-1.')
    assert version['tools']['greeter'] == 'greeter 1.0'
    vmid = version['resource_id']
    guest = every_guest(site)[vmid]
    assert guest['template'] == 1 and guest['pool'] == site.info['pool']
    assert site.ours(version['workspace']) == [] and site.marker_verdict(vmid, version['workspace']) == 'verified'
    # The seed template was cloned, never changed.
    assert vmid != int(site.info['template_vmid'])
    root = files_of(site, vmid)
    greeter = os.path.join(root, 'home', 'agent', '.local', 'bin', 'greeter')
    assert os.path.isfile(greeter) and os.lstat(greeter).st_uid == 1000
    assert not os.path.exists(os.path.join(root, 'root', '.local'))


def test_the_template_carries_nothing_a_workspace_must_not_inherit(site, first):
    vmid = records(site)[1][0]['resource_id']
    root = files_of(site, vmid)
    assert [n for n in os.listdir(os.path.join(root, 'etc', 'ssh')) if n.startswith('ssh_host_')] == []
    assert os.path.getsize(os.path.join(root, 'etc', 'machine-id')) == 0
    assert not os.path.exists(os.path.join(root, 'workspace', 'repo'))
    assert not os.path.exists(os.path.join(root, 'var', 'lib', 'ephemera'))
    for history in ('root/.bash_history', 'home/agent/.bash_history', 'home/agent/.npm'):
        assert not os.path.exists(os.path.join(root, history)), history
    assert [n for n in os.listdir(os.path.join(root, 'var', 'lib', 'apt', 'lists')) if n != 'partial' and n != 'lock'] == []
    assert [n for n in os.listdir(os.path.join(root, 'var', 'cache', 'apt', 'archives')) if n.endswith('.deb')] == []
    unit = os.path.join(root, 'etc', 'systemd', 'system', 'ephemera-ssh-host-keys.service')
    assert 'ssh-keygen -A' in open(unit).read()
    # Converted: its files are frozen.
    assert json.load(open(os.path.join(site.info['state_dir'], 'guests', str(vmid), 'stack.json')))['frozen']


def test_the_smoke_create_ran_from_the_new_version_as_the_builds_child(site, first):
    smoke = site.workspace('smoke-' + NAME)
    assert smoke['status'] == 'destroyed'
    assert smoke['params']['template_version'] == {'name': NAME, 'version': 1}
    assert smoke['params']['template_vmid'] == records(site)[1][0]['resource_id']
    assert 'ready' in [e['action'] for e in site.events('smoke-' + NAME)]
    with site.journal() as journal:
        entries = Queue(journal).entries(recent=100)
    build_entry = [e for e in entries if e['kind'] == 'template_build'][0]
    children = sorted((e['kind'], e['state']) for e in entries if e['parent_id'] == build_entry['id'])
    assert build_entry['state'] == 'done'
    assert children == [('create', 'done'), ('destroy', 'done')]
    assert site.ours('smoke-' + NAME) == []


# ---------------------------------------------------------------------------------------------- creates from it

def test_a_create_by_template_name_runs_the_agent_as_agent_with_the_tools_on_its_path(site, first):
    agent = ['sh', '-c', 'echo "greeter at $(command -v greeter)"; id -un; sleep 300']
    request = request_vars(site.repo_url, 'from-name', git_token=site.token, git_username=GIT_USER,
                           ephemera_template=NAME, ephemera_agents={'worker': agent})
    run = site.create(request)
    assert run.ok, run.explain()
    ws = site.workspace('from-name')
    assert ws['status'] == 'ready'
    assert ws['params']['template'] == NAME and ws['params']['template_version'] == {'name': NAME, 'version': 1}
    status, out, err = inside(site, ws['address'], 'python3 /opt/ephemera/agent_runner.py call --socket '
                                                   '/var/lib/ephemera/runner/runner.sock \'{"op": "status"}\'')
    assert status == 0, err
    log = json.loads(out)['log_tail']
    assert log[-2:] == ['greeter at /home/agent/.local/bin/greeter', 'agent'], log
    done = site.start({'workspace': 'from-name'}, playbook=DESTROY).wait(300, fail=False)
    assert done.ok, done.explain()


def test_an_agent_whose_cli_the_template_did_not_verify_is_refused_before_anything_is_allocated(site, first):
    """Version 1 verified jq and greeter: the default agent, claude-code, has no claude there."""
    before = every_guest(site)
    request = request_vars(site.repo_url, 'no-claude', git_token=site.token, git_username=GIT_USER,
                           ephemera_template=NAME, agent='claude-code')
    request.pop('ephemera_agents')
    run = site.start(request).wait(300, fail=False)
    assert not run.ok
    assert 'Template workspace version 1 has no claude: its build verified greeter, jq.' in run.output
    assert site.workspace('no-claude') is None and every_guest(site) == before


# ---------------------------------------------------------------------------------------------- failures

def _assert_nothing_behind(site, before_guests, before_pointer, failed_version):
    pointer, versions = records(site)
    assert pointer == before_pointer
    version = [v for v in versions if v['version'] == failed_version][0]
    assert version['state'] == 'failed' and version['errors'], version
    assert every_guest(site).keys() == before_guests.keys()
    assert site.workspace(version['workspace'])['status'] == 'destroyed'
    return version


@pytest.mark.parametrize('fault', ['missing_package', 'clone_refused', 'start_fails_twice'])
def test_a_failed_build_leaves_the_pointer_and_no_container(site, cluster, first, fault):
    before_guests, before_pointer = every_guest(site), records(site)[0]
    extra = dict(EMPTY)
    if fault == 'missing_package':
        extra['ephemera_packages'] = ['ephemera-no-such-package']
    elif fault == 'clone_refused':
        cluster.pve_fail('POST', '/nodes/{node}/lxc/{vmid}/clone', status=500,
                         message='clone failed: no space left on device', times=1)
    else:
        cluster.pve_fail('POST', '/nodes/{node}/lxc/{vmid}/status/start', status=500,
                         message='startup for container failed', times=2)
    try:
        run = build(site, **extra)
    finally:
        cluster.pve_clear()
    assert not run.ok
    message = run.failure()[1]['msg']
    assert 'The build was aborted' in message and 'the template still points where it did' in message
    version = _assert_nothing_behind(site, before_guests, before_pointer, records(site)[1][-1]['version'])
    expected = {'missing_package': 'ephemera-no-such-package', 'clone_refused': 'no space left on device',
                'start_fails_twice': 'did not start, twice'}[fault]
    assert expected in ' '.join(version['errors'])
    if fault == 'start_fails_twice':
        assert 'First start' in version['errors'][0] and 'Start after a stop' in version['errors'][0]


def test_a_lost_clone_answer_is_adopted_and_the_build_finishes(site, cluster, first):
    before = set(every_guest(site))
    cluster.proxy_add('drop-response', 'POST', '/nodes/*/lxc/*/clone', times=1)
    try:
        run = build(site, **EMPTY)
    finally:
        cluster.proxy_clear()
    assert run.ok, run.explain()
    pointer, versions = records(site)
    latest = versions[-1]
    assert pointer['current'] == latest['version'] and latest['state'] == 'built'
    # Exactly one new container: the adopted candidate, now the template.
    assert set(every_guest(site)) - before == {latest['resource_id']}
    assert 'adopted' in [e['action'] for e in site.events(latest['workspace'])]
    # Back to version 1 for the tests after this one.
    back = build(site, version=1)
    assert back.ok, back.explain()


def test_a_start_that_fails_once_is_retried_after_a_stop(site, cluster, first):
    cluster.pve_fail('POST', '/nodes/{node}/lxc/{vmid}/status/start', status=500,
                     message='startup for container failed', times=1)
    try:
        run = build(site, **EMPTY)
    finally:
        cluster.pve_clear()
    assert run.ok, run.explain()
    latest = records(site)[1][-1]
    ws = site.workspace(latest['workspace'])
    assert 'startup for container failed' in ws['facts']['cold_start_retry']
    assert 'start_failed' in [e['action'] for e in site.events(latest['workspace'])]
    back = build(site, version=1)
    assert back.ok, back.explain()


# ---------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize('case', ['into_the_source', 'into_a_template', 'unknown_template_name', 'unknown_source',
                                  'bad_package_name', 'missing_storage', 'unknown_version'])
def test_bad_requests_are_refused_with_nothing_recorded(site, first, case):
    seed = int(site.info['template_vmid'])
    v1 = [v for v in records(site)[1] if v['version'] == 1][0]['resource_id']
    extra, expected = {
        'into_the_source': ({'source': seed, 'vmid': seed}, 'never changes a template in place'),
        'into_a_template': ({'vmid': v1}, 'a template'),
        'unknown_template_name': ({'source': 'nosuch-template'}, 'has no built version'),
        'unknown_source': ({'source': 4242}, 'does not exist'),
        'bad_package_name': ({'ephemera_packages': ['Not A Package']}, 'not Debian package names'),
        'missing_storage': ({'ephemera_storage': 'no-such-storage'}, "no storage 'no-such-storage'"),
        'unknown_version': ({'version': 99}, 'has no built version 99'),
    }[case]
    before = site.journal_dump()
    guests = every_guest(site)
    run = build(site, **dict(EMPTY, **extra))
    assert not run.ok
    assert expected in run.failure()[1]['msg'], run.failure()[1]['msg']
    assert every_guest(site) == guests
    # Nothing recorded: no version, no queue entry, no event.
    assert site.journal_dump() == before


def test_a_container_that_is_not_a_template_is_not_a_source(site, cluster, first):
    made = cluster.foreign_create(pool=site.info['pool'], hostname='not-a-template')
    vmid = int(made['vmid'])
    before = site.journal_dump()
    config = site.config(vmid)
    run = build(site, source=vmid, **EMPTY)
    assert not run.ok and 'is not an LXC template' in run.failure()[1]['msg'], run.failure()[1]['msg']
    assert site.journal_dump() == before
    assert site.config(vmid) == config


# ---------------------------------------------------------------------------------------------- versions

def warm_member(ctl, member, version, claimed_by=None):
    """A pool member record of template NAME made from ``version`` (warm, or claimed by ``claimed_by``)."""
    pool = pools.validate_pool({'name': 'wsp', 'location': 'pve1', 'template': NAME, 'size': 4})
    with ctl.journal() as journal:
        pools.mark_warm(journal, pools.begin_member(journal, pool, member, version=version))
        if claimed_by:
            pools.claim_member(journal, 'wsp', claimed_by)


def member_states(ctl):
    with ctl.journal() as journal:
        return {m['member']: m['state'] for m in pools.members(journal, 'wsp')}


def test_a_build_from_the_current_version_then_a_switch_back(site, first):
    warm_member(site, 'pool-wsp-taken', 1, claimed_by='ws-from-pool')
    warm_member(site, 'pool-wsp-v1', 1)
    run = build(site, **EMPTY)
    assert run.ok, run.explain()
    pointer, versions = records(site)
    new = versions[-1]
    assert pointer['current'] == new['version'] and pointer['previous'] == 1
    # The switch drained the pool of the old version: its warm member is released, the claimed one is a workspace.
    assert member_states(site) == {'pool-wsp-taken': 'claimed', 'pool-wsp-v1': 'released'}
    warm_member(site, 'pool-wsp-v2', new['version'])
    assert new['source']['name'] == NAME and new['source']['version'] == 1
    back = build(site, version=1)
    assert back.ok, back.explain()
    pointer = records(site)[0]
    assert (pointer['current'], pointer['previous']) == (1, new['version'])
    assert member_states(site)['pool-wsp-v2'] == 'released'
    # Both versions are kept as templates; nothing was removed.
    guests = every_guest(site)
    assert guests[new['resource_id']]['template'] == 1
    assert guests[[v for v in versions if v['version'] == 1][0]['resource_id']]['template'] == 1
    again = build(site, version=1)
    assert again.ok and not again.changed, again.explain()


def template_entries(site):
    with site.journal() as journal:
        return sorted(Queue(journal).entries(target=NAME, target_type='template', recent=100), key=lambda e: e['id'])


def test_two_builds_requested_at_once_fold_into_one(site, first):
    """While a build runs, two identical requests queue behind it as one entry, run once for both."""
    before = len(records(site)[1])
    extra = dict(EMPTY, template=NAME, template_build_smoke={})
    running = site.start(extra, playbook=BUILD)
    wait_until(lambda: any(e['state'] == 'running' for e in template_entries(site)), 'the first build to run',
               timeout=120, runs=[running])
    waiting = [site.start(dict(extra, ephemera_tools=['git']), playbook=BUILD) for dummy in range(2)]
    done = [run.wait(600, fail=False) for run in [running] + waiting]
    assert all(run.ok for run in done), [run.explain() for run in done]
    pointer, versions = records(site)
    # The running build, then one build for the two requests that queued behind it.
    assert len(versions) == before + 2
    entries = template_entries(site)
    folded = entries[-1]
    assert folded['state'] == 'done' and len(folded['requested_by']) == 2, folded
    reports = [run.task('Report template %s' % NAME)['msg'] for run in done[1:]]
    assert sum('this request joined the queued one' in text for text in reports) == 1, reports
    assert build(site, version=1).ok


# ---------------------------------------------------------------------------------------------- the smoke create

def test_a_build_runs_its_smoke_create_by_default_from_the_repository_the_template_carries(site):
    """No template_build_smoke given: the build's smoke create runs anyway, checking out the repository that
    provisioning put in the template (no network, no credentials); an empty template_build_smoke turns it off."""
    run = build(site, template='smoked', source=int(site.info['template_vmid']), smoke='default', **EMPTY)
    assert run.ok, run.explain()
    with site.journal() as journal:
        version = journal.template_version('smoked', journal.template('smoked')['current'])
    assert os.path.isfile(os.path.join(files_of(site, version['resource_id']), SMOKE_REPO.lstrip('/'), 'HEAD'))
    smoke = site.workspace('smoke-smoked')
    assert smoke['status'] == 'destroyed' and smoke['repo'] == SMOKE_REPO and smoke['ref'] == 'main'
    assert smoke['params']['template_version'] == {'name': 'smoked', 'version': version['version']}
    assert {'ready', 'destroyed'} <= set(e['action'] for e in site.events('smoke-smoked'))
    assert site.ours('smoke-smoked') == []

    def children_of_builds():
        with site.journal() as journal:
            entries = Queue(journal).entries(target_type='template', target='smoked', recent=100)
            every = Queue(journal).entries(recent=200)
        return [sorted((e['kind'], e['state']) for e in every if e['parent_id'] == build_entry['id'])
                for build_entry in entries if build_entry['kind'] == 'template_build']
    assert children_of_builds() == [[('create', 'done'), ('destroy', 'done')]]
    said = [r for step, r in run.results() if step.startswith('Report template')]
    assert said and 'smoke create smoke-smoked reached ready and was destroyed' in said[0]['msg'], said

    # Turned off: the next build makes its version and no smoke create.
    before = site.workspace('smoke-smoked')
    off = build(site, template='smoked', **EMPTY)
    assert off.ok, off.explain()
    assert children_of_builds() == [[('create', 'done'), ('destroy', 'done')], []]
    assert site.workspace('smoke-smoked')['generation'] == before['generation']
