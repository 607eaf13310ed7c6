# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Hetzner Cloud provider: workspaces are cloud servers created from an image.

Ids are server ids (decimal strings), locations are location names (``fsn1``), the scope is the ``ephemera-scope``
label. Hetzner has no idempotency token: the candidate id a create records before it dispatches is the server's
name (derived from the workspace and its record; a project never holds two servers of one name, so a repeated
``POST /servers`` after a lost answer is refused with ``uniqueness_error`` and the one server is found by its name).
The ownership marker is spread over labels (a label value holds at most 63 characters of ``[A-Za-z0-9_.-]``):
``ephemera-marker`` (its version), ``-controller``, ``-workspace``, ``-id`` (the server's name, which the marker
binds), ``-nonce`` and ``-token-a`` (the token). A marker of version 2 has ``-vmid`` (a number derived from the
server's name) instead of ``-id`` and its HMAC in two halves, ``-token-a`` and ``-token-b``; it still verifies.

Readiness is bound to the creation: the answer's server must carry the name and the labels asked for, else it is
reported as an unresolved allocation and left alone. A deletion is complete only when its action succeeded and
then an exact ``GET /servers/{id}`` answers 404: Hetzner can hide a server whose deletion still runs. Task
handles name what was asked, the server, the action and the owned SSH key
(``hcloud/<what>/<server id>/<action id>/<key id>/<epoch>``); the destroy records the handle before it waits.
"""

import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import cloud
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.client import (
    ENDPOINT_ENV,
    TOKEN_ENV,
    HCloud,
)

NAME = 'hetzner'
KIND = 'hcloud'
LABEL_PREFIX = 'ephemera-'
L_MARKER = 'ephemera-marker'
L_CONTROLLER = 'ephemera-controller'
L_WORKSPACE = 'ephemera-workspace'
L_VMID = 'ephemera-vmid'
L_ID = 'ephemera-id'
L_NONCE = 'ephemera-nonce'
L_TOKEN_A = 'ephemera-token-a'
L_TOKEN_B = 'ephemera-token-b'
L_SCOPE = 'ephemera-scope'
L_LEASE_ID = 'ephemera-lease-id'
L_CREATED_BY = 'ephemera-created-by'
L_KEY_OF = 'ephemera-key-of'
MARKER_LABELS = (L_MARKER, L_CONTROLLER, L_WORKSPACE, L_VMID, L_ID, L_NONCE, L_TOKEN_A, L_TOKEN_B)
LEASE_KEYS = leasing.LEASE_LABELS
# Hetzner's label rules: a value is empty or 1 to 63 of [A-Za-z0-9_.-], starting and ending with a letter or digit;
# a key is an optional DNS prefix with "/" and a name of the same form.
VALUE_RE = re.compile(r'^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$')
KEY_RE = re.compile(r'^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$')
RUNNING_STATES = ('running', 'starting', 'initializing')
DEFAULT_ACTION_TIMEOUT = 60


class UnresolvedAllocation(base.Refused):
    """POST /servers answered with a server that cannot be bound to the request: it is reported, never deleted."""


def check_label(key, value, what='label'):
    """InvalidRequest, saying what is wrong, unless Hetzner takes the label ``key``=``value``."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise base.InvalidRequest('The %s key %r does not fit Hetzner\'s rules: 1 to 63 letters, digits and "-_." '
                                  '(starting and ending with a letter or digit), with an optional DNS prefix and "/".'
                                  % (what, key))
    text = '' if value is None else str(value)
    if not VALUE_RE.match(text):
        raise base.InvalidRequest('The %s %s=%r does not fit Hetzner\'s rules for a label value: at most 63 letters, '
                                  'digits and "-_.", starting and ending with a letter or digit. Change the value.'
                                  % (what, key, text))


# The number a version 2 marker bound for a server name (a marker of version 3 binds the name itself).
name_number = cloud.bound_number


def task_handle(what, server_id, action_id=0, key_id=0, at=None):
    return '%s/%s/%s/%d/%d/%d' % (KIND, what, server_id, int(action_id or 0), int(key_id or 0),
                                  int(at if at is not None else time.time()))


def parse_handle(text):
    """(what, server id, action id, key id, epoch) of a handle; ValueError for anything else."""
    parts = (text or '').split('/')
    if len(parts) != 6 or parts[0] != KIND or not parts[2].isdigit():
        raise ValueError('not a Hetzner Cloud task handle: %r' % (text,))
    return parts[1], parts[2], int(parts[3]), int(parts[4]), int(parts[5])


def marker_labels(text):
    """The marker labels of a marker line (ownership.render_resource's form, or render's): every one of
    MARKER_LABELS, empty where the line has no such field."""
    fields = ownership.parse(text) or {}
    token = fields.get('token') or ''
    return {L_MARKER: fields.get('version', ''), L_CONTROLLER: fields.get('controller', ''),
            L_WORKSPACE: fields.get('workspace', ''), L_VMID: fields.get('vmid', ''),
            L_ID: fields.get('id', ''), L_NONCE: fields.get('nonce', ''),
            L_TOKEN_A: token[:32], L_TOKEN_B: token[32:]}


def marker_text(labels):
    """The marker line the labels spell, or None without a marker."""
    labels = labels or {}
    if not labels.get(L_MARKER):
        return None
    words = ['%s %s' % (ownership.PREFIX, labels[L_MARKER])]
    for field, key in (('workspace', L_WORKSPACE), ('controller', L_CONTROLLER), ('vmid', L_VMID),
                       ('id', L_ID), ('nonce', L_NONCE)):
        if labels.get(key):
            words.append('%s=%s' % (field, labels[key]))
    words.append('token=%s%s' % (labels.get(L_TOKEN_A, ''), labels.get(L_TOKEN_B, '')))
    return ' '.join(words)


def launch_options(params):
    """The server settings of module params (doc fragment ephemera.workspaces.hetzner), as a request records them."""
    return {
        'server_type': params.get('hetzner_server_type') or 'cx22',
        'ssh_key': params.get('hetzner_ssh_key'),
        'ssh_public_key': params.get('hetzner_ssh_public_key'),
        'networks': sorted(params.get('hetzner_networks') or []),
        'labels': dict(params.get('hetzner_labels') or {}),
    }


class HetznerProvider(cloud.CloudProvider):
    """The provider seam over one Hetzner Cloud project (``api``: an :class:`HCloud`)."""

    name = NAME
    kind = KIND
    noun = 'server'
    candidate_noun = 'A Hetzner server name'
    allocation_words = {
        'vmid': ('candidate server name', 'candidate server name'),
        'clone': ('create', 'create the server'),
        'wait_clone': ('wait create action', 'wait for the create action'),
    }
    image_hint = 'on Hetzner Cloud give an image'
    # Server ids are never given to a second server.
    unique_ids = True
    # A 404 does not complete a deletion whose action is known: wait() on the recorded handle does.
    confirms_delete_by_task = True

    def __init__(self, api, secret=None, location=None, launch=None, action_timeout=DEFAULT_ACTION_TIMEOUT,
                 sleep=time.sleep):
        super().__init__(secret)
        self.api = api
        self.default_location = location
        self.launch = dict(launch or {})
        self.action_timeout = action_timeout
        self.sleep = sleep

    @classmethod
    def from_params(cls, params, secret=None, environ=None):
        api = HCloud(cloud.option(params, 'hetzner_token', TOKEN_ENV, environ),
                     cloud.option(params, 'hetzner_endpoint', ENDPOINT_ENV, environ),
                     request_timeout=params.get('hetzner_request_timeout') or 10)
        return cls(api, secret, params.get('hetzner_location') or 'fsn1', launch_options(params),
                   params.get('hetzner_action_timeout') or DEFAULT_ACTION_TIMEOUT)

    def with_secret(self, secret):
        return HetznerProvider(self.api, secret, self.default_location, self.launch, self.action_timeout, self.sleep)

    @staticmethod
    def serves(api):
        return isinstance(api, HCloud)

    # ------------------------------------------------------------------- ownership

    def bound_id(self, resource):
        """The server's name (the candidate the marker binds)."""
        return (resource.native or {}).get('name')

    # ------------------------------------------------------------------- the lease

    def labels(self, resource):
        labels = (resource.native or {}).get('labels') or {}
        return {k: labels[LABEL_PREFIX + k] for k in LEASE_KEYS if LABEL_PREFIX + k in labels}

    def write_labels(self, resource, labels):
        current = dict((resource.native or {}).get('labels') or {})
        for key, value in labels.items():
            check_label(LABEL_PREFIX + key, value, 'lease label')
            current[LABEL_PREFIX + key] = str(value)
        self.api.call('PUT', '/servers/%s' % resource.id, acts=True, json={'labels': current})

    # ------------------------------------------------------------------- warm pools

    # A claim re-labels the member's server (marker labels, workspace, lease) in one PUT.
    pool_refusal = None

    def write_remark(self, resource, workspace, marker, hostname, labels, created_by=None):
        """The server's labels with the new marker, lease labels and ephemera-created-by (the workspace's requester,
        when known), in one PUT /servers/{id}. Its name stays: it is the candidate the marker binds (so the guest
        keeps the host name it booted with); ``hostname`` is not written."""
        current = dict((resource.native or {}).get('labels') or {})
        current.update(marker_labels(marker))
        for key in MARKER_LABELS:
            # A member's version 2 marker labels that the new marker has not (-vmid, -token-b) go.
            if not current.get(key):
                current.pop(key, None)
        if created_by:
            current[L_CREATED_BY] = leasing.label_value(created_by).strip('-_.') or 'unknown'
        for key, value in labels.items():
            check_label(LABEL_PREFIX + key, value, 'lease label')
            current[LABEL_PREFIX + key] = str(value)
        self.api.call('PUT', '/servers/%s' % resource.id, acts=True, json={'labels': current})

    # ------------------------------------------------------------------- allocation

    def _named(self, path, key, name, what, hint):
        items = [i for i in self.api.list(path, key, {'name': name}) if i.get('name') == name]
        if not items:
            names = sorted(set(str(i.get('name')) for i in self.api.list(path, key)))
            raise base.InvalidRequest('Unknown %s %r in this Hetzner Cloud project; %s: %s. %s'
                                      % (what, name, 'there are' if names else 'there is none', ', '.join(names[:30])
                                         or '-', hint))
        return items[0]

    def _image(self, source):
        text = str(source or '').strip()
        if not text:
            raise base.InvalidRequest('No image: give the template (an image name such as ubuntu-24.04, or an image '
                                      'id).')
        if text.isdigit():
            try:
                return self.api.call('GET', '/images/%s' % text)['image']
            except base.NotFound:
                raise base.InvalidRequest('Image %s does not exist in this project (hcloud image list).' % text)
        return self._named('/images', 'images', text, 'image', 'Give an image name or id (hcloud image list).')

    def check_source(self, source, location, scope):
        """The location, after checking it, the server type, the image, the networks, the SSH key and the labels (no
        server is created)."""
        location = location or self.default_location
        launch = self.launch
        for key, value in sorted((launch.get('labels') or {}).items()):
            check_label(key, value, 'label')
            if key.startswith(LABEL_PREFIX):
                raise base.InvalidRequest('Label %r is reserved (ephemera-* labels are set by the collection). '
                                          'Choose another key.' % key)
        check_label(L_SCOPE, scope, 'scope label')
        self._named('/locations', 'locations', location, 'location',
                    'Give a location name (hetzner_location; hcloud location list).')
        server_type = self._named('/server_types', 'server_types', launch.get('server_type') or 'cx22', 'server type',
                                  'Give a server type (hetzner_server_type; hcloud server-type list).')
        if server_type.get('deprecated') or server_type.get('deprecation'):
            raise base.InvalidRequest('Server type %s is deprecated; give another one.' % server_type.get('name'))
        self._image(source)
        for network in launch.get('networks') or []:
            self._named('/networks', 'networks', network, 'network', 'Give network names of this project '
                        '(hetzner_networks; hcloud network list).')
        if launch.get('ssh_key'):
            self._named('/ssh_keys', 'ssh_keys', launch['ssh_key'], 'SSH key', 'Give the name of an SSH key of the '
                        'project (hetzner_ssh_key), or give hetzner_ssh_public_key instead.')
        elif not launch.get('ssh_public_key'):
            raise base.InvalidRequest('No way into the server: give hetzner_ssh_key (an SSH key of the project) or '
                                      'hetzner_ssh_public_key (a public key the collection adds to the project for this '
                                      'workspace and removes with it).')
        return location

    def resolve_source(self, source):
        return str(source).strip() if source is not None else source

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        """The server name of ``workspace``'s record made at ``stamp``: the same for every rerun, another one for
        every name in ``avoid``. InvalidRequest when the workspace name does not fit a label value."""
        check_label(L_WORKSPACE, workspace, 'workspace name as the label')
        stem = re.sub(r'[^a-z0-9-]+', '-', workspace.lower()).strip('-')[:30] or 'ws'
        return cloud.derived_candidate(workspace, stamp, avoid, 'eph-%s-' % stem, 12, 'server name')

    @staticmethod
    def owned_key_name(server_name):
        """The name of the SSH key the collection adds for the server named ``server_name`` (derived from the
        recorded candidate, so it is known before the key is created)."""
        return 'ephemera-key-' + server_name

    def _labels_for(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        labels = dict(launch.get('labels') or {})
        labels.update((k, v) for k, v in marker_labels(self.marker(a.workspace, a.candidate, a.nonce)).items() if v)
        labels[L_SCOPE] = a.scope
        for key, value in (a.labels or {}).items():
            labels[LABEL_PREFIX + key] = str(value)
        extra = launch.get('lease') or {}
        if extra.get('id'):
            labels[L_LEASE_ID] = leasing.label_value(extra['id'])
        if extra.get('created_by'):
            labels[L_CREATED_BY] = leasing.label_value(extra['created_by']).strip('-_.') or 'unknown'
        for key, value in sorted(labels.items()):
            check_label(key, value)
        return labels

    def _owned_key(self, server_name, public_key):
        """The id of the SSH key added for the server (created now unless it is there with the same key)."""
        name = self.owned_key_name(server_name)
        key = ' '.join(str(public_key).split())
        found = [k for k in self.api.list('/ssh_keys', 'ssh_keys', {'name': name}) if k.get('name') == name]
        if found:
            if ' '.join(str(found[0].get('public_key') or '').split()[:2]) != ' '.join(key.split()[:2]):
                raise base.Conflict('SSH key %s exists with another public key; it was not touched. Remove it (hcloud '
                                    'ssh-key delete %s) if it is a leftover, then create again.' % (name, name))
            return found[0]['id']
        answer = self.api.call('POST', '/ssh_keys', acts=True, json={
            'name': name, 'public_key': key, 'labels': {L_KEY_OF: server_name, L_CONTROLLER: self.controller or ''}})
        return answer['ssh_key']['id']

    def allocate(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        labels = self._labels_for(a)
        location = a.location or self.default_location
        body = {'name': a.candidate, 'server_type': launch.get('server_type') or 'cx22', 'image': a.source,
                'location': location, 'labels': labels, 'start_after_create': True}
        networks = [self._named('/networks', 'networks', n, 'network', '')['id'] for n in launch.get('networks') or []]
        if networks:
            body['networks'] = networks
        if launch.get('ssh_key'):
            body['ssh_keys'] = [launch['ssh_key']]
        elif launch.get('ssh_public_key'):
            body['ssh_keys'] = [self._owned_key(a.candidate, launch['ssh_public_key'])]
        answer = self.api.call('POST', '/servers', acts=True, json=body)
        server = answer.get('server')
        action = answer.get('action')
        if not isinstance(server, dict) or not isinstance(server.get('id'), int):
            raise base.UnknownOutcome('POST /servers answered without a server id; look for the server named %s '
                                      'before anything else.' % a.candidate)
        self._bind(server, a.candidate, labels)
        action_id = action.get('id') if isinstance(action, dict) and isinstance(action.get('id'), int) else 0
        return task_handle('create', server['id'], action_id)

    def _bind(self, server, name, labels):
        """UnresolvedAllocation unless the answer's server is the one asked for (its name and labels)."""
        got = server.get('labels') or {}
        wrong = sorted(k for k in MARKER_LABELS + (L_SCOPE,) if got.get(k) != labels.get(k))
        if server.get('name') == name and not wrong:
            return
        raise UnresolvedAllocation(
            'Unresolved allocation: POST /servers for the server named %s answered with server %s named %r%s. It '
            'cannot be bound to this request, so it is not used and not deleted. Check in the project (hcloud server '
            'describe %s; hcloud server list -l %s) whose server it is and remove it by hand if it is a leftover; '
            'then destroy this workspace and create it again.'
            % (name, server.get('id'), server.get('name'),
               ' whose labels %s differ from the request' % ', '.join(wrong) if wrong else '', server.get('id'),
               L_WORKSPACE))

    def allocation_task(self, allocation, since):
        found = self._by_name(allocation.candidate)
        if len(found) != 1:
            return None
        return task_handle('create', found[0]['id'])

    def resource_of(self, candidate, task, location=None):
        if task:
            return parse_handle(task)[1]
        found = self._by_name(candidate)
        if len(found) != 1:
            raise base.Refused('%d servers are named %s; expected one.' % (len(found), candidate))
        return str(found[0]['id'])

    # ------------------------------------------------------------------------------- looking

    def _by_name(self, name):
        return [s for s in self.api.list('/servers', 'servers', {'name': name}) if s.get('name') == name]

    def _resource(self, server):
        location = ((server.get('location') or ((server.get('datacenter') or {}).get('location')) or {}).get('name'))
        return base.Resource(str(server['id']), location, lock=None, deleting=server.get('status') == 'deleting',
                             marker_text=marker_text(server.get('labels')), native=server)

    def _server(self, server_id):
        """The server, or None on an exact 404."""
        try:
            server = self.api.call('GET', '/servers/%s' % server_id).get('server')
        except base.NotFound:
            return None
        if not isinstance(server, dict) or str(server.get('id')) != str(server_id):
            raise base.Transient('GET /servers/%s answered with another server or none; nothing is proven.'
                                 % server_id)
        return server

    def find(self, resource_id, location=None, search=False):
        if resource_id is None:
            return None
        if not str(resource_id).isdigit():
            found = self._by_name(str(resource_id))
            if len(found) > 1:
                raise base.Refused('%d servers are named %s; expected at most one.' % (len(found), resource_id))
            return self._resource(found[0]) if found else None
        server = self._server(resource_id)
        return None if server is None else self._resource(server)

    def native(self, resource_id):
        return self._server(resource_id)

    def native_running(self, native):
        return native.get('status') in RUNNING_STATES

    def addresses(self, resource):
        server = self._server(resource.id)
        if server is None or server.get('status') != 'running':
            return []
        ip = (((server.get('public_net') or {}).get('ipv4') or {}).get('ip'))
        return [('eth0', 'inet', ip)] if ip else []

    def list(self, every_kind=False):
        """Every server that carries our marker label (a complete listing, or IncompleteListing)."""
        out = []
        for server in self.api.list('/servers', 'servers', {'label_selector': L_MARKER}):
            labels = server.get('labels') or {}
            keys = sorted(labels)
            if any(k.startswith(LABEL_PREFIX) for k in keys):
                keys.append('ephemera')
            resource = self._resource(server)
            out.append(cloud.listed(str(server['id']), resource.location, KIND, server.get('name'),
                                    server.get('status'), labels.get(L_SCOPE), keys, resource))
        return out

    # -------------------------------------------------------------------------------- acting

    def _action(self, what, resource, command):
        answer = self.api.call('POST', '/servers/%s/actions/%s' % (resource.id, command), acts=True)
        action = answer.get('action')
        if not isinstance(action, dict) or not isinstance(action.get('id'), int):
            raise base.UnknownOutcome('POST /servers/%s/actions/%s answered without an action; look at the server '
                                      'before repeating it.' % (resource.id, command))
        return task_handle(what, resource.id, action['id'])

    def act_start(self, resource):
        return self._action('start', resource, 'poweron')

    def act_shutdown(self, resource):
        return self._action('stop', resource, 'shutdown')

    def act_stop(self, resource):
        return self._action('stop', resource, 'poweroff')

    def delete_blocker(self, resource, source=None):
        if ((resource.native or {}).get('protection') or {}).get('delete'):
            return ('%s has delete protection; Hetzner refuses to delete it. Turn it off (hcloud server '
                    'disable-protection %s delete) if it really should go, then destroy again.'
                    % (self.label(resource.id), resource.id))
        return None

    def delete(self, resource):
        """DELETE /servers/{id}; the handle names the action and the owned SSH key (to remove after the deletion is
        confirmed). A 404 is NotFound; a rejection raises its kind; anything uncertain is an unknown outcome."""
        name = (resource.native or {}).get('name')
        key_id = 0
        if name:
            keys = [k for k in self.api.list('/ssh_keys', 'ssh_keys', {'name': self.owned_key_name(name)})
                    if (k.get('labels') or {}).get(L_KEY_OF) == name]
            key_id = keys[0]['id'] if keys else 0
        answer = self.api.call('DELETE', '/servers/%s' % resource.id, acts=True)
        action = answer.get('action')
        if not isinstance(action, dict) or not isinstance(action.get('id'), int) or \
                action.get('status') not in ('running', 'success', 'error'):
            raise base.UnknownOutcome('DELETE /servers/%s answered without a well-formed action (%r); the deletion may '
                                      'run: look at the server before repeating it.' % (resource.id, action))
        return task_handle('delete', resource.id, action['id'], key_id)

    # --------------------------------------------------------------------------------- tasks

    def _look(self, handle):
        """'done', 'running' or a failure message for a handle, read now."""
        what, server_id, action_id, key_id, at = parse_handle(handle)
        if action_id:
            try:
                action = self.api.call('GET', '/actions/%d' % action_id).get('action') or {}
            except base.NotFound:
                return 'running'
            status = action.get('status')
            if status == 'error':
                error = action.get('error') or {}
                return 'Hetzner action %d (%s) failed: %s (%s).' % (action_id, action.get('command'),
                                                                    error.get('message'), error.get('code'))
            if status != 'success':
                return 'running'
        server = self._server(server_id)
        if what == 'delete':
            if server is not None:
                return 'running'
            if key_id:
                self._remove_owned_key(key_id)
            return 'done'
        if server is None:
            return 'running' if not action_id else '%s is gone.' % self.label(server_id)
        status = server.get('status')
        want = 'off' if what == 'stop' else 'running'
        return 'done' if status == want else 'running'

    def _remove_owned_key(self, key_id):
        try:
            key = self.api.call('GET', '/ssh_keys/%d' % key_id).get('ssh_key') or {}
        except base.NotFound:
            return
        if (key.get('labels') or {}).get(L_KEY_OF) and key.get('name', '').startswith('ephemera-key-'):
            try:
                self.api.call('DELETE', '/ssh_keys/%d' % key_id, acts=True)
            except base.NotFound:
                pass

    def task_look(self, handle):
        return self._look(handle), None

    def task_seconds(self, timeout):
        return min(timeout, self.action_timeout) if timeout else self.action_timeout

    def task_what(self, handle):
        what, server_id, action_id, key_id, at = parse_handle(handle)
        return 'the %s of %s (action %s)' % (what, self.label(server_id), action_id or 'unknown')

    def task_timeout(self, handle, seconds, detail):
        what, server_id, action_id, key_id, at = parse_handle(handle)
        return ('%s: the %s is not confirmed after %d s (action %s%s). It may still finish; the next run looks again.'
                % (self.label(server_id), what, seconds, action_id or 'unknown',
                   ', and the server must answer 404' if what == 'delete' else ''))
