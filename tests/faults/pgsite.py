"""A crash-safety site whose controllers share a journal on PostgreSQL (tests/pgserver.py) instead of a file.

Everything else is the SQLite site's (tests/faults/site.py): the try-out cluster in this process, the git server,
the shipped playbooks run by ansible-playbook, the failpoints. The runs get the journal as ``ephemera_journal_url``,
the controller secret as ``ephemera_controller_secret`` (a database journal has no secret file beside it), and
``EPHEMERA_JOURNAL`` names a file that must never come to exist. An operation may say which controller host runs it
(``op['host']``, the run identity's ``EPHEMERA_CONTROLLER_HOST``) and which claim lease its queue takes
(``op['lease_seconds']``, the queue's ``ephemera_lease``).
"""

import os
import secrets

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import Journal
from tests.faults.site import FaultSite
from tests.localpve.cluster import LocalCluster


class PgFaultSite(FaultSite):
    """:class:`FaultSite` with the journal in the PostgreSQL database ``url``."""

    url = None
    controller_secret = None
    default_host = None
    default_lease = None

    @classmethod
    def start(cls, workdir, url=None, host=None, lease=None, **options):  # pylint: disable=arguments-differ
        cluster = LocalCluster.start(os.path.join(workdir, 'cluster'), **options)
        cluster.run(lambda: setattr(cluster.pve, 'max_requests', 10 ** 6))
        try:
            site = cls(workdir, cluster)
        except BaseException:
            cluster.stop()
            raise
        site.url = url
        site.controller_secret = secrets.token_hex(32)
        site.default_host, site.default_lease = host, lease
        # The file a run would use if the URL did not reach it: it must never be made.
        site.journal_path = os.path.join(workdir, 'controller', 'never-made.sqlite')
        # The journal started in the new database, as the first job of a site does it (-e ephemera_new_journal=true):
        # a create does not start one in a database on its own.
        with Journal.open(url=url, create=True):
            pass
        return site

    def playbook_vars(self, op):
        values = super().playbook_vars(op)
        values.pop('ephemera_journal_path', None)
        values['ephemera_journal_url'] = self.url
        values['ephemera_controller_secret'] = self.controller_secret
        # A database journal has no directory for the archives to go beside: the site's own.
        values['ephemera_archive_dir'] = os.path.join(self.workdir, 'controller', 'archives')
        lease = op.get('lease_seconds') or self.default_lease
        if lease:
            values['ephemera_lease'] = lease
        return values

    def run_env(self, op):
        env = {'EPHEMERA_JOURNAL': self.journal_path}
        host = op.get('host') or self.default_host
        if host:
            env['EPHEMERA_CONTROLLER_HOST'] = host
        return env

    def journal(self):
        return Journal.open(url=self.url, create=False)

    def secret(self):
        return ownership.load_secret(None, self.controller_secret)

    def files_of_the_journal(self):
        """Files a run may have made for a journal on this controller (none may exist)."""
        directory = os.path.dirname(self.journal_path)
        if not os.path.isdir(directory):
            return []
        return sorted(name for name in os.listdir(directory) if name.startswith('never-made'))
