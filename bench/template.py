"""A template build on the debian guest tier, split by step, and create-to-ready on both guest tiers.

    .venv/bin/python bench/template.py [--runs N]

On a try-out cluster of the debian tier (time scale 0: a PVE task takes as long as the harness's own work):
- one build of template "bench" from the seed template, through ansible-playbook ephemera.workspaces.template_build,
  with the list the integration tests use (jq, nodejs and npm from Debian, one npm package installed as the agent
  user); each step's task time from the JSON callback;
- N creates from the template's name to ready (ephemera.workspaces.create), each destroyed after;
then N creates from the seed template's VMID on a cluster of the default (host) tier. Prints the medians and the
ratio; the last line is `template: build A s; create on debian guests B s, on default guests C s`. Checks what it
measured (the build finished, the tools answered, every create reached ready) and exits non-zero when it did not,
never because of a time. The debian tier needs root and reaches the Debian mirror and the npm registry.
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

BUILD = os.path.join(ROOT, 'playbooks', 'template_build.yml')
DESTROY = os.path.join(ROOT, 'playbooks', 'destroy.yml')
LIST = {'ephemera_packages': ['jq', 'nodejs', 'npm'], 'ephemera_npm_packages': ['semver@7'],
        'ephemera_agent_commands': [], 'ephemera_tools': ['jq', 'node', {'name': 'semver', 'command': 'semver --help'}]}
GIT_USER = 'bench'


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
        request = request_vars(self.url, name, git_token=self.token, git_username=GIT_USER, **extra)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=3, help='creates on each tier (default 3)')
    args = parser.parse_args()

    tier = Tier('debian')
    try:
        started = time.monotonic()
        build = tier.ctl.start(dict(LIST, template='bench', source=int(tier.ctl.info['template_vmid'])),
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


if __name__ == '__main__':
    main()
