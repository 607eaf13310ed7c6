"""A template build on the debian guest tier, split by step, and create-to-ready on both guest tiers.

    .venv/bin/python bench/template.py [--runs N]

On a try-out cluster of the debian tier (time scale 0: a PVE task takes as long as the harness's own work):
- one build of template "bench" from the seed template, through ansible-playbook ephemera.workspaces.template_build,
  with the list the integration tests use (jq, nodejs and npm from Debian, one npm package installed as the agent
  user); each step's task time from the JSON callback;
- N creates from the template's name to ready (ephemera.workspaces.create), each destroyed after;
- one build of template "bench-toolset" from the seed template with the module's default lists (no list of its own:
  the agent CLIs, uv, Go, Rust, ...), split by step, through the try-out cluster's package cache
  (tests/localpve/pkgcache.py; LOCALPVE_PACKAGE_CACHE=<an empty directory> measures a build that downloads
  everything);
then N creates from the seed template's VMID on a cluster of the default (host) tier. Prints the medians and the
ratio, then `template: build A s; create on debian guests B s, on default guests C s`, and as the last line
`template: default toolset built in D s (N tools verified)`. Checks what it measured (the builds finished with the
lists they were meant to have, every tool answered, every create reached ready) and exits non-zero when it did not,
never because of a time. The debian tier needs root and reaches the Debian mirror, the npm registry and PyPI.
"""

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository root first on sys.path, so that bench.* and tests.* import as packages.
sys.path[0] = ROOT

from tests.integration.create.createrun import Controller, request_vars  # noqa: E402 pylint: disable=wrong-import-position
from tests.integration.create.gitserver import GitHttpServer, Repo  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.cluster import pick_host  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.config import Options  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.control import ControlClient  # noqa: E402 pylint: disable=wrong-import-position
from tests.localpve.process import down, up  # noqa: E402 pylint: disable=wrong-import-position
from ansible_collections.ephemera.workspaces.plugins.modules.workspace_template import (  # noqa: E402 pylint: disable=wrong-import-position
    DEFAULT_COMMANDS,
    DEFAULT_NPM,
    DEFAULT_PACKAGES,
    DEFAULT_TOOLS,
)

BUILD = os.path.join(ROOT, 'playbooks', 'template_build.yml')
DESTROY = os.path.join(ROOT, 'playbooks', 'destroy.yml')
LIST = {'ephemera_packages': ['jq', 'nodejs', 'npm'], 'ephemera_npm_packages': ['semver@7'],
        'ephemera_agent_commands': [], 'ephemera_tools': ['jq', 'node', {'name': 'semver', 'command': 'semver --help'}]}
GIT_USER = 'bench'
# An agent that works until its workspace is destroyed, the brief its argument: node, which the template's build
# verified (a create from a template runs only an agent its build verified) and the default tier's machine has.
AGENT = ['node', '-e', 'setTimeout(function () {}, 300000)', '{purpose}']


def stamp(text):
    return datetime.fromisoformat(text.replace('Z', '+00:00')).timestamp()


def step_times(run):
    """[(task name, seconds)] of the build's numbered steps, from the JSON callback's task durations."""
    out = []
    for play in (run.data or {}).get('plays', []):
        for task in play['tasks']:
            name = task['task']['name'].split(' : ', 1)[-1]
            if name[:1].isdigit() and '/14 ' in name:
                duration = task['task']['duration']
                out.append((name, stamp(duration['end']) - stamp(duration['start'])))
    return out


class Tier:
    """A cluster of one guest tier, a git server and a controller (journal) on it."""

    def __init__(self, guests):
        self.state = tempfile.mkdtemp(prefix='bench-template-%s-' % guests)
        self.opts = Options(state_dir=os.path.join(self.state, 'cluster'), host=pick_host(), api_port=0, proxy_port=0,
                            time_scale=0, guests=guests).check()
        self.cluster = ControlClient(up(self.opts))
        repo = Repo(os.path.join(self.state, 'repo'))
        self.token = 'tok-' + secrets.token_hex(16)
        self.server = GitHttpServer(os.path.dirname(repo.bare), GIT_USER, self.token)
        self.url = self.server.url_of(repo.bare)
        self.ctl = Controller(self.cluster, os.path.join(self.state, 'controller'))

    def create(self, name, **extra):
        """Seconds from the create playbook's start to its end (the workspace ready), then destroyed."""
        request = request_vars(self.url, name, git_token=self.token, git_username=GIT_USER,
                               **dict({'ephemera_agents': {'worker': AGENT}}, **extra))
        started = time.monotonic()
        run = self.ctl.create(request, timeout=900)
        seconds = time.monotonic() - started
        ws = self.ctl.workspace(name)
        if not run.ok or ws['status'] != 'ready':
            raise SystemExit('create %s did not reach ready:\n%s' % (name, run.explain()))
        gone = self.ctl.start({'workspace': name}, playbook=DESTROY).wait(600, fail=False)
        if not gone.ok:
            raise SystemExit('destroy %s failed:\n%s' % (name, gone.explain()))
        return seconds

    def close(self):
        self.ctl.stop()
        self.server.stop()
        down(self.opts.state_dir)
        shutil.rmtree(self.state, ignore_errors=True)


def default_toolset(tier):
    """A build with the module's default lists from the seed template: (seconds, tools, steps, cache figures)."""
    cache_before = tier.cluster.status()['package_cache']
    started = time.monotonic()
    build = tier.ctl.start({'template': 'bench-toolset', 'source': int(tier.ctl.info['template_vmid']),
                            'template_build_smoke': {}},
                           playbook=BUILD).wait(3600, fail=False)
    seconds = time.monotonic() - started
    if not build.ok:
        raise SystemExit('the default toolset build failed:\n%s' % build.explain())
    cache_after = tier.cluster.status()['package_cache']
    with tier.ctl.journal() as journal:
        version = journal.template_version('bench-toolset', journal.template('bench-toolset')['current'])
        spec = journal.get_workspace(version['workspace'])['params']['build']
    names = [t['name'] if isinstance(t, dict) else t for t in DEFAULT_TOOLS]
    lists = (spec['packages'], spec['npm_packages'], spec['agent_commands'], [t['name'] for t in spec['tools']])
    if version['state'] != 'built' or lists != (DEFAULT_PACKAGES, DEFAULT_NPM, DEFAULT_COMMANDS, names):
        raise SystemExit('the default toolset build did not build the default lists: %s %r' % (version['state'], lists))
    if sorted(version['tools']) != sorted(names) or not all(version['tools'].values()):
        raise SystemExit('not every default tool answered: %r' % version['tools'])
    cache = {key: cache_after[key] - cache_before[key] for key in ('hits', 'misses', 'bytes_from_cache',
                                                                   'bytes_fetched')}
    return seconds, version['tools'], step_times(build), cache


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=3, help='creates on each tier (default 3)')
    args = parser.parse_args()

    tier = Tier('debian')
    try:
        started = time.monotonic()
        build = tier.ctl.start(dict(LIST, template='bench', source=int(tier.ctl.info['template_vmid']),
                                    template_build_smoke={}),
                               playbook=BUILD).wait(1800, fail=False)
        build_seconds = time.monotonic() - started
        if not build.ok:
            raise SystemExit('the build failed:\n%s' % build.explain())
        with tier.ctl.journal() as journal:
            version = journal.template_version('bench', journal.template('bench')['current'])
        tools = ', '.join('%s %s' % kv for kv in sorted(version['tools'].items()))
        print('build of template bench v%d from CT %s (%s):' % (version['version'], tier.ctl.info['template_vmid'], tools))
        steps = step_times(build)
        for name, seconds in steps:
            print('  %-62s %7.2f s' % (name, seconds))
        print('  %-62s %7.2f s (ansible-playbook start to end)' % ('whole build', build_seconds))
        debian_creates = [tier.create('bench-deb-%d' % n, ephemera_template='bench') for n in range(args.runs)]
        toolset_seconds, toolset_tools, toolset_steps, cache = default_toolset(tier)
        print('build of template bench-toolset with the default lists (%s):'
              % ', '.join('%s %s' % kv for kv in sorted(toolset_tools.items())))
        for name, seconds in toolset_steps:
            print('  %-62s %7.2f s' % (name, seconds))
        print('  %-62s %7.2f s (ansible-playbook start to end)' % ('whole build', toolset_seconds))
        print('  package cache (%s): %d files served from it (%.0f MB), %d fetched into it, %.0f MB from upstream '
              '(apt and PyPI; npm keeps its own)' % (tier.cluster.info['package_cache']['dir'], cache['hits'],
                                                     cache['bytes_from_cache'] / 1e6, cache['misses'],
                                                     cache['bytes_fetched'] / 1e6))
    finally:
        tier.close()
    tier = Tier('host')
    try:
        host_creates = [tier.create('bench-host-%d' % n) for n in range(args.runs)]
    finally:
        tier.close()
    deb, host = statistics.median(debian_creates), statistics.median(host_creates)
    print('create to ready, from the template name, debian guests: median %.2f s (%s)'
          % (deb, ', '.join('%.2f' % s for s in debian_creates)))
    print('create to ready, from the seed VMID, default guests:    median %.2f s (%s)'
          % (host, ', '.join('%.2f' % s for s in host_creates)))
    print('debian / default: %.2f' % (deb / host))
    print('template: build %.1f s; create on debian guests %.1f s, on default guests %.1f s' % (build_seconds, deb, host))
    print('template: default toolset built in %.1f s (%d tools verified)' % (toolset_seconds, len(toolset_tools)))


if __name__ == '__main__':
    main()
