"""Proxmox clients used from threads at once, as parallel releases use them (one client per thread)."""

import subprocess
import sys
import threading
import warnings

from tests.unit.plugins.module_utils.test_pve_client import make_client


def in_threads(work, count=8):
    """Run ``work`` in ``count`` threads at once; the exceptions they raised."""
    errors = []

    def run():
        try:
            work()
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(exc)
    threads = [threading.Thread(target=run) for dummy in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_clients_made_at_once_in_a_fresh_process_all_load_their_libraries():
    """The first clients of a process, made in threads at once: none sees the libraries half imported."""
    script = '''
import threading, sys
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.proxmox import client
errors = set()
def ask():
    try:
        client.PveClient('https://127.0.0.1:1', api_token_id='a@pve!t', api_token_secret='s',
                         validate_certs=False).get('/version')
    except client.PveError as exc:
        errors.add(type(exc).__name__)
    except Exception as exc:
        errors.add('unexpected %r' % exc)
threads = [threading.Thread(target=ask) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(sorted(errors))
'''
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, timeout=60, check=True)
    # Nothing listens on port 1: every thread gets the client's own error for a refused connection.
    assert out.stdout.strip() == "['PveUnreachable']", out.stdout


def test_unverified_requests_in_threads_warn_nothing(fakepve):
    seen = []
    with warnings.catch_warnings():
        # Every warning shown, as if none had been silenced before (by an earlier client of this process).
        warnings.resetwarnings()
        warnings.simplefilter('always')
        saved = warnings.showwarning
        warnings.showwarning = lambda message, category, *rest, **kw: seen.append(category.__name__)
        try:
            def work():
                client = make_client(fakepve, None, validate_certs=False)
                for dummy in range(15):
                    client.get('/version')
            errors = in_threads(work, count=16)
        finally:
            warnings.showwarning = saved
    assert errors == []
    assert 'InsecureRequestWarning' not in seen
