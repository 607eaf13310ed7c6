"""The instances as this cloud shows them, and their guests.

moto changes an instance's state at once (running the moment RunInstances returns, terminated the moment
TerminateInstances does). The fleet gives every instance the states EC2 shows on the way: pending for boot_secs
after a launch or a start, stopping for stop_secs, shutting-down for shutdown_secs; the proxy rewrites the
answers with these states and with the guest's loopback addresses in place of moto's made-up ones.

The guests reuse the try-out cluster's machinery (tests/localpve/guests.py): one sshd per running instance, on
its private and its public loopback address, with its files under <state>/guests/<instance id>/root.
"""

import base64
import hashlib
import logging
import os
import shutil
import time

import yaml

from tests.localpve import debian
from tests.localpve import guests as pve_guests
from tests.localpve import pki
from tests.localpve.addresses import AddressPool

from . import ec2xml
from .config import CloudError
from .machines import MachineGuests

LOG = logging.getLogger('localcloud.fleet')
TIMING_KEYS = ('boot_secs', 'stop_secs', 'shutdown_secs')
CONSOLE_FAULTS = ('console_key', 'console_silent')
# What a copy of a live guest's files leaves out (sockets, pipes), as the try-out cluster's snapshots do.
SPECIAL_FILES = pve_guests._special_files  # pylint: disable=protected-access
# Seconds an image made by CreateImage stays pending after its copy of the instance's files is complete.
IMAGE_SECS = 0.3


# Called with (instance id, AMI id) by CreateImage in this process, before it answers: the fleet copies the
# instance's files for the image then (the image's snapshot of the instance's volume).
IMAGE_HOOKS = []


def teach_moto():
    """What moto lacks of EC2, added to the moto of this process: DescribeInstances' ``client-token`` filter (the
    instances launched with one of the filter's client tokens), and CreateImage as the EC2 API reference describes
    it: a name already used by an image of the account in the region is ``InvalidAMIName.Duplicate``, the tags of
    ``TagSpecifications`` with ``ResourceType`` snapshot go on the image's snapshots, and the image is ``pending``
    until its snapshot is complete (the fleet makes it ``available`` when it copied the instance's files)."""
    from moto.ec2 import utils  # pylint: disable=import-outside-toplevel
    from moto.ec2.exceptions import EC2ClientError  # pylint: disable=import-outside-toplevel
    from moto.ec2.models.amis import AmiBackend  # pylint: disable=import-outside-toplevel
    utils.filter_dict_attribute_mapping.setdefault('client-token', 'client_token')
    if getattr(AmiBackend.create_image, 'taught', False):
        return
    moto_create_image = AmiBackend.create_image

    def create_image(self, instance_id, name, description, tag_specifications):
        for ami in list(self.amis.values()):
            if ami.name == name and ami.owner_id == self.account_id:
                raise EC2ClientError('InvalidAMIName.Duplicate', 'AMI name {0} is already in use by AMI {1}'.format(
                    name, ami.id))
        image_tags, snapshot_tags = [], []
        for spec in tag_specifications or []:
            if spec.get('ResourceType') == 'snapshot':
                snapshot_tags += spec.get('Tags') or []
            else:
                image_tags.append(spec)
        ami = moto_create_image(self, instance_id, name, description, image_tags)
        for tag in snapshot_tags:
            ami.ebs_snapshot.add_tag(tag['Key'], tag['Value'])
        ami.state = 'pending'
        for hook in IMAGE_HOOKS:
            hook(instance_id, ami.id)
        return ami

    create_image.taught = True
    AmiBackend.create_image = create_image


def moto_images():
    """{AMI id: image} of every image moto holds that CreateImage made (from an instance)."""
    from moto.ec2.models import ec2_backends  # pylint: disable=import-outside-toplevel
    out = {}
    for dummy, regions in list(dict.items(ec2_backends)):
        for dummy, backend in list(dict.items(regions)):
            for ami in list(backend.amis.values()):
                if getattr(ami, 'instance_id', None):
                    out[ami.id] = ami
    return out


def moto_instances():
    """(account, region, instance) for every instance moto holds, without making backends that do not exist yet."""
    from moto.ec2.models import ec2_backends  # pylint: disable=import-outside-toplevel
    out = []
    for account, regions in list(dict.items(ec2_backends)):
        for region, backend in list(dict.items(regions)):
            for reservation in list(backend.reservations.values()):
                for instance in list(reservation.instances):
                    out.append((account, region, instance))
    return out


def moto_key(account, region, name):
    """The public key (OpenSSH line) of a key pair moto holds, or None."""
    from moto.ec2.models import ec2_backends  # pylint: disable=import-outside-toplevel
    regions = dict.get(ec2_backends, account)
    backend = dict.get(regions, region) if regions is not None else None
    pair = backend.key_pairs.get(name) if backend is not None and name else None
    if pair is None or not getattr(pair, 'material_public', None):
        return None
    material = pair.material_public
    return (material.decode() if isinstance(material, bytes) else str(material)).strip()


def user_data_keys(value):
    """The ssh_authorized_keys of a cloud-config user data (base64, as EC2 holds it), top level and per user."""
    if not value:
        return []
    try:
        text = base64.b64decode(str(value)).decode('utf-8')
    except (ValueError, UnicodeDecodeError):
        return []
    if not text.lstrip().startswith('#cloud-config'):
        return []
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    if not isinstance(data, dict):
        return []
    keys = list(data.get('ssh_authorized_keys') or [])
    for user in data.get('users') or []:
        if isinstance(user, dict):
            keys += list(user.get('ssh_authorized_keys') or [])
    return [str(k).strip() for k in keys if str(k).strip()]


class Instance:
    """One instance as the cloud shows it."""

    def __init__(self, instance_id, account, region, now, timing):
        self.id = instance_id
        self.account = account
        self.region = region
        self.moto_state = None
        self.state = None
        self.since = now
        self.timing = dict(timing)
        self.invisible_until = 0.0
        # Instance faults: the console shows a host key that is not the one the guest's sshd serves, or none.
        self.console_other_key = False
        self.console_silent = False
        self.moto_private = None
        self.moto_public = None
        self.private = None
        self.public = None
        self.key_name = None
        self.keys = []
        self.raw = None

    def view(self, now=None):
        """What the proxy needs to rewrite this instance in an answer."""
        addresses = {}
        if self.moto_private and self.private:
            addresses[self.moto_private] = self.private
        if self.moto_public and self.public:
            addresses[self.moto_public] = self.public
        return {'state': self.state, 'addresses': addresses,
                'private': self.state != 'terminated',
                'public': self.state not in ('terminated', 'stopped', 'stopping')}

    def tags(self):
        try:
            return {t['key']: t['value'] for t in self.raw.get_tags()}
        except (AttributeError, KeyError, TypeError):
            return {}

    def summary(self, now):
        return {'instance_id': self.id, 'account': self.account, 'region': self.region, 'state': self.state,
                'moto_state': self.moto_state, 'private_ip': self.private if self.state != 'terminated' else None,
                'public_ip': self.public if self.state not in ('terminated', 'stopped', 'stopping') else None,
                'key_name': self.key_name, 'tags': self.tags(),
                'client_token': ec2xml.shown_client_token(getattr(self.raw, 'client_token', None)),
                'invisible_for': max(0.0, round(self.invisible_until - now, 3)),
                'timing': dict(self.timing)}


class Fleet(MachineGuests):
    """The instances and their guests. refresh() follows moto; reconcile() makes the guests match."""

    honours_faults = True

    def __init__(self, site):
        super().__init__(site)
        opts = site.options
        self.pool = AddressPool(opts.guest_range, exclude=(opts.host,))
        self.public_pool = AddressPool(opts.public_range, exclude=(opts.host,))
        self.timing = {k: getattr(opts, k) for k in TIMING_KEYS}
        self.instances = {}
        # Arms for instances that are not launched yet: timing, invisible.
        self.arms = []
        # Images made by CreateImage: {AMI id: monotonic time its copy of the instance's files was complete}.
        self.images = {}
        IMAGE_HOOKS[:] = [self.capture_image]

    # ------------------------------------------------------------ images

    def image_root(self, ami_id):
        """The files of an image made from an instance (the snapshot of its volume), as they were at CreateImage."""
        return os.path.join(self.site.options.state_dir, 'images', ami_id, 'root')

    def capture_image(self, instance_id, ami_id):
        """CreateImage of ``instance_id`` (in moto's thread, before it answers): a copy of the instance's files."""
        source = self.root(instance_id)
        target = self.image_root(ami_id)
        shutil.rmtree(os.path.dirname(target), ignore_errors=True)
        if os.path.isdir(source) and self.roots is not None:
            debian.copy_files(source, target)
        elif os.path.isdir(source):
            shutil.copytree(source, target, symlinks=True, ignore=SPECIAL_FILES)
        else:
            os.makedirs(target)
        self.images[ami_id] = time.monotonic()
        LOG.info('image %s of instance %s: its files copied', ami_id, instance_id)

    def _follow_images(self, now):
        """An image is available once its copy is complete (a tick later: a while pending, as on EC2); the files of
        an image that is deregistered go with it."""
        if not self.images:
            return
        held = moto_images()
        for ami_id, ami in held.items():
            if ami.state == 'pending' and ami_id in self.images and now - self.images[ami_id] >= IMAGE_SECS:
                ami.state = 'available'
        for ami_id in sorted(set(self.images) - set(held)):
            shutil.rmtree(os.path.dirname(self.image_root(ami_id)), ignore_errors=True)
            del self.images[ami_id]

    async def _make_instance_root(self, instance):
        """A new instance's files: a copy of its image's when the image was made from an instance (CreateImage),
        root's authorized keys then with the launch's keys added (as cloud-init adds them); else fresh ones."""
        image = getattr(instance.raw, 'image_id', None)
        source = self.image_root(image) if image in self.images else None
        if source is None or not os.path.isdir(source):
            await self.make_keyed_root(instance.id, instance.keys)
            return
        if self.roots is not None:
            await self.roots.make_copy(instance.id, source)
        else:
            shutil.rmtree(self.guest_dir(instance.id), ignore_errors=True)
            shutil.copytree(source, self.root(instance.id), symlinks=True, ignore=SPECIAL_FILES)
        path = self.authorized_keys(instance.id)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        have = open(path, encoding='utf-8').read().splitlines() if os.path.exists(path) else []
        with open(path, 'w', encoding='utf-8') as out:
            out.writelines(k + '\n' for k in have + [k for k in instance.keys if k not in have])
        os.chmod(path, 0o600)
        self.rooted.add(instance.id)

    # ------------------------------------------------------------ faults

    def add_fault(self, kind, vmid=None, seconds=None, times=1, match=None, after=0.0):
        """The try-out cluster's guest faults (refuse, never, drop), for one instance id or the next guest."""
        if vmid is not None and not str(vmid).startswith('i-'):
            raise CloudError('a guest fault names an instance id (i-...), not {0!r}'.format(vmid))
        if kind not in pve_guests.FAULT_KINDS:
            raise CloudError('guest fault must be one of {0}, not {1!r}'.format(
                ', '.join(pve_guests.FAULT_KINDS), kind))
        fault = super().add_fault(kind, None, seconds=seconds, times=times, match=match, after=after)
        for stored in self.faults:
            if stored['id'] == fault['id']:
                stored['vmid'] = vmid
        fault['vmid'] = vmid
        return fault

    def arm(self, kind, instance_id=None, times=1, **values):
        """timing (boot_secs, stop_secs, shutdown_secs) or invisible (seconds) for one instance id, or for the next
        `times` instances launched (times None: every one)."""
        if kind not in ('timing', 'invisible') + CONSOLE_FAULTS:
            raise CloudError("an instance fault is 'timing', 'invisible', 'console_key' or 'console_silent', not "
                             "{0!r}".format(kind))
        clean = {}
        for key, value in values.items():
            if value is None:
                continue
            try:
                clean[key] = float(value)
            except (TypeError, ValueError):
                raise CloudError('{0} must be a number of seconds, not {1!r}'.format(key, value)) from None
            if clean[key] < 0:
                raise CloudError('{0} cannot be negative'.format(key))
        if not clean and kind not in CONSOLE_FAULTS:
            raise CloudError('a {0} fault needs seconds'.format(kind))
        if clean and kind in CONSOLE_FAULTS:
            raise CloudError('a {0} fault takes no seconds'.format(kind))
        if times is not None and int(times) < 1:
            raise CloudError('times must be at least 1 (or none for every instance)')
        arm = {'kind': kind, 'instance_id': instance_id, 'times': None if times is None else int(times),
               'values': clean, 'hits': []}
        if instance_id is not None:
            instance = self.instances.get(instance_id)
            if instance is None:
                raise CloudError('no instance {0} in this cloud'.format(instance_id))
            self._apply(arm, instance, time.monotonic())
            return arm
        self.arms.append(arm)
        return arm

    def _apply(self, arm, instance, now):
        if arm['kind'] == 'timing':
            instance.timing.update(arm['values'])
        elif arm['kind'] == 'console_key':
            instance.console_other_key = True
        elif arm['kind'] == 'console_silent':
            instance.console_silent = True
        else:
            instance.invisible_until = now + arm['values']['seconds']
        arm['hits'].append({'instance_id': instance.id, 'time': time.time()})

    def clear_arms(self):
        self.arms = []
        now = time.monotonic()
        for instance in self.instances.values():
            instance.invisible_until = min(instance.invisible_until, now)

    # ------------------------------------------------------------ states

    def refresh(self, now=None):
        """Follow moto: new instances, state changes, and the states on the way (pending, stopping,
        shutting-down)."""
        now = time.monotonic() if now is None else now
        seen = set()
        for account, region, raw in moto_instances():
            seen.add(raw.id)
            instance = self.instances.get(raw.id)
            if instance is None:
                instance = self._new(raw, account, region, now)
            instance.raw = raw
            self._step(instance, raw.state, now)
            if not instance.moto_public and raw.public_ip and instance.state != 'terminated':
                instance.moto_public = raw.public_ip
                instance.public = self.public_pool.allocate(instance.id)
        for instance_id in set(self.instances) - seen:
            # moto forgot it (a reset): it is gone for good.
            self.instances[instance_id].state = 'terminated'
            self.instances[instance_id].moto_state = 'terminated'
        return self.instances

    def _new(self, raw, account, region, now):
        instance = Instance(raw.id, account, region, now, self.timing)
        instance.key_name = raw.key_name
        instance.moto_private = raw.private_ip
        instance.moto_public = raw.public_ip
        if raw.state != 'terminated':
            instance.private = self.pool.allocate(raw.id) if raw.private_ip else None
            instance.public = self.public_pool.allocate(raw.id) if raw.public_ip else None
        keys = [moto_key(account, region, raw.key_name)] + user_data_keys(raw.user_data)
        instance.keys = [k for k in keys if k]
        taken = set()
        for arm in self.arms:
            if arm['times'] == 0 or arm['kind'] in taken:
                continue
            taken.add(arm['kind'])
            if arm['times'] is not None:
                arm['times'] -= 1
            self._apply(arm, instance, now)
        self.instances[raw.id] = instance
        # A new instance's first state: pending while it boots; one found stopped or terminated stays so.
        instance.state = {'running': 'pending'}.get(raw.state, raw.state)
        instance.moto_state = raw.state
        instance.since = now
        LOG.info('instance %s (%s/%s) appeared %s, addresses %s / %s', raw.id, account, region, raw.state,
                 instance.private, instance.public)
        return instance

    def _step(self, instance, moto_state, now):
        if moto_state != instance.moto_state:
            instance.moto_state = moto_state
            begin = {'running': 'pending', 'stopped': 'stopping', 'terminated': 'shutting-down'}.get(moto_state)
            if begin and instance.state != begin and not (begin == 'shutting-down' and instance.state == 'terminated'):
                instance.state, instance.since = begin, now
            elif begin is None:
                instance.state, instance.since = moto_state, now
        elapsed = now - instance.since
        after = {'pending': ('boot_secs', 'running'), 'stopping': ('stop_secs', 'stopped'),
                 'shutting-down': ('shutdown_secs', 'terminated')}.get(instance.state)
        if after and elapsed >= instance.timing[after[0]]:
            instance.state, instance.since = after[1], now
            LOG.info('instance %s is %s', instance.id, instance.state)

    def visible(self, instance_id, now=None):
        """False while a new instance id is not visible yet (its invisible window)."""
        instance = self.instances.get(instance_id)
        now = time.monotonic() if now is None else now
        return instance is None or now >= instance.invisible_until

    # ------------------------------------------------------------ guests

    async def _reconcile(self, now):
        self.refresh(now)
        self._follow_images(now)
        for instance in list(self.instances.values()):
            if instance.state != 'terminated' and instance.id not in self.rooted:
                # Root's authorized keys: the key pair's public key and the ssh_authorized_keys of its user data.
                await self._make_instance_root(instance)
            guest = self.guests.setdefault(instance.id, pve_guests.Guest(instance.id))
            running = instance.state == 'running' and instance.private is not None
            if running and self.boots.get(instance.id) != instance.since:
                # A new start (its own boot): nothing of the last one survives.
                if guest.proc is not None:
                    await self._stop(guest, everything=True)
                self.boots[instance.id] = instance.since
                self._boot(guest, now)
            # Stopping or terminating ends the guest and everything it runs.
            await self.follow(instance.id, running, instance.private, now)
            if not running and instance.state == 'terminated' and instance.id in self.rooted:
                self._destroy_instance(instance)
        self._drop_sessions(now)
        self._write_known_hosts()

    def _destroy_instance(self, instance):
        """A terminated instance: its root volume is deleted (its files go), its addresses are released."""
        pve_guests.end_guest_processes(self.root(instance.id))
        self.remove_root(instance.id)
        self.pool.release(instance.id)
        self.public_pool.release(instance.id)
        self.guests.pop(instance.id, None)
        LOG.info('instance %s terminated: its files are removed', instance.id)

    def console_output(self, instance_id):
        """The instance's console as EC2 keeps it: a few lines of boot, then, once its guest's sshd serves, the host
        key block cloud-init prints (write-ssh-key-fingerprints through logger, tag ec2), with that sshd's key, or
        with a key of no sshd for an instance with the console_key fault (none at all with console_silent, as an
        image whose cloud-init prints no keys). None for an instance this fleet lacks."""
        instance = self.instances.get(instance_id)
        if instance is None:
            return None
        name = 'ip-' + (instance.private or '0.0.0.0').replace('.', '-')
        lines = ['Linux version 6.1.0-cloud-amd64 (localcloud)', 'Booting the instance {0}'.format(instance.id)]
        guest = self.guests.get(instance.id)
        key = guest.host_key if guest is not None and guest.proc is not None and guest.state == 'up' else None
        if key and instance.state == 'running' and not instance.console_silent:
            if instance.console_other_key:
                path = os.path.join(self.guest_dir(instance.id), 'console_other_key')
                os.makedirs(os.path.dirname(path), exist_ok=True)
                key = pki.ssh_key(path, 'other').rsplit(' ', 1)[0]
            kind, blob = key.split()[:2]
            digest = base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip('=')
            stamp = time.strftime('%b %d %H:%M:%S', time.gmtime())
            fingerprints = ['#' * 61, '-----BEGIN SSH HOST KEY FINGERPRINTS-----',
                            '256 SHA256:{0} root@{1} ({2})'.format(digest, name, kind.split('-')[-1].upper()),
                            '-----END SSH HOST KEY FINGERPRINTS-----', '#' * 61]
            lines += ['<14>{0} ec2: {1}'.format(stamp, line) for line in fingerprints]
            lines += ['-----BEGIN SSH HOST KEY KEYS-----', '{0} {1} root@{2}'.format(kind, blob, name),
                      '-----END SSH HOST KEY KEYS-----']
        return '\n'.join(lines) + '\n'

    def public_address(self, key):
        instance = self.instances.get(key)
        return instance.public if instance is not None else None

    def host_addresses(self, key, guest):
        instance = self.instances.get(key)
        return (instance.private, instance.public) if instance is not None else (guest.address,)

    def view(self):
        now = time.monotonic()
        out = []
        for instance_id, instance in sorted(self.instances.items()):
            item = instance.summary(now)
            item['root'] = self.root(instance_id)
            guest = self.guests.get(instance_id)
            if guest is not None and instance.state == 'running':
                item.update(sshd=guest.state, sshd_pid=guest.sshd_pid if guest.proc else None, error=guest.error)
            else:
                item.update(sshd='stopped', sshd_pid=None)
            out.append(item)
        return out

    def saved(self):
        return {}
