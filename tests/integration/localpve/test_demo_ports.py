"""make demo (scripts/demo.sh) next to a try-out cluster already up on the default ports (make cluster-up): the
demo's cluster takes an address and ports of its own, so both run, and the demo's guests answer SSH."""

import json
import os
import re
import shlex
import subprocess
import sys

from tests.localpve import clone_workspace, proxmox, ssh
from tests.localpve.config import DEFAULT_HOST, ROOT, Options
from tests.localpve.system import listening

DEMO = os.path.join(ROOT, 'scripts', 'demo.sh')


def cli(state, *args):
    return subprocess.run([sys.executable, '-m', 'tests.localpve'] + list(args) + ['--state-dir', str(state)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)


def demo_up_args(provider='proxmox'):
    """The arguments scripts/demo.sh gives ``tests.localpve up`` (or ``tests.localcloud up``) for ``provider``."""
    with open(DEMO, encoding='utf-8') as fh:
        script = fh.read()
    case = script[script.index('\n  %s' % provider):]
    return shlex.split(re.search(r'up_args=\(([^)]*)\)', case).group(1))


def test_the_demo_cluster_runs_next_to_a_tryout_cluster_on_the_default_ports(tmp_path):
    defaults = Options()
    taken = (DEFAULT_HOST, defaults.api_port) in listening()
    other = tmp_path / 'cluster-up'
    if not taken:
        # A try-out cluster as make cluster-up starts it: the default address and ports.
        started = cli(other, 'up', '--time-scale', '0', '--json')
        assert started.returncode == 0, started.stderr
    try:
        assert (DEFAULT_HOST, defaults.api_port) in listening()
        args = demo_up_args()
        assert '--api-port' in args and '--proxy-port' in args and '--host' in args
        demo = cli(tmp_path / 'demo', 'up', *(args + ['--json']))
        assert demo.returncode == 0, demo.stderr
        info = json.loads(demo.stdout)
        try:
            assert info['api_host'] != DEFAULT_HOST and info['api_port'] != defaults.api_port
            # Its guests live on its own address range: one answers SSH while the other cluster runs.
            ws = clone_workspace(proxmox(info), info, hostname='demo')
            assert not ws.address.startswith(DEFAULT_HOST.rsplit('.', 1)[0] + '.')
            ssh(info, ws.address).close()
        finally:
            assert cli(tmp_path / 'demo', 'down').returncode == 0
        # The cluster that was there first is still up.
        assert (DEFAULT_HOST, defaults.api_port) in listening()
    finally:
        if not taken:
            cli(other, 'down')


def test_each_cloud_demo_shows_only_its_own_provider():
    for provider in ('aws', 'hetzner', 'gcp', 'azure'):
        args = demo_up_args(provider)
        assert args[args.index('--show') + 1] == provider, (provider, args)
        assert args[args.index('--port') + 1] == '0', (provider, args)
