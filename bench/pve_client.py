"""Figures for the Proxmox client against an in-process fakepve: request rate, and what task waits cost.

    .venv/bin/python bench/pve_client.py

Prints, for tasks of several lengths, how many status looks a wait makes and how long after the task
stopped the wait returned (the price of the backoff); and the rate of plain GETs through one session.
"""

import asyncio
import tempfile
import threading
import time

from fakepve.certs import make_cert
from fakepve.server import FakePve

# .venv links this checkout as ansible_collections/ephemera/workspaces (make venv).
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox.client import PveClient, PveTaskFailed


def serve(time_scale):
    """A started FakePve on its own event loop thread; returns (pve, cafile, stop)."""
    certfile, keyfile = make_cert(tempfile.mkdtemp(prefix='bench-pve-'), hosts=('127.0.0.1',))[:2]
    pve = FakePve(host='127.0.0.1', port=0)
    pve.time_scale = time_scale
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(pve.start(certfile, keyfile), loop).result(30)

    def stop():
        asyncio.run_coroutine_threadsafe(pve.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    return pve, certfile, stop


def client(pve, cafile):
    return PveClient(pve.url, api_user='root@pam', api_password='secret', ca_file=cafile)


def bench_gets(count=300):
    pve, cafile, stop = serve(0)
    try:
        with client(pve, cafile) as api:
            api.get('/version')
            began = time.monotonic()
            for dummy in range(count):
                api.get('/cluster/resources', type='vm')
            spent = time.monotonic() - began
        print('GET /cluster/resources: {0} requests in {1:.2f} s = {2:.0f}/s through one session'.format(
            count, spent, count / spent))
    finally:
        stop()


def bench_waits(lengths=(0.2, 1.0, 3.0, 8.0)):
    pve, cafile, stop = serve(1)
    try:
        print('task length  outcome  status looks  returned after the task stopped')
        for n, length in enumerate(lengths):
            for fail in (False, True):
                vmid = 200 + 2 * n + int(fail)
                box = pve.add_ct(vmid, 'b{0}'.format(vmid))
                box.start_secs = length
                box.start_error = 'boom' if fail else None
                with client(pve, cafile) as api:
                    upid = api.post('/nodes/pve1/lxc/{0}/status/start'.format(vmid))
                    before = api.request_count
                    began = time.monotonic()
                    try:
                        api.wait_task(upid, timeout=60)
                        outcome = 'ok'
                    except PveTaskFailed:
                        outcome = 'failed'
                    spent = time.monotonic() - began
                    looks = api.request_count - before - (1 if fail else 0)  # a failure also reads the log
                print('{0:8.1f} s  {1:>8}  {2:12d}  {3:+.3f} s'.format(length, outcome, looks, spent - length))
    finally:
        stop()


if __name__ == '__main__':
    bench_gets()
    bench_waits()
