# -*- coding: utf-8 -*-
"""The folder provider: a provider with no API, for tests only. A machine is a directory of a folder,
``<folder>/machines/<id>/machine.json`` (its name, image, keys, whether it runs, its scope, its ownership marker and
lease labels); the try-out cloud (tests/localcloud/folder_site.py) makes a guest of every machine the folder holds,
with an sshd on a loopback address it writes to ``<folder>/machines/<id>/address`` while the machine runs. The
images a machine can be made from are the files of ``<folder>/images``.

Every write is atomic: a machine is written whole in a directory of its own and renamed into place (a taken id is
refused: no two machines ever share one), changed by replacing machine.json under the folder's lock, and deleted
by renaming its directory away before it is removed. Ids are derived from the workspace's record (a rerun after a
lost answer finds its machine at the id it recorded), and the marker binds that id.
"""

import errno
import fcntl
import json
import os
import shutil
import time
import uuid

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import cloud
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.folder.options import PATH_ENV

NAME = 'folder'
KIND = 'folder'
LOCATION = 'local'


def task_handle(what, machine_id):
    return '%s/%s/%s/%d' % (KIND, what, machine_id, int(time.time()))


def parse_handle(text):
    """(what, machine id) of a handle; ValueError for anything else."""
    parts = (text or '').split('/')
    if len(parts) != 4 or parts[0] != KIND:
        raise ValueError('not a folder task handle: %r' % (text,))
    return parts[1], parts[2]


class FolderProvider(cloud.CloudProvider):
    """The provider seam over one folder (``api``: its path)."""

    name = NAME
    kind = KIND
    noun = 'machine'
    candidate_noun = 'A folder machine id'
    allocation_words = {
        'vmid': ('candidate machine id', 'candidate machine id'),
        'clone': ('write', 'write the machine'),
        'wait_clone': ('wait write', 'wait for the machine to be written'),
    }
    image_hint = 'in a folder give an image of its images directory'
    address_source = 'an address from the try-out cloud'
    # A derived id is never given to a second machine.
    unique_ids = True

    def __init__(self, api, secret=None, launch=None, sleep=time.sleep):
        super().__init__(secret)
        self.api = api
        self.launch = dict(launch or {})
        self.sleep = sleep

    @classmethod
    def from_params(cls, params, secret=None, environ=None):
        path = cloud.option(params, 'folder_path', PATH_ENV, environ)
        if not path:
            raise base.Refused('No folder: give folder_path (or %s), the folder the machines are written to.'
                               % PATH_ENV)
        if not os.path.isdir(os.path.join(path, 'images')):
            raise base.Refused('%s is no folder of machines: it has no images directory. Give the folder the try-out '
                               'cloud follows (cloud.json, key folder).' % path)
        return cls(path, secret, {'ssh_public_key': params.get('folder_ssh_public_key')})

    def with_secret(self, secret):
        return FolderProvider(self.api, secret, self.launch, self.sleep)

    @staticmethod
    def serves(api):
        return False

    # ------------------------------------------------------------------- the folder

    def _dir(self, machine_id=None):
        machines = os.path.join(self.api, 'machines')
        return machines if machine_id is None else os.path.join(machines, str(machine_id))

    def _read(self, machine_id):
        """The machine's record, or None when there is no machine ``machine_id``."""
        if not machine_id or '/' in str(machine_id) or str(machine_id).startswith('.'):
            return None
        try:
            with open(os.path.join(self._dir(machine_id), 'machine.json'), encoding='utf-8') as src:
                return json.load(src)
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise base.Transient('%s cannot be read (%s); nothing is proven.' % (self.label(machine_id), err))

    def _write(self, machine_id, change):
        """Apply ``change`` to the machine's record under the folder's lock; NotFound when it is gone."""
        with open(os.path.join(self.api, 'lock'), 'a', encoding='utf-8') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read(machine_id)
            if data is None:
                raise base.NotFound('%s does not exist.' % self.label(machine_id))
            change(data)
            self._put(self._dir(machine_id), data)
        return data

    @staticmethod
    def _put(directory, data):
        staged = os.path.join(directory, '.machine.json.%s' % uuid.uuid4().hex)
        with open(staged, 'w', encoding='utf-8') as out:
            json.dump(data, out)
        os.replace(staged, os.path.join(directory, 'machine.json'))

    def _resource(self, data):
        return base.Resource(data['id'], LOCATION, marker_text=data.get('marker'), native=data)

    # ------------------------------------------------------------------- the lease

    def labels(self, resource):
        return dict((resource.native or {}).get('labels') or {})

    def write_labels(self, resource, labels):
        self._write(resource.id, lambda data: data.setdefault('labels', {}).update(
            {key: str(value) for key, value in labels.items()}))

    # ------------------------------------------------------------------- allocation

    def check_source(self, source, location, scope):
        images = sorted(os.listdir(os.path.join(self.api, 'images')))
        if source not in images:
            raise base.InvalidRequest('Unknown image %r in folder %s; there are: %s. Give one of them as the template.'
                                      % (source, self.api, ', '.join(images) or '-'))
        if location not in (None, LOCATION):
            raise base.InvalidRequest('A folder has one location, %s; %r is none of its.' % (LOCATION, location))
        if not self.launch.get('ssh_public_key'):
            raise base.InvalidRequest('No way into the machine: give folder_ssh_public_key, the public key it lets '
                                      'in.')
        return LOCATION

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        return cloud.derived_candidate(workspace, stamp, avoid, 'fd-', 12, 'machine id')

    def allocate(self, allocation):
        a = allocation
        data = {'id': a.candidate, 'name': a.hostname, 'image': a.source, 'running': True, 'scope': a.scope,
                'keys': [self.launch['ssh_public_key']], 'marker': self.marker(a.workspace, a.candidate, a.nonce),
                'labels': {key: str(value) for key, value in (a.labels or {}).items()}, 'created': time.time()}
        os.makedirs(self._dir(), exist_ok=True)
        staged = self._dir('.new-%s-%s' % (a.candidate, uuid.uuid4().hex))
        os.mkdir(staged)
        self._put(staged, data)
        try:
            os.rename(staged, self._dir(a.candidate))
        except OSError as err:
            shutil.rmtree(staged, ignore_errors=True)
            if err.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise base.Conflict('%s exists already.' % self.label(a.candidate))
            raise
        return task_handle('create', a.candidate)

    def allocation_task(self, allocation, since):
        return task_handle('create', allocation.candidate) if self._read(allocation.candidate) else None

    # ------------------------------------------------------------------------------- looking

    def find(self, resource_id, location=None, search=False):
        data = self._read(resource_id)
        return None if data is None else self._resource(data)

    def native(self, resource_id):
        return self._read(resource_id)

    def native_running(self, native):
        return bool(native.get('running'))

    def addresses(self, resource):
        data = self._read(resource.id)
        if not data or not data.get('running'):
            return []
        try:
            with open(os.path.join(self._dir(resource.id), 'address'), encoding='utf-8') as src:
                address = src.read().strip()
        except FileNotFoundError:
            return []
        return [('eth0', 'inet', address)] if address else []

    def list(self, every_kind=False):
        out = []
        names = os.listdir(self._dir()) if os.path.isdir(self._dir()) else []
        for machine_id in sorted(n for n in names if not n.startswith('.')):
            data = self._read(machine_id)
            if data is None:
                continue
            tags = sorted(data.get('labels') or {}) + (['ephemera'] if data.get('marker') else [])
            out.append(cloud.listed(machine_id, LOCATION, KIND, data.get('name'),
                                    'running' if data.get('running') else 'off', data.get('scope'), tags,
                                    self._resource(data)))
        return out

    # -------------------------------------------------------------------------------- acting

    def _power(self, what, resource, running):
        self._write(resource.id, lambda data: data.update(running=running))
        return task_handle(what, resource.id)

    def act_start(self, resource):
        return self._power('start', resource, True)

    def act_shutdown(self, resource):
        return self._power('stop', resource, False)

    def act_stop(self, resource):
        return self._power('stop', resource, False)

    def delete_blocker(self, resource, source=None):
        return None

    def delete(self, resource):
        """The machine's directory renamed away (it is gone at once), then removed."""
        gone = self._dir('.deleted-%s-%s' % (resource.id, uuid.uuid4().hex))
        try:
            os.rename(self._dir(resource.id), gone)
        except FileNotFoundError:
            raise base.NotFound('%s does not exist.' % self.label(resource.id))
        shutil.rmtree(gone, ignore_errors=True)
        return task_handle('delete', resource.id)

    # --------------------------------------------------------------------------------- tasks

    def task_look(self, handle):
        what, machine_id = parse_handle(handle)
        data = self._read(machine_id)
        if what == 'delete':
            return (cloud.RUNNING if data is not None else cloud.DONE), None
        if data is None:
            return '%s is gone.' % self.label(machine_id), None
        if what == 'create':
            return cloud.DONE, None
        want = what == 'start'
        return (cloud.DONE if bool(data.get('running')) == want else cloud.RUNNING), None

    def task_what(self, handle):
        what, machine_id = parse_handle(handle)
        return 'the %s of %s' % (what, self.label(machine_id))

    def task_timeout(self, handle, seconds, detail):
        what, machine_id = parse_handle(handle)
        return '%s: the %s is not done after %d s.' % (self.label(machine_id), what, seconds)
