"""The cloud as a background process: up (start it and wait until it serves) and down (stop it all), the try-out
cluster's way (tests/localpve/process.py)."""

import os
import sys

from tests.localpve import process as pve_process
from tests.localpve.addresses import AddressPool
from tests.localpve.config import ClusterError, ensure_agent_clis

from .config import INFO_FILE, CloudError, load_info
from .control import CloudClient

UP_TIMEOUT = 60
DOWN_TIMEOUT = 20
MODULE = 'tests.localcloud'


def running_pid(info):
    """The pid of the cloud process info describes, if that process still runs."""
    return pve_process.running_pid(info, MODULE)


def up(options, timeout=UP_TIMEOUT, scope=None):
    """Start a cloud process with checked options; returns its cloud.json once it serves.

    On any failure nothing of it is left running and CloudError says why.
    """
    info = pve_process.already_running(options.state_dir, INFO_FILE, load_info, CloudError, MODULE)
    if info:
        raise CloudError('a cloud is already running with state in {0} (pid {1}, endpoint {2}); stop it with '
                         'down first'.format(options.state_dir, info['pid'], info.get('endpoint_url')))
    os.makedirs(options.state_dir, exist_ok=True)
    if options.agent_clis:
        # Before the cloud process starts: installing the agent CLIs (once per machine) takes longer than a start.
        try:
            ensure_agent_clis(lambda text: print('localcloud: ' + text, file=sys.stderr, flush=True))
        except ClusterError as err:
            raise CloudError(str(err).replace('the cluster', 'the cloud')) from None
    extra = ['--scope', scope] if scope else []
    error, returncode, log_path = pve_process.start_serving(MODULE, options.state_dir, options.as_args() + extra,
                                                            'cloud.log', timeout, what='cloud')
    if error is None:
        return load_info(options.state_dir)
    raise CloudError((error or 'the cloud process ended without starting (exit {0})'.format(
        returncode)).replace('the cluster', 'the cloud') + '; see {0}'.format(log_path))


def down(state_dir, timeout=DOWN_TIMEOUT):
    """Stop the cloud of state_dir and everything it started; check that nothing of it still listens.

    Returns {'stopped': pid or None, 'killed': [pids], 'listening': []}; CloudError if something of it could not
    be stopped.
    """
    return pve_process.stop_serving(state_dir, INFO_FILE, load_info, CloudError, CloudClient, leftover_listeners,
                                    timeout, MODULE)


def leftover_listeners(info):
    """Listening sockets on the cloud's own addresses and ports, or on its guests' ranges at the SSH port."""
    pools = [AddressPool(info['address_range']), AddressPool(info['public_range'])]
    own = set((info['host'], int(url.rsplit(':', 1)[1])) for url in (
        info['endpoint_url'], info['moto_url'], info['control']['url']))
    return pve_process.listening_on(own, pools, info['ssh_port'])
