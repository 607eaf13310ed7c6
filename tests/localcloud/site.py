"""The cloud: moto in server mode, the fault proxy in front of it, the fleet and its guests, the foreign client
and the control API, owned by one CloudSite on one asyncio event loop (cloud.py runs it).

moto keeps its state in this process's memory: a cloud that stops forgets its instances, and the next start
seeds a fresh one (the guests' files of the last one are removed then).
"""

import asyncio
import errno
import json
import logging
import os
import secrets
import shutil
import string
import time

from tests.localpve import debian, pki, system
from tests.localpve.guests import stop_leftovers
from tests.localpve.harness import ControlServer
from tests.models import NOTES, ModelServer
from tests.models.tryout import agent_settings

from .azure_site import AzurePart
from .config import ACCOUNT_ID, INFO_FILE, CloudError
from .fleet import Fleet, teach_moto
from .folder_site import FolderPart
from .gcp_site import GcpPart
from .hetzner_site import HetznerPart
from .proxy import FaultProxy
from .seed import forged_marker, seed

LOG = logging.getLogger('localcloud')
INFO_FORMAT = 1
SECRETS_FILE = 'secrets.json'
TICK = 0.1
MOTO_SETTINGS = {'MOTO_ENABLE_AMI_VALIDATION': 'ENABLE_AMI_VALIDATION',
                 'MOTO_ENABLE_KEYPAIR_VALIDATION': 'ENABLE_KEYPAIR_VALIDATION',
                 'MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION': 'EC2_ENABLE_INSTANCE_TYPE_VALIDATION'}
DEFAULT_SCOPE = 'disposable-workspaces'


def _access_key(prefix):
    alphabet = string.ascii_uppercase + string.digits
    return prefix + ''.join(secrets.choice(alphabet) for dummy in range(20 - len(prefix)))


def start_moto(host, port):
    """moto's server in a thread of this process, with the validations a real EC2 does; its URL and the server."""
    for env in MOTO_SETTINGS:
        os.environ[env] = '1'
    # pylint: disable=import-outside-toplevel
    from moto import settings
    from moto.server import ThreadedMotoServer
    for attribute in MOTO_SETTINGS.values():
        setattr(settings, attribute, True)
    teach_moto()
    logging.getLogger('werkzeug').setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    bound = server.get_host_and_port()
    return 'http://{0}:{1}'.format(*bound), server


class CloudSite:
    """Everything of one cloud. Operations are the op_* methods."""

    def __init__(self, options, on_shutdown=None, scope=DEFAULT_SCOPE):
        self.options = options
        self.on_shutdown = on_shutdown
        self.scope = scope
        self.moto = None
        self.moto_url = None
        self.proxy = None
        self.control = None
        # The cloud's model endpoint: a scripted stand-in of the agents' model APIs (tests/models).
        self.models = None
        self.secrets = None
        self.info = None
        self._tick = None
        self._started = None
        self._machine_roots = None
        self.fleet = Fleet(self)
        self.hetzner = HetznerPart(self)
        self.azure = AzurePart(self)
        self.gcp = GcpPart(self)
        self.folder = FolderPart(self)

    def machine_roots(self):
        """debian tier: the machines' roots (one set for every fake's machines), on the Debian base root."""
        if self._machine_roots is None:
            self._machine_roots = debian.Roots(self._path('guests'), debian.ensure_base())
        return self._machine_roots

    def _path(self, *parts):
        return os.path.join(self.options.state_dir, *parts)

    def _load_secrets(self):
        path = self._path(SECRETS_FILE)
        data = {}
        if os.path.exists(path):
            with open(path, encoding='utf-8') as fh:
                data = json.load(fh)
        fresh = {'access_key_id': _access_key('AKIALC'), 'secret_access_key': secrets.token_urlsafe(30),
                 'foreign_access_key_id': _access_key('AKIAFR'), 'foreign_secret_access_key': secrets.token_urlsafe(30),
                 'control_token': secrets.token_urlsafe(24)}
        if any(k not in data for k in fresh):
            data = dict(fresh, **data)
            pki.write_private(path, json.dumps(data, indent=2).encode())
        return data

    async def start(self):
        """Start everything, or raise CloudError (stop() then ends what did start)."""
        opts = self.options
        self._started = time.time()
        for sub in ('', 'ssh'):
            os.makedirs(self._path(sub), exist_ok=True)
        stop_leftovers(opts.state_dir)
        # moto starts empty: the files of the last cloud's instances belong to nothing now.
        shutil.rmtree(self._path('guests'), ignore_errors=True)
        os.makedirs(self._path('guests'))
        # ...and the try-out inventories' journal of the last cloud records instances that are gone.
        system.forget_journal(opts.state_dir)
        for port, what, option in ((opts.port, 'endpoint', '--port'), (opts.moto_port, 'moto', '--moto-port'),
                                   (opts.control_port, 'control', '--control-port')):
            if not system.port_free(opts.host, port):
                raise CloudError('the {0} port {1} on {2} is in use: stop what listens there, or choose another '
                                 'port ({3})'.format(what, port, opts.host, option))
        if os.geteuid() == 0:
            os.makedirs('/run/sshd', mode=0o755, exist_ok=True)
        self.secrets = self._load_secrets()
        private_key = self._path('ssh', 'id_ed25519')
        public_key = pki.ssh_key_pair(private_key, 'localcloud')
        try:
            self.moto_url, self.moto = start_moto(opts.host, opts.moto_port)
            self.proxy = FaultProxy(self.moto_url, opts.host, opts.port, self.fleet)
            await self.proxy.start()
            self.control = ControlServer(self, opts.host, opts.control_port, self.secrets['control_token'])
            await self.control.start()
            self.models = ModelServer(opts.host, 0, default=NOTES, token=self.secrets['control_token']).start()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CloudError('a port on {0} is in use ({1}): choose other ports'.format(opts.host, exc)) from None
            raise
        info = self._info(private_key, public_key)
        info['hetzner'] = await self.hetzner.start(public_key)
        info['azure'] = await self.azure.start(public_key)
        info['gcp'] = await self.gcp.start(public_key)
        info['folder'] = await self.folder.start(public_key)
        if opts.guests == 'debian':
            # The machines are Debian userlands of their own: the collection uses their paths as they are.
            for part in ('hetzner', 'azure', 'gcp', 'folder'):
                info[part]['guest_prefix'] = '/'
        loop = asyncio.get_running_loop()
        info['seed'] = await loop.run_in_executor(None, seed, info, self.scope)
        await self.fleet.reconcile()
        self.info = info
        pki.write_private(self._path(INFO_FILE), (json.dumps(info, indent=2, sort_keys=True) + '\n').encode())
        self._tick = asyncio.ensure_future(self._ticker())
        LOG.info('cloud up: endpoint %s, moto %s', self.proxy.url, self.moto_url)

    def _info(self, private_key, public_key):
        opts = self.options
        guest_root = os.path.join(self.fleet.dir, '{vmid}', 'root')
        return {
            'format': INFO_FORMAT, 'pid': os.getpid(), 'state_dir': opts.state_dir, 'started_at': self._started,
            'log_file': self._path('cloud.log'),
            'endpoint_url': self.proxy.url, 'host': opts.host, 'port': self.proxy.port, 'moto_url': self.moto_url,
            'region': opts.region, 'account_id': ACCOUNT_ID,
            'access_key_id': self.secrets['access_key_id'], 'secret_access_key': self.secrets['secret_access_key'],
            'foreign': {'access_key_id': self.secrets['foreign_access_key_id'],
                        'secret_access_key': self.secrets['foreign_secret_access_key']},
            'ssh_private_key': private_key, 'ssh_public_key': public_key, 'ssh_user': opts.ssh_user,
            'ssh_port': opts.ssh_port, 'ssh_known_hosts': self.fleet.known_hosts,
            'address_range': opts.guest_range, 'public_range': opts.public_range,
            'guest_root': guest_root, 'guest_prefix': guest_root if opts.guests == 'host' else '/',
            'guests': opts.guests, 'agent_user': opts.agent_user,
            'boot_secs': opts.boot_secs, 'stop_secs': opts.stop_secs, 'shutdown_secs': opts.shutdown_secs,
            'control': {'url': self.control.url, 'token': self.secrets['control_token']},
            'agents': agent_settings(self.models.url, self.fleet.agent_bin),
        }

    async def _ticker(self):
        while True:
            await asyncio.sleep(TICK)
            try:
                await self.fleet.reconcile()
                await self.hetzner.tick()
                await self.azure.tick()
                await self.gcp.tick()
                await self.folder.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not end the cloud
                LOG.exception('reconcile failed')

    async def stop(self):
        """Stop every guest, close every listener, stop moto."""
        if self._tick is not None:
            self._tick.cancel()
            try:
                await self._tick
            except asyncio.CancelledError:
                pass
            self._tick = None
        # The fakes' guests share one directory, which a stop_all sweeps: every fake stops its own guests first.
        parts = (self.hetzner, self.azure, self.gcp, self.folder)
        for guests in [self.fleet] + [p.guests for p in parts if p.guests is not None]:
            await guests.stop_all(sweep=False)
        await self.fleet.stop_all()
        for part in parts:
            await part.stop()
        for part in (self.control, self.proxy):
            if part is not None:
                await part.stop()
        if self.models is not None:
            self.models.stop()
        if self.moto is not None:
            self.moto.stop()
            self.moto = None
        if self.info is not None and os.path.exists(self._path(INFO_FILE)):
            os.unlink(self._path(INFO_FILE))
        LOG.info('cloud stopped')

    # --------------------------------------------------------- operations

    async def op(self, name, arguments):
        method = getattr(self, 'op_' + str(name), None)
        if method is None:
            raise CloudError('unknown operation {0!r}'.format(name))
        try:
            result = method(**arguments)
        except TypeError as exc:
            raise CloudError('bad arguments for {0}: {1}'.format(name, exc)) from None
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def op_status(self):
        self.fleet.refresh()
        return {'pid': os.getpid(), 'endpoint_url': self.proxy.url, 'moto_url': self.moto_url,
                'uptime': time.time() - self._started, 'region': self.options.region,
                'requests': self.proxy.requests, 'proxy_rules': self.proxy.view(),
                'instance_faults': [dict(a) for a in self.fleet.arms], 'guest_faults': [dict(f) for f in
                                                                                        self.fleet.faults],
                'instances': self.fleet.view()}

    def op_instances(self):
        # Also what was done behind the proxy's back (straight to moto) since the last tick.
        self.fleet.refresh()
        return self.fleet.view()

    def op_proxy_add(self, action, operation, times=1, skip=0, seconds=None, code=None, message=None, status=None,
                     size=None, repeat_at=None, fail_at=None, endless=False, match=None):
        return self.proxy.add(action, operation, times=times, skip=skip, seconds=seconds, code=code, message=message,
                              status=status, size=size, repeat_at=repeat_at, fail_at=fail_at, endless=endless,
                              match=match)

    def op_proxy_rules(self):
        return self.proxy.view()

    def op_proxy_remove(self, rule_id):
        self.proxy.remove(rule_id)
        return self.proxy.view()

    def op_proxy_clear(self):
        self.proxy.clear()
        return []

    def op_instance_fault(self, kind, instance_id=None, times=1, seconds=None, boot_secs=None, stop_secs=None,
                          shutdown_secs=None):
        self.fleet.refresh()
        if kind in ('console_key', 'console_silent'):
            if seconds is not None or boot_secs is not None or stop_secs is not None or shutdown_secs is not None:
                raise CloudError('a {0} fault takes no seconds'.format(kind))
            return self.fleet.arm(kind, instance_id, times=times)
        if kind == 'invisible':
            if boot_secs is not None or stop_secs is not None or shutdown_secs is not None:
                raise CloudError('an invisible fault takes seconds only')
            return self.fleet.arm(kind, instance_id, times=times, seconds=seconds)
        if seconds is not None:
            raise CloudError('a timing fault takes boot_secs, stop_secs and shutdown_secs, not seconds')
        return self.fleet.arm(kind, instance_id, times=times, boot_secs=boot_secs, stop_secs=stop_secs,
                              shutdown_secs=shutdown_secs)

    def op_instance_clear(self):
        self.fleet.clear_arms()
        return []

    def op_guest_fault(self, kind, instance_id=None, seconds=None, times=1, match=None, after=0.0):
        return self.fleet.add_fault(kind, vmid=instance_id, seconds=seconds, times=times, match=match, after=after)

    def op_guest_clear(self):
        self.fleet.clear_faults()
        return []

    async def op_foreign_create(self, tags=None, copy_tags_of=None, count=1, running=True):
        """The foreign client launches instances with the seeded image in the seeded subnet: with tags, or with
        the tags of instance copy_tags_of (its marker replaced by one no controller made, unless tags name
        ephemera:marker themselves)."""
        if tags is not None and not isinstance(tags, dict):
            raise CloudError('tags must map keys to values')
        wanted = dict(tags or {})
        if copy_tags_of:
            self.fleet.refresh()
            source = self.fleet.instances.get(copy_tags_of)
            if source is None:
                raise CloudError('no instance {0} to copy tags from'.format(copy_tags_of))
            copied = source.tags()
            copied['ephemera:marker'] = forged_marker(copied.get('ephemera:workspace', 'copy'), copy_tags_of)
            wanted = dict(copied, **wanted)
        wanted = {k: v for k, v in wanted.items() if not k.startswith('aws:')}
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, self._foreign_launch, wanted, int(count))
        if not running:
            await loop.run_in_executor(None, lambda: self._foreign_ec2().stop_instances(InstanceIds=ids))
        self.fleet.refresh()
        return {'instance_ids': ids, 'tags': wanted}

    def _foreign_ec2(self):
        from .clients import _client  # pylint: disable=import-outside-toplevel
        foreign = self.info['foreign']
        return _client('ec2', self.info, foreign['access_key_id'], foreign['secret_access_key'],
                       endpoint=self.moto_url)

    def _foreign_launch(self, tags, count):
        seeded = self.info['seed']
        spec = [{'ResourceType': 'instance', 'Tags': [{'Key': k, 'Value': str(v)} for k, v in tags.items()]}] \
            if tags else []
        answer = self._foreign_ec2().run_instances(ImageId=seeded['image_id'], InstanceType=seeded['instance_type'],
                                                   MinCount=count, MaxCount=count, SubnetId=seeded['subnet_id'],
                                                   TagSpecifications=spec)
        return [i['InstanceId'] for i in answer['Instances']]

    async def op_foreign_terminate(self, instance_ids):
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: self._foreign_ec2().terminate_instances(
            InstanceIds=list(instance_ids)))
        self.fleet.refresh()
        return {'instance_ids': list(instance_ids)}

    def op_azure(self, action, arguments=None):
        """The ARM fake's operations (azure_site.AzurePart.op_*)."""
        return self.azure.op(action, arguments)

    def op_folder(self, action, arguments=None):
        """The folder provider's operations (folder_site.FolderPart.op_*)."""
        return self.folder.op(action, arguments)

    def op_gcp(self, action, arguments=None):
        """The Compute Engine fake's operations (gcp_site.GcpPart.op_*)."""
        return self.gcp.op(action, arguments)

    def op_hetzner(self, action, arguments=None):
        """The Hetzner Cloud fake's operations (hetzner_site.HetznerPart.op_*)."""
        return self.hetzner.op(action, arguments)

    def op_clear(self):
        self.op_proxy_clear()
        if self.hetzner.fake is not None:
            self.hetzner.fake.clear_rules()
        if self.azure.fake is not None:
            self.azure.fake.clear_rules()
            self.azure.fake.clear_boot_faults()
        if self.gcp.fake is not None:
            self.gcp.op_clear()
        self.op_guest_clear()
        self.op_instance_clear()
        return self.op_status()

    def op_shutdown(self):
        if self.on_shutdown is None:
            raise CloudError('this cloud runs inside another program: stop it there')
        self.on_shutdown()
        return {'stopping': os.getpid()}
