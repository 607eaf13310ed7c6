"""The cluster as a background process: up (start it and wait until it serves) and down (stop it all).

The process itself runs cluster.serve().
"""

import ipaddress
import json
import os
import select
import signal
import subprocess
import sys
import time

from . import debian, system
from .addresses import AddressPool
from .config import INFO_FILE, ROOT, ClusterError, load_info
from .control import ControlClient
from .guests import stop_leftovers

UP_TIMEOUT = 60
DOWN_TIMEOUT = 20
MODULE = 'tests.localpve'


def running_pid(info):
    """The pid of the cluster process info describes, if that process still runs."""
    pid = info.get('pid')
    if pid and system.alive(pid) and MODULE in system.cmdline(pid):
        return pid
    return None


def up(options, timeout=UP_TIMEOUT):
    """Start a cluster process with checked options; returns its cluster.json once it serves.

    On any failure nothing of it is left running and ClusterError says why.
    """
    info_path = os.path.join(options.state_dir, INFO_FILE)
    if os.path.exists(info_path):
        try:
            info = load_info(options.state_dir)
        except ClusterError:
            info = {}
        if running_pid(info):
            raise ClusterError('a cluster is already running with state in {0} (pid {1}, API {2}); stop it with '
                               'down first'.format(options.state_dir, info['pid'], info.get('api_url')))
        os.unlink(info_path)
    os.makedirs(options.state_dir, exist_ok=True)
    if options.guests == 'debian':
        # Before the cluster process starts: building the base root (once per machine) takes longer than a start.
        debian.ensure_base(announce=lambda text: print('localpve: ' + text, file=sys.stderr, flush=True))
    read_end, write_end = os.pipe()
    log_path = os.path.join(options.state_dir, 'cluster.log')
    with open(log_path, 'ab') as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, '-m', MODULE, 'serve', '--ready-fd', str(write_end)] + options.as_args(),
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,),
            start_new_session=True)
    os.close(write_end)
    try:
        message = _read_ready(read_end, timeout)
    finally:
        os.close(read_end)
    if message.get('ok'):
        return load_info(options.state_dir)
    try:
        proc.wait(DOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stop_leftovers(options.state_dir)
    raise ClusterError(message.get('error') or 'the cluster process ended without starting (exit {0}); see {1}'.format(
        proc.returncode, log_path))


def _read_ready(fd, timeout):
    data = b''
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {'ok': False, 'error': 'the cluster did not start within {0}s'.format(timeout)}
        if not select.select([fd], [], [], remaining)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data.decode() or '{}')
    except ValueError:
        return {'ok': False, 'error': 'the cluster process said: {0!r}'.format(data[-500:])}


def down(state_dir, timeout=DOWN_TIMEOUT):
    """Stop the cluster of state_dir and everything it started; check that nothing of it still listens.

    Returns {'stopped': pid or None, 'killed': [pids], 'listening': [] }; ClusterError if something of it
    could not be stopped.
    """
    try:
        info = load_info(state_dir)
    except ClusterError:
        info = {}
    report = {'stopped': None, 'killed': [], 'listening': []}
    pid = running_pid(info)
    if pid:
        try:
            ControlClient(info, timeout=timeout).shutdown()
        except ClusterError:
            os.kill(pid, signal.SIGTERM)
        if not system.wait_gone([pid], timeout):
            os.kill(pid, signal.SIGKILL)
            system.wait_gone([pid], 5)
            report['killed'].append(pid)
        report['stopped'] = pid
    report['killed'] += stop_leftovers(state_dir)
    info_path = os.path.join(state_dir, INFO_FILE)
    if os.path.exists(info_path):
        os.unlink(info_path)
    if info:
        report['listening'] = leftover_listeners(info)
        if report['listening']:
            raise ClusterError('still listening after down: {0}'.format(
                ', '.join('{0}:{1}'.format(*s) for s in report['listening'])))
    return report


def leftover_listeners(info):
    """Listening sockets on the cluster's own addresses and ports, or on its guests' range at the SSH port."""
    pool = AddressPool(info['address_range'])
    control_port = int(info['control']['url'].rsplit(':', 1)[1])
    own = {(info['api_host'], info['api_port']), (info['proxy_host'], info['proxy_port']),
           (info['api_host'], control_port)}
    out = []
    for address, port in sorted(system.listening()):
        ip = ipaddress.ip_address(address)
        guest = ip.version == 4 and pool.first <= int(ip) <= pool.last and port == info['ssh_port']
        if (address, port) in own or guest:
            out.append((address, port))
    return out
