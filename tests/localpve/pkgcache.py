"""The debian guest tier's package cache: what template builds download, kept on this machine, outside the checkout
and outside every guest, so that a rebuild does not download it again.

    <cache>/apt/<host>/<path>   Debian's packages (pool/) and indexes fetched by hash (by-hash/), as PackageProxy
                                fetched them from the mirror
    <cache>/pypi/<path>         PyPI's files (wheels, sdists, their metadata), fetched from files.pythonhosted.org
    <cache>/npm/                npm's cache; every debian-tier guest sees it at /run/localpve/cache/npm
    <cache>/pip/                pip's own cache (wheels it builds); /run/localpve/cache/pip in the guests

<cache> is $LOCALPVE_PACKAGE_CACHE, else packages/ in the debian tier's cache directory
($LOCALPVE_DEBIAN_CACHE, default /var/cache/ephemera-localpve). Clusters running side by side share it: a file is
written under a temporary name and renamed into place once complete.

How guests use it, without a byte of it in their files:
  apt   PackageProxy, an HTTP proxy of the cluster's own on its loopback address. The template carries
        `Acquire::http::Proxy-Auto-Detect` naming a script that prints /run/localpve/apt-proxy, which the guest's
        first process writes at each start with the proxy's current address (nothing there: apt goes direct).
        Files under pool/ and by-hash/ never change on a Debian mirror (a new version is a new name): they are kept
        and served from the cache; everything else (InRelease, Release) goes to the mirror every time.
        `apt-get clean` in a guest removes the guest's own copies, never these.
  pip   the same server is a PyPI mirror at /pypi/simple/: index pages come from pypi.org every time, with their
        file links pointing back at the proxy, whose /pypi/files/ serves files.pythonhosted.org's files (their
        paths carry their hash: they never change) from the cache. The template's /etc/pip.conf is a link to
        /run/localpve/pip.conf, which the first process writes (index-url, trusted-host, cache-dir); without it
        pip uses PyPI directly. (PyPI's files reach this machine through its egress proxy without caching headers,
        so pip's own HTTP cache would keep none of them.)
  npm   the template's /etc/npmrc sets `cache=/run/localpve/cache/npm`: the first process bind-mounts npm's and
        pip's cache directories in the guest's /run (a tmpfs of the guest's own mount namespace), so a template
        build's clean step (`rm -rf ~/.npm ~/.cache`) and a conversion to a template find nothing of them in the
        guest's root. Both belong to the agent user (uid 1000), who installs the agent tooling.
"""

import asyncio
import logging
import os
import re
import uuid

import aiohttp
import yarl
from aiohttp import web

LOG = logging.getLogger('localpve.pkgcache')
CACHE_ENV = 'LOCALPVE_PACKAGE_CACHE'
# In the guests: the tmpfs /run of each guest's own mount namespace.
GUEST_RUN = '/run/localpve'
APT_PROXY_FILE = GUEST_RUN + '/apt-proxy'
PIP_CONF = GUEST_RUN + '/pip.conf'
GUEST_CACHES = {'npm': GUEST_RUN + '/cache/npm', 'pip': GUEST_RUN + '/cache/pip'}
# What the template carries (written once, when the cluster seeds it): pointers to /run, no cache, no address.
APT_DETECT = '/usr/local/lib/localpve/apt-proxy'
GUEST_FILES = {
    '/etc/apt/apt.conf.d/01localpve-cache': (
        '// The try-out cluster\'s package cache (tests/localpve/pkgcache.py): the script prints the caching proxy\n'
        '// while the cluster serves one, else nothing (apt goes to the mirror directly).\n'
        'Acquire::http::Proxy-Auto-Detect "{0}";\n'.format(APT_DETECT), 0o644),
    APT_DETECT: ('#!/bin/sh\ncat {0} 2>/dev/null\nexit 0\n'.format(APT_PROXY_FILE), 0o755),
    # A link: pip reads no file where it points to nothing.
    '/etc/pip.conf': (PIP_CONF, 'link'),
}
NPMRC = 'cache={0}\n'.format(GUEST_CACHES['npm'])
# A file that never changes under its name on a Debian mirror.
KEPT = re.compile(r'/(pool|by-hash)/')
PYPI_INDEX = 'https://pypi.org/simple/'
PYPI_FILES = 'https://files.pythonhosted.org/'
SEGMENT = re.compile(r'^[A-Za-z0-9._+~%:=-]+$')
# Request headers passed on to the mirror; the rest (Range, conditionals, proxy and hop-by-hop ones) stay here.
FORWARD = ('user-agent', 'accept', 'cache-control', 'if-modified-since', 'if-none-match', 'range', 'if-range')
# Response headers the proxy passes back when it does not keep the file.
BACK = ('content-type', 'last-modified', 'etag', 'cache-control', 'expires', 'content-range', 'accept-ranges', 'age')
CHUNK = 1 << 16
# The bytes as the server has them (aiohttp would ask for gzip, and the proxy does not decompress).
IDENTITY = {'Accept-Encoding': 'identity'}


def cache_dir(debian_cache):
    """The package cache's directory: $LOCALPVE_PACKAGE_CACHE, else packages/ in the debian tier's cache."""
    return os.path.abspath(os.environ.get(CACHE_ENV) or os.path.join(debian_cache, 'packages'))


def write_guest_settings(root, npmrc_extra=''):
    """The template's side (written into its layer when the cluster seeds it): apt's proxy detection, npm's and pip's
    cache directories under /run. ``npmrc_extra`` is what else /etc/npmrc says (a CA bundle)."""
    for path, (text, mode) in dict(GUEST_FILES, **{'/etc/npmrc': (npmrc_extra + NPMRC, 0o644)}).items():
        target = os.path.join(root, path.lstrip('/'))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.unlink(target)
        if mode == 'link':
            os.symlink(text, target)
            continue
        with open(target, 'w', encoding='utf-8') as out:
            out.write(text)
        os.chmod(target, mode)


class PackageCache:
    """The cache's directories and the cluster's caching proxy for apt; guest_setup() is what a guest's first process
    sets up in its /run."""

    def __init__(self, directory, host, owner):
        self.dir = directory
        self.host = host
        self.owner = owner
        self.apt = os.path.join(directory, 'apt')
        self.pypi = os.path.join(directory, 'pypi')
        self.port = None
        self.stats = dict(hits=0, misses=0, passed=0, errors=0, bytes_from_cache=0, bytes_fetched=0)
        self._runner = None
        self._session = None

    @property
    def url(self):
        return 'http://{0}:{1}'.format(self.host, self.port) if self.port else None

    async def start(self):
        for path in (self.apt, self.pypi):
            os.makedirs(path, mode=0o755, exist_ok=True)
        for name in GUEST_CACHES:
            path = os.path.join(self.dir, name)
            os.makedirs(path, mode=0o755, exist_ok=True)
            if os.stat(path).st_uid != self.owner:
                os.chown(path, self.owner, self.owner)
        # No decompression (the bytes go on as the mirror sent them); the machine's own proxy settings if any.
        self._session = aiohttp.ClientSession(auto_decompress=False, trust_env=True,
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120))
        app = web.Application()
        app.router.add_route('*', '/{tail:.*}', self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access
        LOG.info('package cache %s, apt proxy %s', self.dir, self.url)

    async def stop(self):
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def guest_setup(self):
        """What a guest's first process puts in its /run: the proxy's address for apt, pip's configuration, the npm
        and pip caches (bind mounts)."""
        pip_conf = '[global]\nindex-url = {0}/pypi/simple/\ntrusted-host = {1}:{2}\ncache-dir = {3}\n'.format(
            self.url, self.host, self.port, GUEST_CACHES['pip'])
        return {'files': {APT_PROXY_FILE: self.url + '\n', PIP_CONF: pip_conf},
                'binds': {GUEST_CACHES[name]: os.path.join(self.dir, name) for name in GUEST_CACHES}}

    def view(self):
        return dict(self.stats, dir=self.dir, apt_proxy=self.url)

    # -------------------------------------------------------------- the proxy

    def _kept_path(self, url):
        """Where the cache keeps ``url``, or None for a file that is always fetched."""
        if url.raw_query_string or not KEPT.search(url.raw_path):
            return None
        parts = url.raw_path.strip('/').split('/')
        if any(part in ('.', '..') or not SEGMENT.match(part) for part in parts):
            return None
        host = url.raw_host + ('' if url.port in (None, 80) else '_{0}'.format(url.port))
        return os.path.join(self.apt, host, *parts)

    def _pypi_file(self, raw_path):
        """Where the cache keeps the PyPI file /pypi/files/<path>, or None for a path that is not one."""
        parts = raw_path[len('/pypi/files/'):].split('/')
        if not parts[0] or any(part in ('.', '..') or not SEGMENT.match(part) for part in parts):
            return None
        return os.path.join(self.pypi, *parts)

    async def _handle(self, request):
        target = request.raw_path
        if request.method not in ('GET', 'HEAD'):
            return web.Response(status=405, text='GET and HEAD only\n')
        if target.startswith('/pypi/simple/') and '..' not in target:
            url, kept = yarl.URL(PYPI_INDEX + target[len('/pypi/simple/'):], encoded=True), None
        elif target.startswith('/pypi/files/'):
            url, kept = yarl.URL(PYPI_FILES + target[len('/pypi/files/'):], encoded=True), self._pypi_file(target)
            if kept is None:
                return web.Response(status=404, text='not a PyPI file path\n')
        elif target.startswith('http://'):
            url = yarl.URL(target, encoded=True)
            kept = self._kept_path(url)
        else:
            return web.Response(status=404, text='a proxy for http://host/path, and a PyPI mirror at /pypi/simple/\n')
        try:
            if kept is not None and os.path.isfile(kept):
                self.stats['hits'] += 1
                self.stats['bytes_from_cache'] += os.path.getsize(kept)
                # Ranges and conditionals answered from the file.
                return web.FileResponse(kept, headers={'Content-Type': 'application/octet-stream'})
            if kept is not None and request.method == 'GET':
                return await self._fetch(request, url, kept)
            return await self._pass(request, url)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.stats['errors'] += 1
            LOG.warning('package cache: %s %s: %s', request.method, target, exc)
            return web.Response(status=502, text='package cache: {0}\n'.format(exc))

    async def _pass(self, request, url):
        """Ask the mirror, keep nothing."""
        self.stats['passed'] += 1
        headers = dict(((k, v) for k, v in request.headers.items() if k.lower() in FORWARD), **IDENTITY)
        async with self._session.request(request.method, url, headers=headers) as resp:
            body = await resp.read()
            self.stats['bytes_fetched'] += len(body)
            if str(url).startswith(PYPI_INDEX):
                # The index's file links lead back here (same length or not: the body is sent whole).
                body = body.replace(PYPI_FILES.encode(), '{0}/pypi/files/'.format(self.url).encode())
            return web.Response(status=resp.status, reason=resp.reason, body=body,
                                headers={k: v for k, v in resp.headers.items() if k.lower() in BACK})

    async def _fetch(self, request, url, kept):
        """The whole file from the mirror, passed on to apt while it is written to the cache; renamed into place once
        complete (a Range apt asked for is answered with the whole file, which apt takes)."""
        headers = dict(((k, v) for k, v in request.headers.items() if k.lower() in ('user-agent', 'accept')),
                       **IDENTITY)
        async with self._session.get(url, headers=headers) as resp:
            if resp.status != 200:
                return await self._answer(resp)
            self.stats['misses'] += 1
            response = web.StreamResponse(status=200, headers={
                'Content-Type': resp.headers.get('Content-Type', 'application/octet-stream')})
            if resp.content_length is not None:
                response.content_length = resp.content_length
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            part = '{0}.part-{1}'.format(kept, uuid.uuid4().hex[:8])
            await response.prepare(request)
            size, listening = 0, True
            try:
                with open(part, 'wb') as out:
                    async for chunk in resp.content.iter_chunked(CHUNK):
                        out.write(chunk)
                        size += len(chunk)
                        if listening:
                            try:
                                await response.write(chunk)
                            except (ConnectionError, RuntimeError):
                                # apt went away; the file is still worth keeping.
                                listening = False
                self.stats['bytes_fetched'] += size
                if resp.content_length is None or size == resp.content_length:
                    os.replace(part, kept)
            finally:
                if os.path.exists(part):
                    os.unlink(part)
            if listening:
                await response.write_eof()
            return response

    async def _answer(self, resp):
        self.stats['passed'] += 1
        body = await resp.read()
        return web.Response(status=resp.status, reason=resp.reason, body=body,
                            headers={k: v for k, v in resp.headers.items() if k.lower() in BACK})
