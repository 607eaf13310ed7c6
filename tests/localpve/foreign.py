"""A foreign client: another Proxmox VE user working on the same cluster, over the same API.

It creates containers (in the workspace pool or outside it), takes a VMID the moment someone else
is about to use it, and edits descriptions. Every action is a real API request as that user, so
the cluster's task list and configs show who did what.
"""

import asyncio
import logging
import time

import aiohttp

from .config import ClusterError
from .pve import OSTEMPLATE

LOG = logging.getLogger('localpve.foreign')
TASK_TIMEOUT = 300


class ForeignClient:
    """Logs in as the foreign user with a ticket and talks to the API directly (never through the proxy)."""

    def __init__(self, site, user, password):
        self.site = site
        self.user = user
        self.password = password
        self.session = None
        self.headers = None

    @property
    def api(self):
        return self.site.pve.url + '/api2/json'

    async def _login(self):
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.site.client_ssl))
        async with self.session.post(self.api + '/access/ticket',
                                     data={'username': self.user, 'password': self.password}) as resp:
            body = await resp.json(content_type=None)
            if resp.status != 200:
                raise ClusterError('the foreign user {0} cannot log in: {1}'.format(self.user, body))
        self.headers = {'Cookie': 'PVEAuthCookie=' + body['data']['ticket'],
                        'CSRFPreventionToken': body['data']['CSRFPreventionToken']}

    async def call(self, method, path, **params):
        """One API request as the foreign user; its data, or ClusterError with PVE's message."""
        params = {k: int(v) if isinstance(v, bool) else v for k, v in params.items() if v is not None}
        kwargs = {'params': params} if method == 'GET' else {'data': params}
        for attempt in (1, 2):
            if self.headers is None:
                await self._login()
            async with self.session.request(method, self.api + path, headers=self.headers, **kwargs) as resp:
                body = await resp.json(content_type=None)
            if resp.status != 401 or attempt == 2:
                break
            # The ticket expired (or the cluster restarted): log in again once.
            self.headers = None
        if resp.status >= 400:
            raise ClusterError('{0} {1} {2} as {3} failed: {4} {5}'.format(
                method, path, params, self.user, resp.status, (body or {}).get('message', '').strip()))
        return body.get('data')

    async def wait(self, upid):
        """Wait for a task; ClusterError unless it ends OK."""
        node = upid.split(':')[1]
        deadline = time.monotonic() + TASK_TIMEOUT
        while True:
            status = await self.call('GET', '/nodes/{0}/tasks/{1}/status'.format(node, upid))
            if status['status'] == 'stopped':
                if status.get('exitstatus') != 'OK':
                    raise ClusterError('task {0} of {1} failed: {2}'.format(upid, self.user, status.get('exitstatus')))
                return status
            if time.monotonic() > deadline:
                raise ClusterError('task {0} of {1} did not finish'.format(upid, self.user))
            await asyncio.sleep(0.05)

    async def create(self, vmid=None, node=None, pool=None, hostname=None, description=None, start=False,
                     how='clone', wait=True):
        """A container of the foreign user: a linked clone of the workspace template (how='clone', it looks
        like a workspace) or a fresh one from the OS template (how='create'). Returns its vmid, node, upid."""
        if how not in ('clone', 'create'):
            raise ClusterError("how must be 'clone' or 'create', not {0!r}".format(how))
        opts = self.site.options
        if vmid is None:
            vmid = int(await self.call('GET', '/cluster/nextid'))
        vmid = int(vmid)
        hostname = hostname or 'foreign-{0}'.format(vmid)
        description = 'owner: {0}\n'.format(self.user) if description is None else description
        if how == 'clone':
            template = self.site.pve.ct(opts.template_vmid)
            if template is None:
                raise ClusterError('the template {0} does not exist'.format(opts.template_vmid))
            node = template.node
            upid = await self.call('POST', '/nodes/{0}/lxc/{1}/clone'.format(node, opts.template_vmid),
                                   newid=vmid, hostname=hostname, description=description, pool=pool, full=False)
        else:
            node = node or opts.nodes[0]
            upid = await self.call('POST', '/nodes/{0}/lxc'.format(node), vmid=vmid, ostemplate=OSTEMPLATE,
                                   hostname=hostname, description=description, pool=pool, storage=opts.storage,
                                   rootfs='{0}:4'.format(opts.storage),
                                   net0='name=eth0,bridge={0},ip=dhcp'.format(opts.bridge))
        LOG.info('%s created CT %s on %s (%s)', self.user, vmid, node, how)
        if wait:
            await self.wait(upid)
            if start:
                await self.wait(await self.call('POST', '/nodes/{0}/lxc/{1}/status/start'.format(node, vmid)))
        return {'vmid': vmid, 'node': node, 'upid': upid}

    async def claim(self, vmid, pool=None):
        """Take vmid at once: the creation claims the id synchronously; its task may run on."""
        return await self.create(vmid=vmid, pool=pool, hostname='claimed-{0}'.format(vmid), how='create', wait=False)

    async def edit_description(self, vmid, description):
        ct = self.site.pve.ct(int(vmid))
        if ct is None:
            raise ClusterError('no container {0}'.format(vmid))
        await self.call('PUT', '/nodes/{0}/lxc/{1}/config'.format(ct.node, ct.vmid), description=description)
        LOG.info('%s edited the description of CT %s', self.user, vmid)
        return {'vmid': ct.vmid, 'description': description}

    async def close(self):
        if self.session is not None:
            await self.session.close()
            self.session = None
            self.headers = None
