"""Runtime control of a cluster: the operations (faults, status) and the client of a cluster process.

FaultApi is the one list of operations. LocalCluster runs them in-process; ControlClient sends them
to a cluster process over HTTP on loopback (the `fault` and `status` commands use it, and so can tests).
The server side is cluster.ControlServer.
"""

import json
import urllib.error
import urllib.request

from .config import ClusterError, load_info

TOKEN_HEADER = 'X-LocalPVE-Token'


class FaultApi:
    """The operations on a running cluster. Subclasses define _op(name, **arguments)."""

    def _op(self, name, **arguments):
        raise NotImplementedError

    def status(self):
        """Nodes, quorum, guests (address, sshd state and pid), and every active fault."""
        return self._op('status')

    # Proxy in front of the API.
    def proxy_add(self, action, method, path, times=1, skip=0, seconds=None, status=None, message=None,
                  errors=None):
        """Add a proxy rule: action drop-response, delay (seconds), reset, or error (status, message, errors).
        method: GET, POST, PUT, DELETE or *; path: a glob on the API path such as /nodes/*/lxc/*/clone.
        times: requests it acts on (None: all); skip: matching requests let through first. Returns the rule."""
        return self._op('proxy_add', action=action, method=method, path=path, times=times, skip=skip,
                        seconds=seconds, status=status, message=message, errors=errors)

    def proxy_rules(self):
        """Every rule with its hits (spent ones too, until cleared)."""
        return self._op('proxy_rules')

    def proxy_remove(self, rule_id):
        return self._op('proxy_remove', rule_id=rule_id)

    def proxy_clear(self):
        return self._op('proxy_clear')

    # fakepve's own faults.
    def pve_fail(self, method, path, error=None, status=None, message=None, times=None):
        """fakepve's FakePve.fail(): a catalogued PVE error by name, or status and message, for requests whose
        path ends with path (or matches a schema template such as /nodes/{node}/lxc/{vmid}/status/start)."""
        return self._op('pve_fail', method=method, path=path, error=error, status=status, message=message,
                        times=times)

    def pve_errors(self, method, path):
        """The catalogued errors PVE can answer for a concrete path (names for pve_fail)."""
        return self._op('pve_errors', method=method, path=path)

    def pve_network(self, latency=None, jitter=None, node=None, drop_rate=None, hang_rate=None, hang_secs=None):
        """Slow (latency, jitter in PVE seconds; per node with node) or flaky (drop_rate, hang_rate) network."""
        return self._op('pve_network', latency=latency, jitter=jitter, node=node, drop_rate=drop_rate,
                        hang_rate=hang_rate, hang_secs=hang_secs)

    def pve_quorum(self, quorate):
        """Lose (False) or regain (True) quorum."""
        return self._op('pve_quorum', quorate=quorate)

    def pve_node(self, node, online):
        """Take a node offline (its guests become unreachable) or bring it back."""
        return self._op('pve_node', node=node, online=online)

    def pve_lock(self, vmid, lock='snapshot'):
        """Leave a container locked, as an interrupted task does."""
        return self._op('pve_lock', vmid=vmid, lock=lock)

    def pve_unlock(self, vmid):
        return self._op('pve_unlock', vmid=vmid)

    def pve_hold_lock(self, vmid, seconds):
        """Another task holds the container's config lock for seconds (PVE seconds)."""
        return self._op('pve_hold_lock', vmid=vmid, seconds=seconds)

    def pve_ct(self, vmid, start_secs=None, shutdown_secs=None, stop_secs=None, start_error=None):
        """A container's behaviour: task durations (PVE seconds) and an error its start ends with
        ('' clears it)."""
        return self._op('pve_ct', vmid=vmid, start_secs=start_secs, shutdown_secs=shutdown_secs,
                        stop_secs=stop_secs, start_error=start_error)

    def pve_access(self, token_id=None, token_secret=None, grants=(), pool=None, pool_vms=(), pool_storage=()):
        """An API token, ACL grants ([principal, path, [privileges]]) and pool members, as pveum sets them up
        (harness.op_pve_access)."""
        return self._op('pve_access', token_id=token_id, token_secret=token_secret, grants=[list(g) for g in grants],
                        pool=pool, pool_vms=list(pool_vms), pool_storage=list(pool_storage))

    def pve_clear(self):
        """Remove failures, restore the network, quorum and every node."""
        return self._op('pve_clear')

    # Guests.
    def guest_fault(self, kind, vmid=None, seconds=None, times=1, match=None, after=0.0):
        """refuse (seconds), never, or drop (after, match) for one VMID or the next guest(s); see GuestManager."""
        return self._op('guest_fault', kind=kind, vmid=vmid, seconds=seconds, times=times, match=match,
                        after=after)

    def guest_faults(self):
        return self._op('guest_faults')

    def guest_clear(self):
        return self._op('guest_clear')

    def dhcp(self, delay, vmid=None):
        """Leases come delay seconds after a start, or never (delay None); for one VMID or every guest."""
        return self._op('dhcp', delay=delay, vmid=vmid)

    # The foreign client.
    def foreign_create(self, vmid=None, node=None, pool=None, hostname=None, description=None, start=False,
                       how='clone'):
        """Another user creates a container (a template clone, or how='create' from the OS template)."""
        return self._op('foreign_create', vmid=vmid, node=node, pool=pool, hostname=hostname,
                        description=description, start=start, how=how)

    def foreign_edit(self, vmid, description):
        """Another user rewrites a container's description."""
        return self._op('foreign_edit', vmid=vmid, description=description)

    def foreign_snipe(self, on='clone', pool=None, times=1):
        """Another user takes the VMID someone else is about to use: on='clone' when a clone to it arrives
        (that clone fails with 'CT N already exists'), on='nextid' right after /cluster/nextid offers it."""
        return self._op('foreign_snipe', on=on, pool=pool, times=times)

    def foreign_tamper(self, description, times=1):
        """Another user rewrites the description of the next container someone else clones, as soon as it
        exists (before that clone's task reads as finished)."""
        return self._op('foreign_tamper', description=description, times=times)

    def foreign_clear(self):
        return self._op('foreign_clear')

    def clear(self):
        """Every fault off: proxy rules, fakepve faults, guest faults, foreign arms; DHCP back to its start."""
        return self._op('clear')

    def save(self):
        """Write the datacenter to disk now (it is also saved as it changes, and at shutdown)."""
        return self._op('save')


class OpClient:
    """Sends operations over HTTP on loopback to the control server of a try-out place that runs as its own
    process. What differs between the places is data: ``noun`` and ``module`` (for messages), ``error`` (what it
    raises) and ``read_info`` (how its info file is read)."""

    noun = 'cluster'
    module = 'tests.localpve'
    error = ClusterError
    read_info = staticmethod(load_info)

    def __init__(self, info=None, state_dir=None, timeout=60):
        self.info = info if info is not None else self.read_info(state_dir)
        self.url = self.info['control']['url']
        self.token = self.info['control']['token']
        self.timeout = timeout

    def _op(self, name, **arguments):
        request = urllib.request.Request(self.url + '/op/' + name, data=json.dumps(arguments).encode(),
                                         headers={'Content-Type': 'application/json', TOKEN_HEADER: self.token})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read())
            except ValueError:
                answer = {'error': 'HTTP {0}'.format(exc.code)}
            raise self.error(answer.get('error') or 'HTTP {0}'.format(exc.code)) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise self.error('the {0} does not answer at {1} ({2}); is it running? '
                             'python -m {3} status'.format(self.noun, self.url, exc, self.module)) from None
        return answer['result']

    def shutdown(self):
        """Ask the process to stop (down does this, then checks that everything is gone)."""
        return self._op('shutdown')


class ControlClient(OpClient, FaultApi):
    """The operations of a cluster that runs as its own process (started with `up`).

    ControlClient(info) with the dict of cluster.json, or ControlClient(state_dir=...) to read it.
    """
