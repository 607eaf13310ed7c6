"""The debian tier's package cache (tests/localpve/pkgcache.py) against a stand-in mirror and index on loopback:
what it keeps, what it always asks for, what the guests are told."""

import asyncio
import json
import os

import aiohttp
import yarl
from aiohttp import web

from tests.localpve import pkgcache


class Upstream:
    """A Debian mirror and a PyPI (index and files) in one server, counting what it is asked."""

    def __init__(self):
        self.asked = []
        self.release = 0
        self.port = None
        self.runner = None

    async def start(self):
        app = web.Application()
        app.router.add_get('/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb', self.deb)
        app.router.add_get('/debian/dists/bookworm/InRelease', self.in_release)
        app.router.add_get('/simple/uv/', self.index)
        app.router.add_get('/files/packages/3d/aa/0123/uv-0.1-py3-none-any.whl', self.wheel)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, '127.0.0.1', 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # pylint: disable=protected-access

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    async def deb(self, request):
        self.asked.append(request.path)
        return web.Response(body=b'd' * 200000, content_type='application/vnd.debian.binary-package')

    async def in_release(self, request):
        self.asked.append(request.path)
        self.release += 1
        return web.Response(text='release %d\n' % self.release)

    async def index(self, request):
        self.asked.append(request.path)
        return web.json_response({'files': [{'url': self.url + '/files/packages/3d/aa/0123/uv-0.1-py3-none-any.whl'}]})

    async def wheel(self, request):
        self.asked.append(request.path)
        return web.Response(body=b'wheel bytes')


def run(monkeypatch, tmp_path, scenario):
    async def main():
        upstream = Upstream()
        await upstream.start()
        monkeypatch.setattr(pkgcache, 'PYPI_INDEX', upstream.url + '/simple/')
        monkeypatch.setattr(pkgcache, 'PYPI_FILES', upstream.url + '/files/')
        cache = pkgcache.PackageCache(str(tmp_path / 'cache'), '127.0.0.1', os.getuid())
        await cache.start()
        try:
            async with aiohttp.ClientSession(auto_decompress=False) as session:
                return await scenario(upstream, cache, session)
        finally:
            await cache.stop()
            await upstream.runner.cleanup()
    return asyncio.run(main())


async def through(session, cache, url, **kwargs):
    """GET url through the cache as apt does (a proxy request); (status, body, headers)."""
    async with session.get(url, proxy=cache.url, **kwargs) as resp:
        return resp.status, await resp.read(), resp.headers


def test_a_package_is_fetched_once_then_served_from_the_cache(monkeypatch, tmp_path):
    async def scenario(upstream, cache, session):
        deb = upstream.url + '/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb'
        first = await through(session, cache, deb)
        second = await through(session, cache, deb)
        part = await through(session, cache, deb, headers={'Range': 'bytes=10-19'})
        return upstream.asked, first, second, part, dict(cache.stats)
    asked, first, second, part, stats = run(monkeypatch, tmp_path, scenario)
    assert first[:2] == (200, b'd' * 200000) and second[:2] == first[:2]
    # A resumed download is answered from the file.
    assert part[:2] == (206, b'd' * 10)
    assert asked == ['/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb']
    assert (stats['misses'], stats['hits']) == (1, 2)
    found = [os.path.join(top, n) for top, dirs, files in os.walk(str(tmp_path / 'cache' / 'apt')) for n in files]
    assert len(found) == 1 and found[0].endswith('/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb'), found


def test_indexes_that_change_are_asked_for_every_time(monkeypatch, tmp_path):
    async def scenario(upstream, cache, session):
        url = upstream.url + '/debian/dists/bookworm/InRelease'
        return [await through(session, cache, url) for dummy in range(2)], upstream.asked
    answers, asked = run(monkeypatch, tmp_path, scenario)
    assert [a[1] for a in answers] == [b'release 1\n', b'release 2\n']
    assert len(asked) == 2
    assert not os.listdir(str(tmp_path / 'cache' / 'apt'))


def test_it_only_reads_and_keeps_only_a_mirrors_file_names(monkeypatch, tmp_path):
    async def scenario(upstream, cache, session):
        async with session.post(upstream.url + '/debian/pool/x.deb', proxy=cache.url, data=b'x') as resp:
            return resp.status, upstream.asked
    post, asked = run(monkeypatch, tmp_path, scenario)
    assert post == 405 and asked == []
    cache = pkgcache.PackageCache(str(tmp_path / 'c'), '127.0.0.1', os.getuid())
    kept = cache._kept_path  # pylint: disable=protected-access
    assert kept(yarl.URL('http://deb.debian.org/debian/pool/main/j/jq/jq_1.6-2.1_amd64.deb')) == os.path.join(
        str(tmp_path), 'c', 'apt', 'deb.debian.org', 'debian', 'pool', 'main', 'j', 'jq', 'jq_1.6-2.1_amd64.deb')
    assert kept(yarl.URL('http://m:8080/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/ab12')).startswith(
        str(tmp_path / 'c' / 'apt' / 'm_8080' / 'debian' / 'dists'))
    for url in ('http://m/debian/dists/bookworm/InRelease', 'http://m/debian/pool/main/x.deb?v=1',
                'http://m/debian/pool/a/../../../etc/passwd'):
        assert kept(yarl.URL(url, encoded=True)) is None, url
    # The path's segments are file names as sent (an epoch's colon comes as %3a): nothing is decoded into a "..".
    assert kept(yarl.URL('http://m/debian/pool/%2e%2e/x.deb', encoded=True)) == \
        str(tmp_path / 'c' / 'apt' / 'm' / 'debian' / 'pool' / '%2e%2e' / 'x.deb')


def test_pypi_index_pages_lead_back_to_the_cache_which_keeps_the_files(monkeypatch, tmp_path):
    async def scenario(upstream, cache, session):
        async with session.get(cache.url + '/pypi/simple/uv/') as resp:
            index = json.loads(await resp.read())
        link = index['files'][0]['url']
        bodies = []
        for dummy in range(2):
            async with session.get(link) as resp:
                bodies.append(await resp.read())
        return cache.url, link, bodies, upstream.asked
    proxy, link, bodies, asked = run(monkeypatch, tmp_path, scenario)
    assert link == proxy + '/pypi/files/packages/3d/aa/0123/uv-0.1-py3-none-any.whl'
    assert bodies == [b'wheel bytes', b'wheel bytes']
    assert asked == ['/simple/uv/', '/files/packages/3d/aa/0123/uv-0.1-py3-none-any.whl']
    assert (tmp_path / 'cache' / 'pypi' / 'packages' / '3d' / 'aa' / '0123' / 'uv-0.1-py3-none-any.whl').exists()


def test_what_the_guests_are_told(monkeypatch, tmp_path):
    async def scenario(upstream, cache, session):
        return cache.url, cache.guest_setup()
    url, setup = run(monkeypatch, tmp_path, scenario)
    assert setup['files'][pkgcache.APT_PROXY_FILE] == url + '\n'
    pip_conf = setup['files'][pkgcache.PIP_CONF]
    assert 'index-url = %s/pypi/simple/' % url in pip_conf and 'cache-dir = /run/localpve/cache/pip' in pip_conf
    assert setup['binds'] == {'/run/localpve/cache/npm': str(tmp_path / 'cache' / 'npm'),
                              '/run/localpve/cache/pip': str(tmp_path / 'cache' / 'pip')}
    # Every place a guest writes to lies under /run (guestinit.py refuses anything else).
    assert all(path.startswith('/run/localpve/') for path in list(setup['files']) + list(setup['binds']))
    # The template's side: pointers into /run, no address, no cache.
    root = tmp_path / 'root'
    pkgcache.write_guest_settings(str(root), npmrc_extra='cafile=/etc/ssl/certs/ca-certificates.crt\n')
    assert os.readlink(str(root / 'etc' / 'pip.conf')) == pkgcache.PIP_CONF
    assert (root / 'etc' / 'npmrc').read_text() == ('cafile=/etc/ssl/certs/ca-certificates.crt\n'
                                                    'cache=/run/localpve/cache/npm\n')
    assert 'Proxy-Auto-Detect "%s"' % pkgcache.APT_DETECT in \
        (root / 'etc' / 'apt' / 'apt.conf.d' / '01localpve-cache').read_text()
    assert os.access(str(root / pkgcache.APT_DETECT.lstrip('/')), os.X_OK)
