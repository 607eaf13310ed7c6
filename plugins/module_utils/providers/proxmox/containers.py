# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LXC containers as resources: the one place that knows the Proxmox VE API's paths for them.

``Containers`` wraps a :class:`PveClient` with one method per call the collection makes on a
container (config, status, clone, start, shutdown, stop, delete, interfaces, tasks), each with
the answer PVE gives on the expected "nothing to do" cases already turned into a value: a config
that does not exist is None, a start of a running container or a stop of a stopped one is None.
Everything else raises the client's errors, which are the provider seam's error kinds.

The cleanup-debt id of a container (``lxc/<vmid>@<node>``) is built and read here only.
"""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import (
    PveApiError,
    PveNotFound,
    PvePermissionDenied,
)

KIND = 'lxc'
# What a delete removes with the container: its volumes and its place in pools, replication and HA. Never
# destroy-unreferenced-disks: the marker vouches for the container only, not for disks that name its VMID.
DELETE_OPTIONS = {'purge': 1}
# How many tasks a task-list look reads (newest first).
TASK_LIST_LIMIT = 200


def resource_key(vmid, node=None):
    """A container's id in cleanup debt: ``lxc/<vmid>@<node>`` (``lxc/<vmid>`` where the node does not matter)."""
    key = '%s/%d' % (KIND, int(vmid))
    return key if node is None else '%s@%s' % (key, node)


def parse_resource_key(key):
    """(vmid, node) of ``lxc/<vmid>@<node>``; (None, None) for anything else (a guest-side debt, another kind)."""
    try:
        kind, rest = key.split('/', 1)
        vmid, node = rest.split('@', 1)
        return (int(vmid), node) if kind == KIND else (None, None)
    except (AttributeError, ValueError):
        return None, None


class Containers:
    """The container calls of one Proxmox VE cluster, over ``client`` (a PveClient)."""

    def __init__(self, client):
        self.client = client

    @staticmethod
    def path(node, vmid, leaf='', kind=KIND):
        return '/nodes/%s/%s/%d%s' % (node, kind, int(vmid), leaf)

    @property
    def users(self):
        """Who our tasks run as: the user, or with an API token user@realm!token."""
        return (self.client.user, self.client.token_id)

    # ------------------------------------------------------------------------- reading

    def config(self, node, vmid, kind=KIND):
        """The container's config (with ``digest``, ``lock``, ``description``), or None when it does not exist
        on that node, or not for this login (see :meth:`_invisible`). ``kind``: qemu for a virtual machine's."""
        try:
            return self.client.get(self.path(node, vmid, '/config', kind))
        except PveNotFound:
            return None
        except PvePermissionDenied:
            if self._invisible(vmid):
                return None
            raise

    def status(self, node, vmid, absent_ok=True):
        """``status/current`` of the container ({} when it does not exist, unless not ``absent_ok``: PveNotFound)."""
        try:
            return self.client.get(self.path(node, vmid, '/status/current')) or {}
        except PveNotFound:
            if not absent_ok:
                raise
            return {}
        except PvePermissionDenied as err:
            if not self._invisible(vmid):
                raise
            if not absent_ok:
                raise PveNotFound('CT %s is not visible to %s (%s): not in a pool it may audit, or gone.'
                                  % (vmid, self.client.token_id or self.client.user, err.pve_message or err))
            return {}

    def _invisible(self, vmid):
        """True when the cluster lists no guest ``vmid`` to this login. A login whose ACLs stop at its pool (as
        docs/quickstart-proxmox.md grants them) is refused (403) rather than told "does not exist" for a VMID
        outside the pool: one that was just deleted (and so left the pool), or someone else's. /cluster/resources
        lists exactly the guests it may audit, so a 403 for a VMID it does not list means: none of ours is there. A
        403 for a guest it lists is a missing privilege, and stays an error."""
        return all(int(guest.get('vmid', -1)) != int(vmid) for guest in self.guests())

    def interfaces(self, node, vmid):
        """The container's NICs as PVE reports them (None when it is not running)."""
        return self.client.get(self.path(node, vmid, '/interfaces'))

    def guests(self):
        """Every guest of the cluster: one /cluster/resources read."""
        return self.client.get('/cluster/resources', type='vm') or []

    def node_of(self, vmid, guests=None):
        """The node the cluster lists container ``vmid`` on, or None."""
        for guest in self.guests() if guests is None else guests:
            if int(guest.get('vmid', -1)) == int(vmid) and guest.get('type') == KIND:
                return guest.get('node')
        return None

    def storages(self, node):
        """The node's storages (``storage``, ``content``, ``active``, ...)."""
        return self.client.get('/nodes/%s/storage' % node) or []

    def pools(self):
        return [p.get('poolid') for p in self.client.get('/pools') or []]

    def nextid(self):
        return int(self.client.get('/cluster/nextid'))

    def tasks(self, node, **filters):
        """The node's task list (``typefilter``, ``vmid``, ``source``, ``limit``...)."""
        return self.client.get('/nodes/%s/tasks' % node, **filters) or []

    def finished_tasks(self, node, task_type, vmid):
        """Tasks of ``task_type`` for ``vmid`` (a clone's id is its template's) on ``node``, running and ended."""
        return self.tasks(node, typefilter=task_type, vmid=vmid, source='all', limit=TASK_LIST_LIMIT)

    def ours(self, task):
        return task.get('user') in self.users

    # ------------------------------------------------------------------------- acting

    def update_config(self, node, vmid, digest, **changes):
        """PUT the config, compare-and-set on ``digest``."""
        return self.client.put(self.path(node, vmid, '/config'), digest=digest, **changes)

    def clone(self, node, template, **args):
        """POST the clone of ``template``; its UPID."""
        return self.client.post(self.path(node, template, '/clone'), **args)

    def snapshots(self, node, vmid):
        """The container's snapshots (``name``, ``snaptime``, ``description``, ``snapstate`` while one is made),
        without the ``current`` entry PVE lists too."""
        return [s for s in self.client.get(self.path(node, vmid, '/snapshot')) or [] if s.get('name') != 'current']

    def snapshot(self, node, vmid, name, description):
        """POST snapshot ``name``; the vzsnapshot task's UPID."""
        return self.client.post(self.path(node, vmid, '/snapshot'), snapname=name, description=description)

    def delete_snapshot(self, node, vmid, name):
        """DELETE snapshot ``name``; the vzdelsnapshot task's UPID."""
        return self.client.delete(self.path(node, vmid, '/snapshot/%s' % name))

    def start(self, node, vmid):
        """The start task's UPID; None when the container runs already."""
        return self._power(node, vmid, 'start', 'already running')

    def shutdown(self, node, vmid, timeout):
        """The shutdown task's UPID (no forced stop at its end); None when the container is not running."""
        return self._power(node, vmid, 'shutdown', 'not running', timeout=timeout, forceStop=0)

    def stop(self, node, vmid):
        """The stop task's UPID; None when the container is not running."""
        return self._power(node, vmid, 'stop', 'not running')

    def _power(self, node, vmid, action, nothing_to_do, **args):
        try:
            return self.client.post(self.path(node, vmid, '/status/' + action), **args)
        except PveApiError as err:
            if nothing_to_do in (err.pve_message or ''):
                return None
            raise

    def template(self, node, vmid):
        """Convert the (stopped) container into a template; the vztemplate task's UPID."""
        return self.client.post(self.path(node, vmid, '/template'))

    def delete(self, node, vmid):
        """DELETE the container with DELETE_OPTIONS; the vzdestroy task's UPID."""
        return self.client.delete(self.path(node, vmid), **DELETE_OPTIONS)

    # --------------------------------------------------------------------------- tasks

    def wait_task(self, upid, timeout):
        return self.client.wait_task(upid, timeout=timeout)

    def task_status(self, upid):
        return self.client.task_status(upid)
