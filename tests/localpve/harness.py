"""The harness: a FakePve datacenter, the fault proxy, the guests' sshd, the foreign client and the
control API, all owned by one Site on one asyncio event loop (cluster.py runs it)."""

import asyncio
import errno
import json
import logging
import os
import secrets
import shutil
import ssl
import time

from aiohttp import web

from tests.models import NOTES, ModelServer
from tests.models.tryout import agent_settings

from . import debian, pki, pkgcache, system
from .config import INFO_FILE, ClusterError
from .control import TOKEN_HEADER
from .foreign import ForeignClient
from .guests import GuestManager, stop_leftovers
from .proxy import FaultProxy
from .pve import GUEST_SECS, SitePve, dump, restore, seed, write_durably

LOG = logging.getLogger('localpve')
INFO_FORMAT = 1
DATACENTER_FILE = 'datacenter.json'
SECRETS_FILE = 'secrets.json'
TICK = 0.1
SAVE_EVERY = 5
# Real seconds a stopping cluster lets running tasks finish before it saves the datacenter.
SETTLE_TIMEOUT = 10
FOREIGN_USER = 'other@pve'


class Site:
    """Everything of one cluster, living on one event loop. Operations are the op_* methods."""

    def __init__(self, options, on_shutdown=None):
        self.options = options
        self.on_shutdown = on_shutdown
        self.pve = None
        self.proxy = None
        self.control = None
        self.foreign = None
        # debian tier: the package cache and its caching proxy for apt (pkgcache.py).
        self.package_cache = None
        # The site's model endpoint: a scripted stand-in of the agents' model APIs (tests/models).
        self.models = None
        self.client_ssl = None
        self.secrets = None
        self.paths = {}
        self.info = None
        # vmid -> ('clone', source vmid, full clone?) or ('create', ssh keys): where a container being made comes from.
        self.origins = {}
        self.snipes = []
        self.tampers = []
        self._saved = None
        self._tick = None
        self._started = None
        self.guests = GuestManager(self)

    # ------------------------------------------------------------ files

    def _path(self, *parts):
        return os.path.join(self.options.state_dir, *parts)

    def _load_secrets(self):
        path = self._path(SECRETS_FILE)
        data = {}
        if os.path.exists(path):
            with open(path, encoding='utf-8') as fh:
                data = json.load(fh)
        fresh = {'password': secrets.token_urlsafe(12), 'token_secret': _uuid(), 'foreign_password':
                 secrets.token_urlsafe(12), 'control_token': secrets.token_urlsafe(24)}
        if any(k not in data for k in fresh):
            data = dict(fresh, **data)
            pki.write_private(path, json.dumps(data, indent=2).encode())
        return data

    def save(self, force=False):
        """Write the datacenter if it changed since the last save (or always, with force)."""
        text = dump(self.pve, self.guests.saved())
        if force or text != self._saved:
            write_durably(self._path(DATACENTER_FILE), text)
            self._saved = text
        return {'file': self._path(DATACENTER_FILE)}

    # --------------------------------------------------------- lifecycle

    async def start(self):
        """Start everything, or leave nothing running and raise ClusterError."""
        opts = self.options
        self._started = time.time()
        for sub in ('', 'ssh', 'pki', 'guests'):
            os.makedirs(self._path(sub), exist_ok=True)
        stop_leftovers(opts.state_dir)
        self.guests.prepare()
        if opts.fresh:
            for name in (DATACENTER_FILE, INFO_FILE):
                if os.path.exists(self._path(name)):
                    os.unlink(self._path(name))
            shutil.rmtree(self._path('guests'), ignore_errors=True)
            os.makedirs(self._path('guests'))
            # The try-out inventory's journal records the datacenter forgotten here.
            system.forget_journal(opts.state_dir)
        for port, what in ((opts.api_port, 'API'), (opts.proxy_port, 'proxy'), (opts.control_port, 'control')):
            if not system.port_free(opts.host, port):
                raise ClusterError('the {0} port {1} on {2} is in use: stop what listens there, or choose another '
                                   'port (--{3}-port)'.format(what, port, opts.host, what.lower()))
        if os.geteuid() == 0:
            # sshd's privilege separation directory; there is no systemd here to make it.
            os.makedirs('/run/sshd', mode=0o755, exist_ok=True)
        self.secrets = self._load_secrets()
        self.paths = pki.ensure_pki(self._path('pki'), (opts.host,))
        self.paths['ssh_private_key'] = self._path('ssh', 'id_ed25519')
        public_key = pki.ssh_key_pair(self.paths['ssh_private_key'], 'localpve')
        self.client_ssl = ssl.create_default_context(cafile=self.paths['ca_file'])
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(self.paths['cert_file'], self.paths['key_file'])

        pve = self.pve = SitePve(self, user=opts.user, password=self.secrets['password'], host=opts.host,
                                 port=opts.api_port)
        pve.time_scale = opts.time_scale
        if opts.latency:
            pve.slow_network(opts.latency)
        if os.path.exists(self._path(DATACENTER_FILE)):
            with open(self._path(DATACENTER_FILE), encoding='utf-8') as fh:
                self.guests.load(restore(pve, fh.read()))
            LOG.info('datacenter restored from %s: %d containers', self._path(DATACENTER_FILE), len(pve.cts))
        else:
            seed(pve, opts)
            self.guests.load({})
        if pve.ct(opts.template_vmid) is not None:
            await self.guests.seed_template(opts.template_vmid, public_key)
        pve.users[FOREIGN_USER] = self.secrets['foreign_password']
        pve.apitokens['{0}!{1}'.format(opts.user, opts.token_name)] = self.secrets['token_secret']
        self.foreign = ForeignClient(self, FOREIGN_USER, self.secrets['foreign_password'])

        try:
            await pve.start(self.paths['cert_file'], self.paths['key_file'])
            self.proxy = FaultProxy(pve.url, opts.host, opts.proxy_port, server_ssl, self.client_ssl)
            await self.proxy.start()
            self.control = ControlServer(self, opts.host, opts.control_port, self.secrets['control_token'])
            await self.control.start()
            self.models = ModelServer(opts.host, 0, default=NOTES, token=self.secrets['control_token']).start()
            if opts.guests == 'debian':
                self.package_cache = pkgcache.PackageCache(pkgcache.cache_dir(debian.cache_dir()), opts.host,
                                                           debian.AGENT_UID)
                await self.package_cache.start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ClusterError('a port on {0} is in use ({1}): choose other ports'.format(opts.host, exc)) from None
            raise
        await self.guests.reconcile()
        self.save(force=True)
        self.info = self._info(public_key)
        pki.write_private(self._path(INFO_FILE), (json.dumps(self.info, indent=2, sort_keys=True) + '\n').encode())
        self._tick = asyncio.ensure_future(self._ticker())
        LOG.info('cluster up: API %s, proxy %s', pve.url, self.proxy.url)

    def _info(self, public_key):
        opts = self.options
        template = self.pve.ct(opts.template_vmid)
        guest_root = os.path.join(self.guests.dir, '{vmid}', 'root')
        return {
            'format': INFO_FORMAT, 'pid': os.getpid(), 'state_dir': opts.state_dir, 'started_at': self._started,
            'log_file': self._path('cluster.log'),
            'api_url': self.pve.url, 'api_host': opts.host, 'api_port': self.pve.port,
            'proxy_url': self.proxy.url, 'proxy_host': opts.host, 'proxy_port': self.proxy.port,
            'ca_file': self.paths['ca_file'],
            'user': opts.user, 'password': self.secrets['password'],
            'token_id': '{0}!{1}'.format(opts.user, opts.token_name), 'token_name': opts.token_name,
            'token_secret': self.secrets['token_secret'],
            'nodes': sorted(self.pve.nodes), 'template_vmid': opts.template_vmid,
            'template_node': template.node if template else opts.nodes[0],
            'pool': opts.pool, 'storage': opts.storage, 'bridge': opts.bridge,
            'ssh_private_key': self.paths['ssh_private_key'], 'ssh_public_key': public_key,
            'ssh_user': opts.ssh_user, 'ssh_port': opts.ssh_port, 'ssh_known_hosts': self.guests.known_hosts,
            'address_range': opts.guest_range, 'addressing': opts.addressing, 'dhcp_delay': opts.dhcp_delay,
            'guests': opts.guests, 'guest_root': guest_root, 'agent_user': opts.agent_user,
            # What the collection's guest_root option is: the host tier's guests live in guest_root, the debian
            # tier's in a root of their own.
            'guest_prefix': guest_root if opts.guests == 'host' else '/',
            'debian_base': self.guests.roots.base if self.guests.roots is not None else None,
            'package_cache': ({'dir': self.package_cache.dir, 'apt_proxy': self.package_cache.url}
                              if self.package_cache is not None else None),
            'time_scale': opts.time_scale, 'latency': opts.latency,
            'foreign_user': FOREIGN_USER, 'foreign_password': self.secrets['foreign_password'],
            'control': {'url': self.control.url, 'token': self.secrets['control_token']},
            'agents': agent_settings(self.models.url, self.guests.agent_bin),
        }

    async def _ticker(self):
        count = 0
        while True:
            await asyncio.sleep(TICK)
            try:
                await self.guests.reconcile()
                count += 1
                if count % SAVE_EVERY == 0:
                    self.save()
            except Exception:  # noqa: BLE001 - one bad tick must not end the cluster
                LOG.exception('reconcile failed')

    async def stop(self):
        """Let running tasks end, stop every sshd, save the datacenter, close every listener."""
        if self._tick is not None:
            self._tick.cancel()
            try:
                await self._tick
            except asyncio.CancelledError:
                pass
            self._tick = None
        if self.pve is not None and self.pve.runner is not None:
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while any(t['status'] == 'running' for t in self.pve.tasks.values()) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await self.guests.reconcile()
        await self.guests.stop_all()
        if self.pve is not None and self.info is not None:
            self.save()
        for part in (self.foreign, self.control, self.proxy, self.package_cache):
            if part is not None:
                await (part.close() if part is self.foreign else part.stop())
        if self.models is not None:
            self.models.stop()
        if self.pve is not None:
            await self.pve.stop()
        if self.info is not None and os.path.exists(self._path(INFO_FILE)):
            os.unlink(self._path(INFO_FILE))
        LOG.info('cluster stopped')

    # -------------------------------------------------------------- hooks

    async def after_task(self, ttype, user, vm, ok):
        await self.guests.reconcile()
        if ttype in ('vzsnapshot', 'vzdelsnapshot') and vm is not None:
            # A snapshot keeps the guest's files as they were when it was taken; a deleted one drops them.
            self.guests.sync_snapshots(vm)
        if ok and ttype == 'vzclone' and vm is not None and user != FOREIGN_USER:
            arm = _take(self.tampers, vm.vmid)
            if arm is not None:
                await self.foreign.edit_description(vm.vmid, arm['description'])

    async def before_clone(self, user, newid):
        if user != FOREIGN_USER and self.pve.guest(newid) is None:
            arm = _take([s for s in self.snipes if s['on'] == 'clone'], newid)
            if arm is not None:
                await self._claim(arm, newid)

    async def after_nextid(self, vmid, user):
        if user != FOREIGN_USER:
            arm = _take([s for s in self.snipes if s['on'] == 'nextid'], vmid)
            if arm is not None:
                await self._claim(arm, vmid)

    async def _claim(self, arm, vmid):
        """The foreign client takes vmid for a snipe; if another clone got there first, the snipe waits for the next."""
        try:
            await self.foreign.claim(vmid, arm['pool'])
        except ClusterError:
            if self.pve.guest(vmid) is None:
                raise
            arm['hits'].pop()
            if arm['times'] is not None:
                arm['times'] += 1

    def born(self, ct):
        """A container this site made: it starts and stops as long as this site's containers do."""
        for key, secs in GUEST_SECS.items():
            setattr(ct, key, secs)

    # --------------------------------------------------------- operations

    async def op(self, name, arguments):
        """Run the operation name with the arguments (a dict); its JSON-able result."""
        method = getattr(self, 'op_' + str(name), None)
        if method is None:
            raise ClusterError('unknown operation {0!r}'.format(name))
        try:
            result = method(**arguments)
        except TypeError as exc:
            raise ClusterError('bad arguments for {0}: {1}'.format(name, exc)) from None
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def _ct(self, vmid):
        ct = self.pve.ct(int(vmid))
        if ct is None:
            raise ClusterError('no container {0}'.format(vmid))
        return ct

    def op_status(self):
        pve = self.pve
        return {
            'pid': os.getpid(), 'api_url': pve.url, 'proxy_url': self.proxy.url, 'uptime': time.time() - self._started,
            'time_scale': pve.time_scale, 'quorate': pve.quorate,
            'nodes': {name: bool(state.get('online', True)) for name, state in sorted(pve.nodes.items())},
            'network': dict(pve.network), 'tasks_running': sum(1 for t in pve.tasks.values()
                                                               if t['status'] == 'running'),
            'pve_failures': [dict(rule, method=key[0], path=key[1]) for key, rule in pve.failures.items()],
            'proxy_rules': self.proxy.view(), 'guest_faults': [dict(f) for f in self.guests.faults],
            'dhcp': {'delay': self.guests.dhcp_delay,
                     'per_vmid': {str(k): v for k, v in self.guests.dhcp_override.items()}},
            'foreign': {'snipes': self.snipes, 'tampers': self.tampers},
            'guests': self.guests.view(),
            'package_cache': self.package_cache.view() if self.package_cache is not None else None,
        }

    def op_proxy_add(self, action, method, path, times=1, skip=0, seconds=None, status=None, message=None,
                     errors=None):
        return self.proxy.add(action, method, path, times=times, skip=skip, seconds=seconds, status=status,
                              message=message, errors=errors)

    def op_proxy_rules(self):
        return self.proxy.view()

    def op_proxy_remove(self, rule_id):
        self.proxy.remove(rule_id)
        return self.proxy.view()

    def op_proxy_clear(self):
        self.proxy.clear()
        return []

    def op_pve_fail(self, method, path, error=None, status=None, message=None, times=None):
        method = str(method).upper()
        if error is None and (status is None or message is None):
            raise ClusterError('a fakepve failure needs error=<catalogued name>, or status and message')
        try:
            self.pve.fail(method, path, status=None if status is None else int(status), message=message,
                          error=error, times=None if times is None else int(times))
        except (ValueError, TypeError) as exc:
            raise ClusterError(str(exc)) from None
        return {'method': method, 'path': path, 'error': error, 'status': status, 'message': message,
                'times': times}

    def op_pve_errors(self, method, path):
        return [{k: e[k] for k in ('name', 'status', 'message', 'in_task') if k in e}
                for e in self.pve.errors_for(str(method).upper(), path)]

    def op_pve_network(self, latency=None, jitter=None, node=None, drop_rate=None, hang_rate=None, hang_secs=None):
        net = self.pve.network
        if latency is not None or jitter is not None:
            self.pve.slow_network(float(latency if latency is not None else net['latency']),
                                  float(jitter if jitter is not None else net['jitter']), node=node)
        if drop_rate is not None or hang_rate is not None or hang_secs is not None:
            rates = [float(r) for r in (drop_rate if drop_rate is not None else net['drop_rate'],
                                        hang_rate if hang_rate is not None else net['hang_rate'])]
            if any(not 0 <= r <= 1 for r in rates):
                raise ClusterError('drop and hang rates are shares of requests, between 0 and 1')
            self.pve.flaky_network(rates[0], rates[1], float(hang_secs if hang_secs is not None else net['hang_secs']))
        return dict(net)

    def op_pve_quorum(self, quorate):
        if quorate:
            self.pve.regain_quorum()
        else:
            self.pve.lose_quorum()
        return {'quorate': self.pve.quorate}

    def op_pve_node(self, node, online):
        if node not in self.pve.nodes:
            raise ClusterError('no node {0!r} (nodes: {1})'.format(node, ', '.join(sorted(self.pve.nodes))))
        self.pve.set_node_offline(node, offline=not online)
        return {'node': node, 'online': bool(online)}

    def op_pve_lock(self, vmid, lock='snapshot'):
        ct = self._ct(vmid)
        ct.lock = lock
        return {'vmid': ct.vmid, 'lock': ct.lock}

    def op_pve_unlock(self, vmid):
        ct = self._ct(vmid)
        ct.lock = None
        return {'vmid': ct.vmid, 'lock': None}

    async def op_pve_hold_lock(self, vmid, seconds):
        ct = self._ct(vmid)
        try:
            await self.pve.hold_config_lock(ct.vmid, float(seconds))
        except Exception as exc:  # noqa: BLE001 - fakepve says why (TaskError: already held)
            raise ClusterError('cannot hold the config lock of {0}: {1}'.format(vmid, exc)) from None
        return {'vmid': ct.vmid, 'seconds': float(seconds)}

    def op_pve_ct(self, vmid, start_secs=None, shutdown_secs=None, stop_secs=None, start_error=None):
        ct = self._ct(vmid)
        for key, value in (('start_secs', start_secs), ('shutdown_secs', shutdown_secs), ('stop_secs', stop_secs)):
            if value is not None:
                if float(value) < 0:
                    raise ClusterError('{0} cannot be negative'.format(key))
                setattr(ct, key, float(value))
        if start_error is not None:
            ct.start_error = start_error or None
        return {k: getattr(ct, k) for k in ('vmid', 'start_secs', 'shutdown_secs', 'stop_secs', 'start_error')}

    def op_pve_access(self, token_id=None, token_secret=None, grants=(), pool=None, pool_vms=(), pool_storage=()):
        """What an administrator sets up with pveum for a restricted controller: an API token (``token_id``
        'user@realm!name', its ``token_secret``), ACL ``grants`` ([principal, path, [privileges]], the privileges of
        the role the ACL names), and members of ``pool`` (containers, storages). From the first grant on, the fake
        checks every privilege of every user but root@pam."""
        pve = self.pve
        if token_id:
            pve.apitokens[token_id] = token_secret
            pve.users.setdefault(token_id.split('!')[0], None)
        for principal, path, privs in grants:
            pve.grant(principal, path, *privs)
        if pool:
            if pool not in pve.pools:
                raise ClusterError('no pool {0!r}'.format(pool))
            pve.pools[pool].update(int(vmid) for vmid in pool_vms)
            pve.pool_info.setdefault(pool, {'comment': None, 'storage': set()})['storage'].update(pool_storage)
        return {'acl': {user: [[path, sorted(privs)] for path, privs in granted]
                        for user, granted in (pve.acl or {}).items()}}

    def op_pve_clear(self):
        pve = self.pve
        pve.failures.clear()
        pve.network.update(latency=0.0, jitter=0.0, node_latency={}, drop_rate=0.0, hang_rate=0.0)
        if self.options.latency:
            pve.slow_network(self.options.latency)
        pve.regain_quorum()
        for node in pve.nodes:
            pve.set_node_offline(node, offline=False)
        return self.op_status()

    def op_guest_fault(self, kind, vmid=None, seconds=None, times=1, match=None, after=0.0):
        return self.guests.add_fault(kind, vmid=vmid, seconds=seconds, times=times, match=match, after=after)

    def op_guest_faults(self):
        return [dict(f) for f in self.guests.faults]

    def op_guest_clear(self):
        self.guests.clear_faults()
        return []

    def op_dhcp(self, delay, vmid=None):
        return self.guests.set_dhcp(delay, vmid=vmid)

    async def op_foreign_create(self, vmid=None, node=None, pool=None, hostname=None, description=None, start=False,
                                how='clone'):
        if node is not None and node not in self.pve.nodes:
            raise ClusterError('no node {0!r}'.format(node))
        return await self.foreign.create(vmid=vmid, node=node, pool=pool, hostname=hostname,
                                         description=description, start=bool(start), how=how)

    async def op_foreign_edit(self, vmid, description):
        return await self.foreign.edit_description(vmid, description)

    def op_foreign_snipe(self, on='clone', pool=None, times=1):
        if on not in ('clone', 'nextid'):
            raise ClusterError("a snipe happens on 'clone' or 'nextid', not {0!r}".format(on))
        arm = {'on': on, 'pool': pool, 'times': _times(times), 'hits': []}
        self.snipes.append(arm)
        return arm

    def op_foreign_tamper(self, description, times=1):
        if description is None:
            raise ClusterError('a tamper needs the description to write')
        arm = {'description': str(description), 'times': _times(times), 'hits': []}
        self.tampers.append(arm)
        return arm

    def op_foreign_clear(self):
        self.snipes, self.tampers = [], []
        return {}

    def op_clear(self):
        self.op_proxy_clear()
        self.op_guest_clear()
        self.op_foreign_clear()
        self.guests.set_dhcp(self.options.dhcp_delay)
        self.guests.dhcp_override.clear()
        return self.op_pve_clear()

    def op_save(self):
        return self.save(force=True)

    def op_shutdown(self):
        if self.on_shutdown is None:
            raise ClusterError('this cluster runs inside another program: stop it there')
        self.on_shutdown()
        return {'stopping': os.getpid()}


def _times(value):
    if value is None:
        return None
    if int(value) < 1:
        raise ClusterError('times must be at least 1 (or none for always)')
    return int(value)


def _take(arms, vmid):
    """The first armed entry with times left (counted down, the hit recorded), or None."""
    for arm in arms:
        if arm['times'] is None or arm['times'] > 0:
            if arm['times'] is not None:
                arm['times'] -= 1
            arm['hits'].append({'vmid': vmid, 'time': time.time()})
            return arm
    return None


def _uuid():
    raw = secrets.token_hex(16)
    return '-'.join((raw[:8], raw[8:12], raw[12:16], raw[16:20], raw[20:]))


class ControlServer:
    """POST /op/<name> with the arguments as a JSON object, and the token in X-LocalPVE-Token."""

    def __init__(self, site, host, port, token):
        self.site = site
        self.host = host
        self.port = port
        self.token = token
        self.runner = None

    @property
    def url(self):
        return 'http://{0}:{1}'.format(self.host, self.port)

    async def start(self):
        app = web.Application()
        app.router.add_post('/op/{name}', self._handle)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port).start()
        self.port = self.runner.addresses[0][1]

    async def stop(self):
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _handle(self, request):
        if request.headers.get(TOKEN_HEADER) != self.token:
            return web.json_response({'ok': False, 'error': 'wrong or missing control token'}, status=403)
        name = request.match_info['name']
        try:
            arguments = await request.json() if request.can_read_body else {}
            if not isinstance(arguments, dict):
                raise ClusterError('the arguments must be a JSON object')
            result = await self.site.op(name, arguments)
        except (ClusterError, ValueError, TypeError, KeyError) as exc:
            return web.json_response({'ok': False, 'error': str(exc)}, status=400)
        except Exception as exc:  # noqa: BLE001 - the caller gets the reason instead of a hung connection
            LOG.exception('control operation %s failed', name)
            return web.json_response({'ok': False, 'error': '{0}: {1}'.format(type(exc).__name__, exc)}, status=500)
        return web.json_response({'ok': True, 'result': result})
