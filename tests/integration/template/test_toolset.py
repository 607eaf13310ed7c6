"""The default toolset, installed for real: a template build with the module's default lists on the debian guest tier.

`toolset_template` (module scope) builds version 1 of template "toolset" from the seed template through the shipped
playbook, with no list of its own: Debian's packages from the mirror, the agent CLIs from the npm registry and uv from
PyPI, all through the try-out cluster's package cache (tests/localpve/pkgcache.py). It yields a `Toolset`: the
controller (journal and runs), the cluster's control client, the template's name, version and VMID, and the tool
versions the build recorded. Tests of the agents themselves create workspaces from `toolset.name` with
`toolset.controller`.

On this machine (2 cores) a build of the default toolset took 96 s with an empty package cache
(LOCALPVE_PACKAGE_CACHE=<an empty directory>) and 90 s as the rebuild test's second build; the file takes about
3.5 minutes (docs/internals/templates.md, Figures). A template of the default toolset takes 4.3 GB: the cluster's container
files are removed when the module's tests are done.
"""

import collections
import contextlib
import os
import secrets
import shutil
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.modules.workspace_template import (
    DEFAULT_NPM,
    DEFAULT_PACKAGES,
    DEFAULT_TOOLS,
)
from tests.integration.agents.agentsite import AGENTS, AgentSite, edit_brief_archive_restore
from tests.integration.create.createrun import Controller
from tests.integration.create.gitserver import GitHttpServer, Repo
from tests.integration.playbooks import running_cluster
from tests.localpve import clone_workspace, ssh, ssh_run, system

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the debian guest tier needs root (mounts, namespaces)')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.path.join(ROOT, 'playbooks', 'template_build.yml')
NAME = 'toolset'
AGENT = 'agent'
AGENT_HOME = '/home/agent'
GIT_USER = 'ci-bot'
# A cold build downloads about 1.5 GB (Debian packages, the agent CLIs' native binaries).
BUILD_TIMEOUT = 2400
TOOL_NAMES = [t['name'] if isinstance(t, dict) else t for t in DEFAULT_TOOLS]

Toolset = collections.namedtuple('Toolset', 'controller cluster name version vmid tools seconds')


def build(ctl, name, timeout=BUILD_TIMEOUT, **extra):
    """A build of template ``name`` with the module's default lists; (finished run, seconds)."""
    started = time.monotonic()
    # The build alone: its smoke create (on by default) is test_build.py's.
    run = ctl.start(dict({'template': name, 'template_build_smoke': {}}, **extra), playbook=BUILD).wait(
        timeout, fail=False)
    return run, time.monotonic() - started


def current_version(ctl, name):
    with ctl.journal() as journal:
        return journal.template_version(name, journal.template(name)['current'])


def cache_stats(cluster):
    return cluster.status()['package_cache']


@pytest.fixture(scope='module')
def toolset_cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp('toolset')
    try:
        with running_cluster(state, guests='debian') as client:
            yield client
    finally:
        # The cluster is down (its roots unmounted): its templates' gigabytes go, its logs and journal stay.
        system.unmount_under(os.path.join(str(state), 'guests'))
        shutil.rmtree(os.path.join(str(state), 'guests', 'layers'), ignore_errors=True)


@pytest.fixture(scope='module')
def toolset_template(toolset_cluster, tmp_path_factory):
    """Version 1 of template "toolset", built from the seed template with the default lists."""
    ctl = Controller(toolset_cluster, tmp_path_factory.mktemp('toolset-controller'))
    try:
        run, seconds = build(ctl, NAME, source=int(ctl.info['template_vmid']))
        assert run.ok, run.explain()
        version = current_version(ctl, NAME)
        yield Toolset(ctl, toolset_cluster, NAME, version['version'], version['resource_id'], version['tools'],
                      seconds)
    finally:
        ctl.stop()


def files_of(toolset, *path):
    """A path in the template's files, as this machine sees them."""
    return os.path.join(toolset.controller.guest_root(toolset.vmid), *path)


@contextlib.contextmanager
def booted(toolset, hostname):
    """A linked clone of the template, started: (SSH client as root, the clone); stopped and removed after."""
    api = toolset.controller.api
    clone = clone_workspace(api, dict(toolset.controller.info, template_vmid=toolset.vmid), hostname=hostname)
    client = ssh(toolset.controller.info, clone.address, timeout=10)
    try:
        yield client, clone
    finally:
        client.close()
        container = api.nodes(clone.node).lxc(clone.vmid)
        for step in (container.status.stop.post, container.delete):
            upid = step()
            deadline = time.monotonic() + 60
            while api.nodes(clone.node).tasks(upid).status.get()['status'] != 'stopped':
                assert time.monotonic() < deadline, upid
                time.sleep(0.05)


def as_agent(client, command):
    status, out, err = ssh_run(client, 'runuser -l %s -c %s' % (AGENT, "'" + command.replace("'", "'\\''") + "'"))
    return status, out.decode(), err.decode()


# ---------------------------------------------------------------------------------------------- the build

def test_the_build_used_the_default_lists(toolset_template):
    with toolset_template.controller.journal() as journal:
        version = journal.template_version(NAME, toolset_template.version)
        spec = journal.get_workspace(version['workspace'])['params']['build']
    assert version['state'] == 'built' and version['errors'] == []
    assert spec['packages'] == DEFAULT_PACKAGES and spec['npm_packages'] == DEFAULT_NPM
    assert [t['name'] for t in spec['tools']] == TOOL_NAMES
    # Nothing fetched from outside Debian's mirror, the npm registry and PyPI.
    assert not any('curl' in command or 'https://' in command for command in spec['agent_commands'])


def test_every_default_tool_answered_as_the_agent(toolset_template):
    tools = toolset_template.tools
    assert sorted(tools) == sorted(TOOL_NAMES)
    expected = {
        'git': 'git version 2.', 'gh': 'gh version 2.', 'node': 'v18.', 'python3': 'Python 3.11.',
        'go': 'go version go1.', 'rustc': 'rustc 1.', 'cargo': 'cargo 1.', 'rg': 'ripgrep ', 'fdfind': 'fdfind ',
        'jq': 'jq-1.', 'uv': 'uv 0.', 'codex': 'codex-cli ',
    }
    for name, prefix in expected.items():
        assert tools[name].startswith(prefix), (name, tools[name])
    assert tools['claude'].endswith('(Claude Code)'), tools['claude']
    for name in ('pnpm', 'bun', 'opencode'):
        assert tools[name][:1].isdigit() and tools[name].count('.') == 2, (name, tools[name])
    assert ':@anthropic-ai/claude-agent-sdk@' in tools['claude-agent-sdk'], tools['claude-agent-sdk']


def test_the_agent_clis_are_the_agents_own_in_its_local_bin(toolset_template):
    local = files_of(toolset_template, 'home', AGENT, '.local')
    for name in ('claude', 'codex', 'opencode', 'uv'):
        link = os.path.join(local, 'bin', name)
        assert os.lstat(link).st_uid == 1000, name
        # npm links relative to ~/.local/bin, the uv command absolute (the guest's path): both into ~/.local.
        target = os.path.normpath(os.path.join('%s/.local/bin' % AGENT_HOME, os.readlink(link)))
        assert target.startswith('%s/.local/' % AGENT_HOME), (name, target)
        assert os.path.isfile(files_of(toolset_template, target.lstrip('/'))), (name, target)
    # Nothing of it installed as root.
    assert not os.path.exists(files_of(toolset_template, 'root', '.local'))
    assert not os.path.exists(files_of(toolset_template, 'usr', 'local', 'bin', 'claude'))
    # In a workspace of the template, a login of the agent finds them there and they run.
    with booted(toolset_template, 'toolset-path') as (client, dummy):
        status, out, err = as_agent(client, 'for t in claude codex opencode; do command -v $t; done; claude --version; '
                                            'codex --version; opencode --version')
    assert status == 0, err
    lines = out.splitlines()
    assert lines[:3] == ['%s/.local/bin/%s' % (AGENT_HOME, t) for t in ('claude', 'codex', 'opencode')], lines
    assert lines[3:] == [toolset_template.tools[t] for t in ('claude', 'codex', 'opencode')], lines


# ---------------------------------------------------------------------------------------------- no caches inside

def test_the_template_carries_no_package_cache(toolset_template):
    home = files_of(toolset_template, 'home', AGENT)
    for path in ('.npm', '.cache'):
        assert not os.path.exists(os.path.join(home, path)), path
    for path in (('root', '.npm'), ('root', '.cache')):
        assert not os.path.exists(files_of(toolset_template, *path)), path
    archives = files_of(toolset_template, 'var', 'cache', 'apt', 'archives')
    assert [n for n in os.listdir(archives) if n.endswith('.deb')] == []
    assert [n for n in os.listdir(archives + '/partial') if n.endswith('.deb')] == []
    # The caches were bind-mounted in the guest's own /run, which left nothing in its files.
    assert not os.path.exists(files_of(toolset_template, 'run', 'localpve'))
    # What the build downloaded went to the machine's package cache instead.
    cache = toolset_template.cluster.info['package_cache']['dir']
    assert os.listdir(os.path.join(cache, 'npm', '_cacache'))
    wheels = [n for top, dirs, files in os.walk(os.path.join(cache, 'pypi')) for n in files]
    assert any(n.startswith('uv-') and n.endswith('.whl') for n in wheels), wheels
    debs = [n for top, dirs, files in os.walk(os.path.join(cache, 'apt')) for n in files if n.endswith('.deb')]
    assert any(n.startswith('rustc_') for n in debs) and any(n.startswith('nodejs_') for n in debs)


def test_a_rebuild_downloads_no_debian_package_again(toolset_template):
    """A second template built from the seed with some of the same packages: every .deb comes from the cache, and
    its tools answer with the same versions (the cache serves what the mirror has). (A rebuild of the whole toolset
    took 90 s and 4.3 GB more; these packages show the same.)"""
    ctl, cluster = toolset_template.controller, toolset_template.cluster
    again_lists = {'ephemera_packages': ['git', 'jq', 'ripgrep'], 'ephemera_npm_packages': [],
                   'ephemera_agent_commands': [], 'ephemera_tools': ['git', 'jq', 'rg']}
    before = cache_stats(cluster)
    run, seconds = build(ctl, NAME + '-again', source=int(ctl.info['template_vmid']), **again_lists)
    assert run.ok, run.explain()
    after = cache_stats(cluster)
    assert after['misses'] == before['misses'], (before, after)
    assert after['hits'] - before['hits'] >= 2, (before, after)
    again = current_version(ctl, NAME + '-again')['tools']
    assert again == {k: toolset_template.tools[k] for k in ('git', 'jq', 'rg')}
    print('default toolset: first build %.1f s; a build of git, jq and ripgrep after it %.1f s (%d files from the apt '
          'cache)'
          % (toolset_template.seconds, seconds, after['hits'] - before['hits']))


# ---------------------------------------------------------------- the real agents in workspaces of the template

@pytest.fixture(scope='module')
def agent_site(toolset_template, tmp_path_factory):
    """The agents' scenario (tests/integration/agents/agentsite.py) on workspaces of the toolset template."""
    ctl = toolset_template.controller
    repo = Repo(str(tmp_path_factory.mktemp('toolset-repo')))
    # The guests have file systems of their own: the repository is served over HTTP with a token, as a forge does.
    token = 'tok-' + secrets.token_hex(16)
    server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, token)

    def checkout(ws):
        return os.path.join(ctl.guest_root(ws['vmid']), 'workspace', 'repo')

    try:
        yield AgentSite(ctl.info, os.path.join(ROOT, 'inventories', 'localpve'),
                        {'LOCALPVE_STATE_DIR': ctl.info['state_dir']}, tmp_path_factory.mktemp('toolset-agents'),
                        server.url_of(repo.bare), checkout, journal_path=ctl.journal_path,
                        login={'git_token': token, 'git_username': GIT_USER})
    finally:
        server.stop()


@pytest.mark.parametrize('agent', AGENTS)
def test_the_templates_own_cli_works_as_the_agent_user_from_create_to_restore(toolset_template, agent_site, agent,
                                                                              tmp_path):
    """Each CLI the template's build verified, run by the runner as the agent user in a Debian guest of its own."""
    def while_working(ws, key):
        # The agent runs as the agent user, its key in its environment only: another user of the guest sees every
        # command line (ps) and none holds it.
        client = ssh(toolset_template.controller.info, ws['address'], timeout=10)
        try:
            status, out, err = ssh_run(client, 'runuser -u nobody -- ps -eo user,args')
        finally:
            client.close()
        assert status == 0, err
        out = out.decode('utf-8', 'replace')
        assert key not in out
        assert [line for line in out.splitlines() if line.startswith(AGENT + ' ')], out

    edit_brief_archive_restore(agent_site, agent, 'deb-%s' % agent, str(tmp_path / 'restore'),
                               template_root=files_of(toolset_template), while_working=while_working,
                               ephemera_template=toolset_template.name)
