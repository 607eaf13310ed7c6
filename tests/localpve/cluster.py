"""Running a Site: inside the calling process (LocalCluster, for pytest) or as the cluster process that
`python -m tests.localpve up` starts (serve)."""

import asyncio
import json
import logging
import os
import random
import signal
import sys
import threading

from . import debian, system
from .config import ClusterError, Options, ensure_agent_clis
from .control import FaultApi
from .harness import Site

LOG = logging.getLogger('localpve')
UP_TIMEOUT = 60
DOWN_TIMEOUT = 20


def serve(options, ready_fd=None):
    """The cluster process: run the Site until SIGTERM, SIGINT or a shutdown request, then stop it all."""
    return serve_site(lambda on_shutdown: Site(options, on_shutdown=on_shutdown), 'localpve', ready_fd)


def serve_site(make_site, name, ready_fd=None, log=LOG, traceback=False):
    """Run the site ``make_site(on_shutdown)`` makes on an event loop of its own (thread ``name``) until SIGTERM,
    SIGINT or a shutdown request, then stop it all. Whether it started goes to ``ready_fd`` as a message for `up`;
    a failed start is logged to ``log`` (with its ``traceback``)."""
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(levelname)s %(message)s', stream=sys.stderr)
    # One line per API request would bury the harness's own events.
    logging.getLogger('aiohttp.access').setLevel(logging.WARNING)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *args: stopping.set())
    signal.signal(signal.SIGINT, lambda *args: stopping.set())
    loop = LoopThread(name)
    site = make_site(stopping.set)
    try:
        loop.call(site.start(), UP_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to `up` as a message
        if traceback:
            log.exception('start failed')
        else:
            log.error('start failed: %s', exc)
        try:
            loop.call(site.stop(), DOWN_TIMEOUT)
        finally:
            loop.close()
        _tell(ready_fd, {'ok': False, 'error': str(exc) if isinstance(exc, ClusterError)
                         else '{0}: {1}'.format(type(exc).__name__, exc)})
        return 1
    _tell(ready_fd, {'ok': True})
    while not stopping.wait(0.5):
        pass
    try:
        loop.call(site.stop(), DOWN_TIMEOUT + 10)
    finally:
        loop.close()
    return 0


def _tell(fd, message):
    if fd is None:
        return
    with os.fdopen(fd, 'w') as out:
        out.write(json.dumps(message))


class LoopThread:
    """An event loop in a daemon thread; call() runs a coroutine on it and waits for the result."""

    def __init__(self, name):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro, timeout=120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        async def cancel_the_rest():
            # Tasks cut short by a stop (a long PVE task, a held lock) end here, not as warnings at exit.
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
        if self.thread.is_alive():
            self.call(cancel_the_rest(), 30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        if not self.thread.is_alive():
            self.loop.close()


def pick_host():
    """A loopback address 127.X.Y.1 that nothing listens on, so clusters run side by side."""
    used = set(listener[0] for listener in system.listening())
    rand = random.SystemRandom()
    for dummy in range(100):
        host = '127.{0}.{1}.1'.format(rand.randint(64, 250), rand.randint(0, 255))
        prefix = host.rsplit('.', 1)[0] + '.'
        if not any(address.startswith(prefix) for address in used):
            return host
    raise ClusterError('no free loopback /24 found for a cluster')


class LocalCluster(FaultApi):
    """A cluster inside this process, for tests:

        cluster = LocalCluster.start(tmp_path, time_scale=0)
        cluster.info['proxy_url'], cluster.pve (the FakePve), cluster.run(lambda pve: ...), cluster.stop()

    Defaults differ from `up`: a random loopback /24, ports chosen by the system, time_scale 0.
    """

    def __init__(self, site, loop):
        self.site = site
        self._loop = loop

    @classmethod
    def start(cls, state_dir, **options):
        options.setdefault('host', None)
        options.setdefault('api_port', 0)
        options.setdefault('proxy_port', 0)
        options.setdefault('time_scale', 0)
        if options['host'] is None:
            options['host'] = pick_host()
        opts = Options(state_dir=str(state_dir), **options).check()
        if opts.guests == 'debian':
            debian.ensure_base()
        elif opts.agent_clis:
            ensure_agent_clis()
        loop = LoopThread('localpve-' + opts.host)
        site = Site(opts)
        try:
            loop.call(site.start())
        except BaseException:
            loop.call(site.stop())
            loop.close()
            raise
        return cls(site, loop)

    @property
    def info(self):
        """What cluster.json holds (the file is written too, in the state directory)."""
        return self.site.info

    @property
    def pve(self):
        """The in-process FakePve. Change it through run(), which runs on the cluster's event loop."""
        return self.site.pve

    def run(self, fn, *args):
        """fn(*args) on the cluster's event loop (fn may be a coroutine function); its result."""
        async def call():
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result
        return self._loop.call(call())

    def _op(self, name, **arguments):
        return self._loop.call(self.site.op(name, arguments))

    def stop(self, timeout=120):
        """Stop it all; ``timeout`` seconds for the guests to stop (a thousand took about five minutes)."""
        try:
            self._loop.call(self.site.stop(), timeout)
        finally:
            self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
