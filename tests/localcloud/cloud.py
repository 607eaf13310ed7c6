"""The cloud process that `python -m tests.localcloud up` starts: run a CloudSite until told to stop, as the
try-out cluster's process runs its site (tests/localpve/cluster.py)."""

import logging

from tests.localpve.cluster import serve_site

from .site import CloudSite

LOG = logging.getLogger('localcloud')
UP_TIMEOUT = 60
DOWN_TIMEOUT = 20


def serve(options, ready_fd=None, scope=None):
    """Run the cloud until SIGTERM, SIGINT or a shutdown request, then stop it all."""
    return serve_site(lambda on_shutdown: CloudSite(options, on_shutdown=on_shutdown,
                                                    **({'scope': scope} if scope else {})),
                      'localcloud', ready_fd, log=LOG, traceback=True)
