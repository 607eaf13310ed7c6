"""A Hetzner Cloud API fake for the try-out cloud: the calls the collection's Hetzner provider makes, over loopback,
with the fields and error bodies of the public API reference (docs/internals/hetzner.md names the version it follows).

Servers live in this process's memory. A new server is ``initializing`` and its ``create_server`` action ``running``
for ``boot_secs``, then ``running``/``success``; a deleted one is ``deleting`` with its ``delete_server`` action
``running`` for ``delete_secs``, then gone (404) with the action ``success``. A running server's guest is an sshd
on its public IPv4 address (a loopback address of the fake's own range), with the project's SSH keys it was created
with (tests/localcloud/hetzner_guests.py).

Faults (``add_rule``): ``drop`` acts and then closes the connection without an answer, ``delay`` waits before
answering, ``error`` answers a status and error code without acting, ``fail_delete`` lets the next deletion action
end in ``error`` (the server stays), ``hide`` answers 404 for a server whose deletion action still runs, and
``foreign_answer`` answers a create with another server than the one asked for (an unbindable answer).
"""

import asyncio
import itertools
import json
import logging
import time
from datetime import datetime, timezone

from aiohttp import web

LOG = logging.getLogger('localcloud.hetzner')
API_VERSION = 'Hetzner Cloud API reference (docs.hetzner.cloud), as published in 2025'
LOCATIONS = [
    {'id': 1, 'name': 'fsn1', 'description': 'Falkenstein DC Park 1', 'country': 'DE', 'city': 'Falkenstein',
     'latitude': 50.47612, 'longitude': 12.370071, 'network_zone': 'eu-central'},
    {'id': 2, 'name': 'nbg1', 'description': 'Nuremberg DC Park 1', 'country': 'DE', 'city': 'Nuremberg',
     'latitude': 49.452102, 'longitude': 11.076665, 'network_zone': 'eu-central'},
    {'id': 3, 'name': 'hel1', 'description': 'Helsinki DC Park 1', 'country': 'FI', 'city': 'Helsinki',
     'latitude': 60.169855, 'longitude': 24.938379, 'network_zone': 'eu-central'},
]
SERVER_TYPES = [
    {'id': 104, 'name': 'cx22', 'description': 'CX22', 'cores': 2, 'memory': 4.0, 'disk': 40, 'deprecated': False,
     'deprecation': None, 'prices': [], 'storage_type': 'local', 'cpu_type': 'shared', 'architecture': 'x86',
     'category': 'cost_optimized', 'locations': []},
    {'id': 105, 'name': 'cx32', 'description': 'CX32', 'cores': 4, 'memory': 8.0, 'disk': 80, 'deprecated': False,
     'deprecation': None, 'prices': [], 'storage_type': 'local', 'cpu_type': 'shared', 'architecture': 'x86',
     'category': 'cost_optimized', 'locations': []},
]
IMAGES = [
    {'id': 161547269, 'type': 'system', 'status': 'available', 'name': 'ubuntu-24.04', 'description': 'Ubuntu 24.04',
     'image_size': None, 'disk_size': 5, 'created': '2024-04-25T12:00:00+00:00', 'created_from': None,
     'bound_to': None, 'os_flavor': 'ubuntu', 'os_version': '24.04', 'rapid_deploy': True,
     'protection': {'delete': False}, 'deprecated': None, 'deleted': None, 'labels': {}, 'architecture': 'x86'},
]
NETWORKS = [
    {'id': 4711, 'name': 'workspaces', 'ip_range': '10.0.0.0/16', 'subnets': [], 'routes': [], 'servers': [],
     'load_balancers': [], 'protection': {'delete': False}, 'labels': {}, 'created': '2025-01-01T00:00:00+00:00',
     'expose_routes_to_vswitch': False},
]
ERROR_MESSAGES = {
    'unauthorized': 'unable to authenticate', 'forbidden': 'insufficient permissions for this request',
    'not_found': 'server not found', 'invalid_input': 'invalid input in field', 'json_error': 'invalid JSON',
    'locked': 'server is locked', 'conflict': 'resource has changed during the request, please retry',
    'rate_limit_exceeded': 'rate limit exceeded', 'server_error': 'internal server error',
    'uniqueness_error': 'server name is already used', 'timeout': 'request timed out',
    'maintenance': 'maintenance', 'resource_unavailable': 'server type unavailable in this location',
    'protected': 'server is protected', 'service_error': 'service error', 'unavailable': 'service unavailable',
}


def iso(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).replace(microsecond=0).isoformat()


def error_body(code, message=None, details=None):
    return {'error': {'code': code, 'message': message or ERROR_MESSAGES.get(code, code), 'details': details}}


def matches(labels, selector):
    """Hetzner's label selector: comma-separated terms, each ``key``, ``!key``, ``key=value`` or ``key!=value``."""
    for term in [t.strip() for t in (selector or '').split(',') if t.strip()]:
        if '!=' in term:
            key, value = term.split('!=', 1)
            if labels.get(key) == value:
                return False
        elif '=' in term:
            key, value = term.split('=', 1)
            if labels.get(key.rstrip('=')) != value:
                return False
        elif term.startswith('!'):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class HetznerCloud:
    """The fake's state and its aiohttp application. ``addresses``: an AddressPool of the servers' IPv4 addresses."""

    def __init__(self, token, addresses, boot_secs=0.5, delete_secs=0.5, host='127.0.0.1', port=0):
        self.token = token
        self.addresses = addresses
        self.boot_secs = boot_secs
        self.delete_secs = delete_secs
        self.host = host
        self.port = port
        self.servers = {}
        self.actions = {}
        self.ssh_keys = {}
        self.rules = []
        self.requests = []
        self._ids = itertools.count(1000001)
        self._action_ids = itertools.count(5000001)
        self._key_ids = itertools.count(9001)
        self._rule_ids = itertools.count(1)
        self._runner = None
        self.url = None
        # When a deletion ends: server id -> (action id, ends at, fails, hidden)
        self.deleting = {}

    # ------------------------------------------------------------ lifecycle

    async def start(self):
        app = web.Application(middlewares=[self._middleware])
        r = app.router
        r.add_get('/v1/servers', self.list_servers)
        r.add_post('/v1/servers', self.create_server)
        r.add_get('/v1/servers/{id}', self.get_server)
        r.add_put('/v1/servers/{id}', self.update_server)
        r.add_delete('/v1/servers/{id}', self.delete_server)
        r.add_post('/v1/servers/{id}/actions/{command}', self.server_action)
        r.add_get('/v1/actions/{id}', self.get_action)
        r.add_get('/v1/ssh_keys', self.list_keys)
        r.add_post('/v1/ssh_keys', self.create_key)
        r.add_get('/v1/ssh_keys/{id}', self.get_key)
        r.add_delete('/v1/ssh_keys/{id}', self.delete_key)
        for name, items in (('locations', LOCATIONS), ('server_types', SERVER_TYPES), ('images', IMAGES),
                            ('networks', NETWORKS)):
            r.add_get('/v1/' + name, self._static(name, items))
        r.add_get('/v1/images/{id}', self.get_image)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access
        self.url = 'http://{0}:{1}/v1'.format(self.host, self.port)
        LOG.info('Hetzner Cloud fake at %s', self.url)

    async def stop(self):
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ faults

    def add_rule(self, kind, method=None, path=None, times=1, seconds=None, status=None, code=None, message=None,
                 match=None):
        """A fault for the next ``times`` requests that match ``method``, the path prefix ``path`` (under /v1) and,
        with ``match``, hold that text in their path or body (a workspace's name, a server id)."""
        kinds = ('drop', 'delay', 'error', 'fail_delete', 'hide', 'foreign_answer', 'malformed')
        if kind not in kinds:
            raise ValueError('a Hetzner fault is one of {0}, not {1!r}'.format(', '.join(kinds), kind))
        rule = {'id': next(self._rule_ids), 'kind': kind, 'method': method, 'path': path, 'times': int(times),
                'seconds': seconds, 'status': status, 'code': code, 'message': message, 'match': match, 'hits': 0}
        self.rules.append(rule)
        return dict(rule)

    def clear_rules(self):
        self.rules = []

    def _take(self, kind, method, path, body=''):
        for rule in self.rules:
            if rule['kind'] != kind or rule['times'] <= 0:
                continue
            if rule['method'] and rule['method'] != method:
                continue
            if rule['path'] and not path.startswith(rule['path']):
                continue
            if rule.get('match') and rule['match'] not in path and rule['match'] not in body:
                continue
            rule['times'] -= 1
            rule['hits'] += 1
            return rule
        return None

    @web.middleware
    async def _middleware(self, request, handler):
        path = request.path[len('/v1'):] if request.path.startswith('/v1') else request.path
        body = (await request.read()).decode('utf-8', 'replace') if request.can_read_body else ''
        logged = {'method': request.method, 'path': path, 'time': time.time()}
        if request.method == 'POST' and path == '/servers':
            try:
                sent = json.loads(body)
                logged.update(name=sent.get('name'), workspace=(sent.get('labels') or {}).get('ephemera-workspace'))
            except ValueError:
                pass
        self.requests.append(logged)
        self.tick()
        if request.headers.get('Authorization') != 'Bearer {0}'.format(self.token):
            return web.json_response(error_body('unauthorized'), status=401)
        delay = self._take('delay', request.method, path, body)
        if delay is not None:
            await asyncio.sleep(float(delay['seconds'] or 1))
        failing = self._take('error', request.method, path, body)
        if failing is not None:
            status = int(failing['status'] or 500)
            code = failing['code'] or {400: 'invalid_input', 401: 'unauthorized', 403: 'forbidden', 404: 'not_found',
                                       409: 'conflict', 423: 'locked', 429: 'rate_limit_exceeded',
                                       503: 'unavailable', 504: 'timeout'}.get(status, 'server_error')
            headers = {'RateLimit-Limit': '3600', 'RateLimit-Remaining': '0'} if status == 429 else None
            return web.json_response(error_body(code, failing['message']), status=status, headers=headers)
        response = await handler(request)
        if self._take('drop', request.method, path, body) is not None:
            # Acted, and the answer is lost: the connection closes without one.
            LOG.info('dropping the answer to %s %s', request.method, path)
            request.transport.close()
            raise ConnectionResetError('answer dropped')
        malformed = self._take('malformed', request.method, path, body)
        if malformed is not None:
            return web.json_response({'action': {'id': 'x', 'status': 'unheard-of'}}, status=200)
        return response

    # ------------------------------------------------------------ state

    def tick(self, now=None):
        """Move servers and actions along: boots end, deletions end (or fail)."""
        now = time.time() if now is None else now
        for server in self.servers.values():
            if server['status'] == 'initializing' and now >= server['_ready_at']:
                server['status'] = 'running'
        for action in self.actions.values():
            if action['status'] == 'running' and now >= action['_ends_at'] and action['command'] != 'delete_server':
                action['status'] = 'success'
                action['progress'] = 100
                action['finished'] = iso(now)
        for server_id, (action_id, ends, fails, hidden) in list(self.deleting.items()):
            if now < ends:
                continue
            action = self.actions[action_id]
            action['finished'] = iso(now)
            action['progress'] = 100
            del self.deleting[server_id]
            if fails:
                action['status'] = 'error'
                action['error'] = {'code': 'action_failed', 'message': 'Action failed'}
                self.servers[server_id]['status'] = self.servers[server_id].pop('_before', 'running')
            else:
                action['status'] = 'success'
                server = self.servers.pop(server_id)
                self.addresses.release(server_id)
                LOG.info('server %s deleted', server_id)

    def _action(self, command, server_id, secs):
        now = time.time()
        action = {'id': next(self._action_ids), 'command': command, 'status': 'running' if secs > 0 else 'success',
                  'progress': 0 if secs > 0 else 100, 'started': iso(now), 'finished': None if secs > 0 else iso(now),
                  'resources': [{'id': server_id, 'type': 'server'}], 'error': None, '_ends_at': now + secs}
        self.actions[action['id']] = action
        return action

    @staticmethod
    def public(item):
        return {k: v for k, v in item.items() if not k.startswith('_')}

    def _server_view(self, server):
        return self.public(server)

    def _visible(self, server_id):
        entry = self.deleting.get(server_id)
        return server_id in self.servers and not (entry and entry[3])

    def _page(self, request, key, items):
        try:
            page = max(1, int(request.query.get('page', 1)))
            per_page = min(50, max(1, int(request.query.get('per_page', 25))))
        except ValueError:
            return web.json_response(error_body('invalid_input', 'invalid page or per_page'), status=400)
        total = len(items)
        last = max(1, (total + per_page - 1) // per_page)
        chunk = items[(page - 1) * per_page:page * per_page]
        return web.json_response({key: chunk, 'meta': {'pagination': {
            'page': page, 'per_page': per_page, 'previous_page': page - 1 if page > 1 else None,
            'next_page': page + 1 if page < last else None, 'last_page': last, 'total_entries': total}}})

    def _static(self, key, items):
        async def handler(request):
            name = request.query.get('name')
            found = [dict(i) for i in items if name is None or i['name'] == name]
            return self._page(request, key, found)
        return handler

    async def get_image(self, request):
        for image in IMAGES:
            if str(image['id']) == request.match_info['id']:
                return web.json_response({'image': image})
        return web.json_response(error_body('not_found', 'image not found'), status=404)

    # ------------------------------------------------------------ servers

    async def list_servers(self, request):
        name = request.query.get('name')
        selector = request.query.get('label_selector')
        found = [self._server_view(s) for i, s in sorted(self.servers.items()) if self._visible(i)
                 and (name is None or s['name'] == name) and matches(s['labels'], selector)]
        return self._page(request, 'servers', found)

    def _find(self, request):
        try:
            server_id = int(request.match_info['id'])
        except ValueError:
            return None, web.json_response(error_body('invalid_input', 'invalid server id'), status=400)
        if not self._visible(server_id):
            return None, web.json_response(error_body('not_found', 'server with ID %d not found' % server_id),
                                           status=404)
        return self.servers[server_id], None

    async def get_server(self, request):
        server, failed = self._find(request)
        return failed or web.json_response({'server': self._server_view(server)})

    async def create_server(self, request):
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(error_body('json_error'), status=400)
        problems = []
        name = body.get('name')
        if not isinstance(name, str) or not name:
            problems.append({'name': 'name', 'messages': ['Missing data for required field.']})
        stype = next((t for t in SERVER_TYPES if body.get('server_type') in (t['name'], t['id'])), None)
        if stype is None:
            problems.append({'name': 'server_type', 'messages': ['server type not found']})
        image = next((i for i in IMAGES if body.get('image') in (i['name'], i['id'], str(i['id']))), None)
        if image is None:
            problems.append({'name': 'image', 'messages': ['image not found']})
        location = next((x for x in LOCATIONS if body.get('location', 'fsn1') in (x['name'], x['id'])), None)
        if location is None:
            problems.append({'name': 'location', 'messages': ['location not found']})
        keys = []
        for ref in body.get('ssh_keys') or []:
            key = next((k for k in self.ssh_keys.values() if ref in (k['name'], k['id'], str(k['id']))), None)
            if key is None:
                problems.append({'name': 'ssh_keys', 'messages': ['ssh key %s not found' % ref]})
            else:
                keys.append(key)
        if problems:
            return web.json_response(error_body('invalid_input', 'invalid input in fields', {'fields': problems}),
                                     status=400)
        if any(s['name'] == name for s in self.servers.values()):
            return web.json_response(error_body('uniqueness_error', 'server name is already used',
                                                {'fields': [{'name': 'name'}]}), status=409)
        server_id = next(self._ids)
        address = self.addresses.allocate(server_id)
        now = time.time()
        foreign = self._take('foreign_answer', 'POST', '/servers', json.dumps(body)) is not None
        server = {
            'id': server_id, 'name': name, 'status': 'initializing', 'created': iso(now),
            'public_net': {'ipv4': {'id': server_id, 'ip': address, 'blocked': False, 'dns_ptr': 'static.example'},
                           'ipv6': None, 'floating_ips': [], 'firewalls': []},
            'private_net': [{'network': n, 'ip': '10.0.0.%d' % (server_id % 250 + 2), 'alias_ips': [],
                             'mac_address': '86:00:00:00:00:01'} for n in body.get('networks') or []],
            'server_type': dict(stype), 'location': dict(location), 'datacenter': {
                'id': location['id'], 'name': location['name'] + '-dc14', 'description': location['description'],
                'location': dict(location), 'server_types': {'supported': [], 'available': [],
                                                             'available_for_migration': []}},
            'image': dict(image), 'iso': None, 'rescue_enabled': False, 'locked': False, 'backup_window': None,
            'outgoing_traffic': 0, 'ingoing_traffic': 0, 'included_traffic': 21990232555520,
            'protection': {'delete': False, 'rebuild': False}, 'labels': dict(body.get('labels') or {}),
            'volumes': [], 'load_balancers': [], 'primary_disk_size': stype['disk'], 'placement_group': None,
            '_ready_at': now + self.boot_secs, '_keys': [k['public_key'] for k in keys]}
        self.servers[server_id] = server
        action = self._action('create_server', server_id, self.boot_secs)
        shown = self._server_view(server)
        if foreign:
            shown = dict(shown, id=server_id + 500000, name=name + '-other', labels={})
        LOG.info('server %s (%s) created at %s', server_id, name, address)
        return web.json_response({'server': shown, 'action': self.public(action), 'next_actions': [],
                                  'root_password': None}, status=201)

    async def update_server(self, request):
        server, failed = self._find(request)
        if failed:
            return failed
        body = await request.json()
        if 'labels' in body:
            server['labels'] = dict(body['labels'] or {})
        if 'name' in body:
            server['name'] = body['name']
        return web.json_response({'server': self._server_view(server)})

    async def delete_server(self, request):
        server, failed = self._find(request)
        if failed:
            return failed
        if server['protection']['delete']:
            return web.json_response(error_body('protected', 'server is delete protected'), status=403)
        if server['id'] in self.deleting:
            return web.json_response(error_body('locked', 'server is locked by a running action'), status=423)
        path = '/servers/%d' % server['id']
        fails = self._take('fail_delete', 'DELETE', path) is not None
        hidden = self._take('hide', 'DELETE', path)
        action = self._action('delete_server', server['id'], self.delete_secs)
        action['status'] = 'running'
        action['finished'] = None
        secs = max(self.delete_secs, float(hidden['seconds'] or 0) if hidden else 0)
        self.deleting[server['id']] = (action['id'], time.time() + secs, fails, bool(hidden))
        server['_before'] = server['status']
        server['status'] = 'deleting'
        return web.json_response({'action': self.public(action)})

    async def server_action(self, request):
        server, failed = self._find(request)
        if failed:
            return failed
        command = request.match_info['command']
        target = {'poweron': 'running', 'poweroff': 'off', 'shutdown': 'off'}.get(command)
        if target is None:
            return web.json_response(error_body('not_found', 'unknown action'), status=404)
        server['status'] = target
        action = self._action({'poweron': 'start_server', 'poweroff': 'stop_server',
                               'shutdown': 'shutdown_server'}[command], server['id'], 0)
        return web.json_response({'action': self.public(action)}, status=201)

    async def get_action(self, request):
        try:
            action = self.actions.get(int(request.match_info['id']))
        except ValueError:
            action = None
        if action is None:
            return web.json_response(error_body('not_found', 'action not found'), status=404)
        return web.json_response({'action': self.public(action)})

    # ------------------------------------------------------------ SSH keys

    async def list_keys(self, request):
        name = request.query.get('name')
        selector = request.query.get('label_selector')
        found = [self.public(k) for i, k in sorted(self.ssh_keys.items())
                 if (name is None or k['name'] == name) and matches(k['labels'], selector)]
        return self._page(request, 'ssh_keys', found)

    async def create_key(self, request):
        body = await request.json()
        name, public_key = body.get('name'), ' '.join(str(body.get('public_key') or '').split())
        if not name or not public_key.startswith('ssh-'):
            return web.json_response(error_body('invalid_input', 'invalid input in fields', {'fields': [
                {'name': 'public_key', 'messages': ['invalid public key']}]}), status=400)
        if any(k['name'] == name for k in self.ssh_keys.values()):
            return web.json_response(error_body('uniqueness_error', 'SSH key with the same name already exists'),
                                     status=409)
        key = {'id': next(self._key_ids), 'name': name, 'fingerprint': 'b7:2f:30:a0:2f:6c:58:6c:21:04:58:61:ba:06:3b:2c',
               'public_key': public_key, 'labels': dict(body.get('labels') or {}), 'created': iso(time.time())}
        self.ssh_keys[key['id']] = key
        return web.json_response({'ssh_key': key}, status=201)

    def _key(self, request):
        try:
            return self.ssh_keys.get(int(request.match_info['id']))
        except ValueError:
            return None

    async def get_key(self, request):
        key = self._key(request)
        if key is None:
            return web.json_response(error_body('not_found', 'ssh key not found'), status=404)
        return web.json_response({'ssh_key': key})

    async def delete_key(self, request):
        key = self._key(request)
        if key is None:
            return web.json_response(error_body('not_found', 'ssh key not found'), status=404)
        del self.ssh_keys[key['id']]
        return web.Response(status=204)

    # ------------------------------------------------------------ views

    def view(self):
        return {'url': self.url, 'servers': [dict(self._server_view(s), keys=s['_keys']) for s in self.servers.values()],
                'ssh_keys': list(self.ssh_keys.values()), 'rules': [dict(r) for r in self.rules],
                'deleting': {str(k): list(v) for k, v in self.deleting.items()}}
