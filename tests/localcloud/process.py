"""The cloud as a background process: up (start it and wait until it serves) and down (stop it all)."""

import ipaddress
import os
import signal
import subprocess
import sys

from tests.localpve import system
from tests.localpve.addresses import AddressPool
from tests.localpve.guests import stop_leftovers
from tests.localpve.process import _read_ready

from .config import INFO_FILE, ROOT, CloudError, load_info
from .control import CloudClient

UP_TIMEOUT = 60
DOWN_TIMEOUT = 20
MODULE = 'tests.localcloud'


def running_pid(info):
    """The pid of the cloud process info describes, if that process still runs."""
    pid = info.get('pid')
    if pid and system.alive(pid) and MODULE in system.cmdline(pid):
        return pid
    return None


def up(options, timeout=UP_TIMEOUT, scope=None):
    """Start a cloud process with checked options; returns its cloud.json once it serves.

    On any failure nothing of it is left running and CloudError says why.
    """
    info_path = os.path.join(options.state_dir, INFO_FILE)
    if os.path.exists(info_path):
        try:
            info = load_info(options.state_dir)
        except CloudError:
            info = {}
        if running_pid(info):
            raise CloudError('a cloud is already running with state in {0} (pid {1}, endpoint {2}); stop it with '
                             'down first'.format(options.state_dir, info['pid'], info.get('endpoint_url')))
        os.unlink(info_path)
    os.makedirs(options.state_dir, exist_ok=True)
    read_end, write_end = os.pipe()
    log_path = os.path.join(options.state_dir, 'cloud.log')
    extra = ['--scope', scope] if scope else []
    with open(log_path, 'ab') as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, '-m', MODULE, 'serve', '--ready-fd', str(write_end)] + options.as_args() + extra,
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
    raise CloudError((message.get('error') or 'the cloud process ended without starting (exit {0})'.format(
        proc.returncode)).replace('the cluster', 'the cloud') + '; see {0}'.format(log_path))


def down(state_dir, timeout=DOWN_TIMEOUT):
    """Stop the cloud of state_dir and everything it started; check that nothing of it still listens.

    Returns {'stopped': pid or None, 'killed': [pids], 'listening': []}; CloudError if something of it could not
    be stopped.
    """
    try:
        info = load_info(state_dir)
    except CloudError:
        info = {}
    report = {'stopped': None, 'killed': [], 'listening': []}
    pid = running_pid(info)
    if pid:
        try:
            CloudClient(info, timeout=timeout).shutdown()
        except CloudError:
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
            raise CloudError('still listening after down: {0}'.format(
                ', '.join('{0}:{1}'.format(*s) for s in report['listening'])))
    return report


def leftover_listeners(info):
    """Listening sockets on the cloud's own addresses and ports, or on its guests' ranges at the SSH port."""
    pools = [AddressPool(info['address_range']), AddressPool(info['public_range'])]
    own = set((info['host'], int(url.rsplit(':', 1)[1])) for url in (
        info['endpoint_url'], info['moto_url'], info['control']['url']))
    out = []
    for address, port in sorted(system.listening()):
        ip = ipaddress.ip_address(address)
        guest = ip.version == 4 and port == info['ssh_port'] and any(
            p.first <= int(ip) <= p.last for p in pools)
        if (address, port) in own or guest:
            out.append((address, port))
    return out
