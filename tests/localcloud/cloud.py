"""The cloud process that `python -m tests.localcloud up` starts: run a CloudSite until told to stop."""

import logging
import signal
import sys
import threading

from tests.localpve.cluster import LoopThread, _tell

from .config import ClusterError
from .site import CloudSite

LOG = logging.getLogger('localcloud')
UP_TIMEOUT = 60
DOWN_TIMEOUT = 20


def serve(options, ready_fd=None, scope=None):
    """Run the cloud until SIGTERM, SIGINT or a shutdown request, then stop it all."""
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(levelname)s %(message)s', stream=sys.stderr)
    logging.getLogger('aiohttp.access').setLevel(logging.WARNING)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *args: stopping.set())
    signal.signal(signal.SIGINT, lambda *args: stopping.set())
    loop = LoopThread('localcloud')
    site = CloudSite(options, on_shutdown=stopping.set, **({'scope': scope} if scope else {}))
    try:
        loop.call(site.start(), UP_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to `up` as a message
        LOG.exception('start failed')
        try:
            loop.call(site.stop(), DOWN_TIMEOUT)
        finally:
            loop.close()
        _tell(ready_fd, {'ok': False, 'error': str(exc) if isinstance(exc, ClusterError)
                         else '{0}: {1}'.format(type(exc).__name__, exc)})
        return 1
    _tell(ready_fd, {'ok': True})
    while not stopping.wait(0.5):
        pass
    try:
        loop.call(site.stop(), DOWN_TIMEOUT + 10)
    finally:
        loop.close()
    return 0
