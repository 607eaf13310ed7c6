"""The datacenter: a FakePve with the hooks the harness needs, what a real site has in it, and its saved state."""

import itertools
import json
import os

from fakepve.lxc import FakeCt
from fakepve.server import FakePve

STATE_FORMAT = 1
# What a real site's workspace template looks like (pct config of a prepared Debian template).
OSTEMPLATE = 'local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst'
# PVE seconds a task of this site takes; FakePve.time_scale turns them into wall time.
TASK_SECS = {'clone': 4, 'create': 6, 'destroy': 2, 'snapshot': 2, 'delsnapshot': 2, 'rollback': 3,
             'template': 3, 'resize': 1, 'migrate': 10}
GUEST_SECS = {'start_secs': 2, 'shutdown_secs': 3, 'stop_secs': 1}
CT_FIELDS = ('node', 'status', 'config', 'pending', 'snapshots', 'stats', 'started_at', 'pid', 'checkpoint',
             'shutdown_secs', 'start_secs', 'stop_secs', 'start_error', 'ha_state')


class SitePve(FakePve):
    """FakePve that tells the harness what happens: tasks ending, clones and creations, nextid answers,
    and that adds DHCP leases to what /interfaces reports. Only its public Python API is used otherwise."""

    def __init__(self, site, **kwargs):
        super().__init__(**kwargs)
        self.site = site

    async def task(self, node, ttype, tid, user, body, vm=None, lock=True, log=()):
        async def observed():
            ok = False
            try:
                note = await body()
                ok = True
                return note
            finally:
                # Before the task reads as stopped: a client that saw "OK" finds the guest as the task left it.
                await self.site.after_task(ttype, user, vm, ok)
        return await super().task(node, ttype, tid, user, observed, vm=vm, lock=lock, log=log)

    async def _lxc_clone(self, user, v):
        newid = int(v['newid'])
        await self.site.before_clone(user, newid)
        source = self.ct(int(v['vmid']))
        # As PVE decides: a full clone unless asked otherwise of a template.
        if v.get('full') in (None, ''):
            full = not (source is not None and source.template)
        else:
            full = str(v['full']).lower() in ('1', 'true', 'yes', 'on')
        # A clone from a snapshot takes the snapshot's files (the harness keeps a copy of them), not the source's now.
        origin = ('clone', int(v['vmid']), full, v.get('snapname') or None)
        return await self._born(newid, origin, super()._lxc_clone(user, v))

    async def _lxc_create(self, user, v):
        vmid = int(v['vmid'])
        return await self._born(vmid, ('create', v.get('ssh-public-keys')), super()._lxc_create(user, v))

    async def _born(self, vmid, origin, call):
        """Run a clone or create; the harness learns where a new container came from (for its files)."""
        fresh = self.ct(vmid) is None
        if fresh:
            self.site.origins[vmid] = origin
        try:
            return await call
        except BaseException:
            if fresh and self.ct(vmid) is None:
                self.site.origins.pop(vmid, None)
            raise

    async def _nextid(self, v, user):
        answer = await super()._nextid(v, user)
        if v.get('vmid') in (None, ''):
            await self.site.after_nextid(int(answer), user)
        return answer

    async def _lxc_interfaces(self, user, v):
        data = await super()._lxc_interfaces(user, v)
        return self.site.guests.with_leases(self.ct(int(v['vmid'])), data)


def seed(pve, options):
    """What a real site has: nodes, a linked-clone capable storage, the pool, the workspace template."""
    pve.nodes = {name: {'online': True} for name in options.nodes}
    pve.cluster_name = 'localpve'
    pve.ct_secs.update(TASK_SECS)
    if options.storage not in pve.storages:
        pve.storages[options.storage] = {'type': 'lvmthin', 'active': 1, 'content': 'images,rootdir', 'files': set(),
                                         'vgname': 'pve', 'thinpool': 'data'}
    pve.store_file('local', OSTEMPLATE.split('/', 1)[1], 129 * 1024 ** 2, content='vztmpl')
    pve.pools[options.pool] = set()
    pve.pool_info[options.pool] = {'comment': 'Disposable agent workspaces', 'storage': set()}
    vmid = options.template_vmid
    pve.add_ct(vmid, 'workspace-template', node=options.nodes[0], template=True, config={
        'hostname': 'workspace-template',
        'description': 'Workspace template: Debian 12 with git, openssh-server and the agent runner prerequisites.\n',
        'ostype': 'debian', 'arch': 'amd64', 'cores': 2, 'memory': 2048, 'swap': 512, 'unprivileged': 1,
        'features': 'nesting=1', 'tags': 'workspace-template',
        'rootfs': '{0}:base-{1}-disk-0,size=8G'.format(options.storage, vmid),
        'net0': 'name=eth0,bridge={0},firewall=1,hwaddr=BC:24:11:00:{1:02X}:{2:02X},ip=dhcp,type=veth'.format(
            options.bridge, (vmid >> 8) & 0xFF, vmid & 0xFF)})


def _plain(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError('not JSON: {0!r}'.format(value))


def _next(counter):
    """Read an itertools.count without losing the value: (value, an equivalent new counter)."""
    value = next(counter)
    return value, itertools.count(value)


def dump(pve, harness):
    """The datacenter as JSON text: guests, pools, storages, nodes, tasks, id counters, and harness state."""
    pid, pve._pids = _next(pve._pids)  # pylint: disable=protected-access
    ct_pid, pve._ct_pids = _next(pve._ct_pids)  # pylint: disable=protected-access
    data = {
        'format': STATE_FORMAT, 'cluster_name': pve.cluster_name, 'nodes': pve.nodes,
        'cts': [dict({'vmid': ct.vmid}, **{k: getattr(ct, k) for k in CT_FIELDS}) for ct in pve.cts],
        'pools': pve.pools, 'pool_info': pve.pool_info, 'storages': pve.storages, 'ct_secs': pve.ct_secs,
        'tasklog': pve.tasklog, 'next_pid': pid, 'next_ct_pid': ct_pid, 'harness': harness,
    }
    return json.dumps(data, default=_plain, sort_keys=True)


def restore(pve, text):
    """Load dump() output into a fresh FakePve; returns the harness part. Tasks that were running end as
    PVE's do when their worker vanished: exit status 'unexpected status'."""
    data = json.loads(text)
    if data.get('format') != STATE_FORMAT:
        raise ValueError('saved state has format {0!r}, this harness reads {1}'.format(
            data.get('format'), STATE_FORMAT))
    pve.cluster_name = data['cluster_name']
    pve.nodes = data['nodes']
    pve.cts = []
    for item in data['cts']:
        ct = FakeCt(item['vmid'], node=item['node'], defaults=False)
        for key in CT_FIELDS:
            setattr(ct, key, item[key])
        pve.cts.append(ct)
    pve.pools = {name: set(ids) for name, ids in data['pools'].items()}
    pve.pool_info = {name: {'comment': meta.get('comment'), 'storage': set(meta.get('storage', ()))}
                     for name, meta in data['pool_info'].items()}
    pve._sync_pools()  # pylint: disable=protected-access
    for store in data['storages'].values():
        store['files'] = set(store.get('files', ()))
    pve.storages = data['storages']
    pve.ct_secs.update(data['ct_secs'])
    for task in data['tasklog']:
        if task['status'] == 'running':
            task.update(status='stopped', exitstatus='unexpected status', endtime=task['starttime'])
            task['log'].append('TASK ERROR: unexpected status')
    pve.tasklog = data['tasklog']
    pve.tasks = {task['upid']: task for task in pve.tasklog}
    pve._pids = itertools.count(data['next_pid'])  # pylint: disable=protected-access
    pve._ct_pids = itertools.count(data['next_ct_pid'])  # pylint: disable=protected-access
    return data.get('harness') or {}


def write_durably(path, text):
    """Replace path with text so that a reader sees the old or the new file, never a part."""
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or '.', os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
