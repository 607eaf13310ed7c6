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
from .config import ensure_agent_clis
from .addresses import AddressPool
from .config import INFO_FILE, ROOT, ClusterError, load_info
from .control import ControlClient
from .guests import stop_leftovers

UP_TIMEOUT = 60
DOWN_TIMEOUT = 20
MODULE = 'tests.localpve'


def running_pid(info, module=MODULE):
    """The pid of the cluster (or ``module``'s) process info describes, if that process still runs."""
    pid = info.get('pid')
    if pid and system.alive(pid) and module in system.cmdline(pid):
        return pid
    return None


def up(options, timeout=UP_TIMEOUT):
    """Start a cluster process with checked options; returns its cluster.json once it serves.

    On any failure nothing of it is left running and ClusterError says why.
    """
    info = already_running(options.state_dir, INFO_FILE, load_info, ClusterError)
    if info:
        raise ClusterError('a cluster is already running with state in {0} (pid {1}, API {2}); stop it with '
                           'down first'.format(options.state_dir, info['pid'], info.get('api_url')))
    os.makedirs(options.state_dir, exist_ok=True)

    def announce(text):
        print('localpve: ' + text, file=sys.stderr, flush=True)

    # Before the cluster process starts: building the base root, or installing the agent CLIs (each once per
    # machine), takes longer than a start.
    if options.guests == 'debian':
        debian.ensure_base(announce=announce)
    elif options.agent_clis:
        ensure_agent_clis(announce)
    error, returncode, log_path = start_serving(MODULE, options.state_dir, options.as_args(), 'cluster.log', timeout)
    if error is None:
        return load_info(options.state_dir)
    raise ClusterError(error or 'the cluster process ended without starting (exit {0}); see {1}'.format(
        returncode, log_path))


def already_running(state_dir, info_file, load, error, module=MODULE):
    """The info (``info_file`` in ``state_dir``, read by ``load``) of a process of ``module`` that still runs, or
    None; an info file of one that ended is removed."""
    info_path = os.path.join(state_dir, info_file)
    if not os.path.exists(info_path):
        return None
    try:
        info = load(state_dir)
    except error:
        info = {}
    if running_pid(info, module):
        return info
    os.unlink(info_path)
    return None


def start_serving(module, state_dir, args, log_name, timeout, what='cluster'):
    """Start ``python -m module serve`` with ``args`` in the background (its output in ``log_name`` in
    ``state_dir``) and wait until it says it serves. (None, None, log path) then; else, with nothing of it left
    running, (what it said, or '' when it said nothing, its exit status, log path)."""
    read_end, write_end = os.pipe()
    log_path = os.path.join(state_dir, log_name)
    with open(log_path, 'ab') as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, '-m', module, 'serve', '--ready-fd', str(write_end)] + args,
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,),
            start_new_session=True)
    os.close(write_end)
    try:
        message = _read_ready(read_end, timeout, what)
    finally:
        os.close(read_end)
    if message.get('ok'):
        return None, None, log_path
    try:
        proc.wait(DOWN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stop_leftovers(state_dir)
    return message.get('error') or '', proc.returncode, log_path


def _read_ready(fd, timeout, what='cluster'):
    data = b''
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {'ok': False, 'error': 'the {0} did not start within {1}s'.format(what, timeout)}
        if not select.select([fd], [], [], remaining)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data.decode() or '{}')
    except ValueError:
        return {'ok': False, 'error': 'the {0} process said: {1!r}'.format(what, data[-500:])}


def down(state_dir, timeout=DOWN_TIMEOUT):
    """Stop the cluster of state_dir and everything it started; check that nothing of it still listens.

    Returns {'stopped': pid or None, 'killed': [pids], 'listening': [] }; ClusterError if something of it
    could not be stopped.
    """
    return stop_serving(state_dir, INFO_FILE, load_info, ClusterError, ControlClient, leftover_listeners, timeout)


def stop_serving(state_dir, info_file, load, error, client, listeners, timeout=DOWN_TIMEOUT, module=MODULE):
    """down() of a try-out place whose info (``info_file``, read by ``load``) is in ``state_dir``: ask its process
    to shut down (``client``), end it by signal if it does not, end its leftovers, and raise ``error`` if anything
    of it still listens (``listeners`` of its info)."""
    try:
        info = load(state_dir)
    except error:
        info = {}
    report = {'stopped': None, 'killed': [], 'listening': []}
    pid = running_pid(info, module)
    if pid:
        try:
            client(info, timeout=timeout).shutdown()
        except error:
            os.kill(pid, signal.SIGTERM)
        if not system.wait_gone([pid], timeout):
            os.kill(pid, signal.SIGKILL)
            system.wait_gone([pid], 5)
            report['killed'].append(pid)
        report['stopped'] = pid
    report['killed'] += stop_leftovers(state_dir)
    info_path = os.path.join(state_dir, info_file)
    if os.path.exists(info_path):
        os.unlink(info_path)
    if info:
        report['listening'] = listeners(info)
        if report['listening']:
            raise error('still listening after down: {0}'.format(
                ', '.join('{0}:{1}'.format(*s) for s in report['listening'])))
    return report


def leftover_listeners(info):
    """Listening sockets on the cluster's own addresses and ports, or on its guests' range at the SSH port."""
    control_port = int(info['control']['url'].rsplit(':', 1)[1])
    own = {(info['api_host'], info['api_port']), (info['proxy_host'], info['proxy_port']),
           (info['api_host'], control_port)}
    return listening_on(own, [AddressPool(info['address_range'])], info['ssh_port'])


def listening_on(own, pools, ssh_port):
    """The listening sockets among ``own`` (address, port) pairs, and at ``ssh_port`` on an address of ``pools``."""
    out = []
    for address, port in sorted(system.listening()):
        ip = ipaddress.ip_address(address)
        guest = ip.version == 4 and port == ssh_port and any(p.first <= int(ip) <= p.last for p in pools)
        if (address, port) in own or guest:
            out.append((address, port))
    return out
