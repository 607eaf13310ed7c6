"""A fakepve served over HTTPS inside the benchmark's own process, shaped like a large real site."""

import asyncio
import threading


class Server:
    """A FakePve on its own event loop in a daemon thread of this process."""

    def __init__(self, pve, certfile, keyfile):
        self.pve = pve
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name='fakepve', daemon=True)
        self.thread.start()
        self._wait(pve.start(certfile, keyfile))

    def _wait(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def stop(self):
        self._wait(self.pve.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()


def index_guests(pve):
    """Give the fake the O(1) lookup by id that a real PVE has (it opens the guest's config file by path).

    The fake finds a guest by scanning its list, which costs every per-guest request time in proportion to the
    cluster's size; that would charge the fake's cost to the plugin that makes per-guest requests.
    """
    by_id = {}
    pve.ct = by_id.get
    pve._guest_of = by_id.get  # pylint: disable=protected-access
    return by_id
