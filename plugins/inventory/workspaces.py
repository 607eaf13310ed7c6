# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r'''
name: workspaces
short_description: Workspaces from the journal, with their live state from one cluster read
version_added: 0.1.0
description:
  - One host per workspace recorded in the journal, named after the workspace, with C(ansible_host),
    C(ansible_user) and C(ansible_port) set so that Ansible reaches the workspace over SSH.
  - The journal says which workspaces exist and what they are for; one C(GET /cluster/resources?type=vm) adds
    the live state of every container (status, lock, pool, tags) at once. Addresses come from the journal; only a
    running workspace without a recorded address costs one more request (its C(interfaces)), and those run a few
    at a time (O(max_concurrency)). Pool members that the journal does not know are reported in the C(orphans)
    group, with the verdict of their ownership marker (one C(config) read each).
  - Warm pool members (containers, instances, servers or Azure sets made ahead of demand by the C(pool_fill)
    playbook, on every provider) are hosts too, in the groups C(warm_pool_members) and C(warm_pool_<pool>), with
    C(warm_pool) naming their pool; a create that takes one makes it that workspace's host.
  - The inventory changes nothing in the cluster or the journal. Orphans are reported, never acted on; the
    workspaces' own records are never changed. The one file it writes is the known-hosts file of O(known_hosts_file)
    (with the default O(host_key_pinning=file); none with V(inline)), and its cache when caching is on.
  - When the cluster cannot be reached, the hosts come from the journal alone with a warning (an error with
    O(strict)). Wrong credentials, a certificate that does not verify and missing privileges are errors, because
    they do not go away by themselves.
  - The configuration file must end in C(.workspaces.yml) or C(.workspaces.yaml).
author:
  - Ephemera maintainers (@ephemera)
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - ephemera.workspaces.journal
  - ephemera.workspaces.proxmox
  # Each cloud provider's own options, notes and requirements (plugins/doc_fragments/<provider>.py, INVENTORY).
  - ephemera.workspaces.aws.inventory
  - ephemera.workspaces.hetzner.inventory
  - ephemera.workspaces.gcp.inventory
  - ephemera.workspaces.azure.inventory
notes:
  - O(journal_path) and the connection options fall back to their environment variables (E(EPHEMERA_JOURNAL),
    E(PROXMOX_HOST), E(PROXMOX_USER), ...) when the file does not set them, as the modules' options do.
  - Without O(api_host) (and E(PROXMOX_HOST)) the inventory is the journal alone, deliberately; no warning.
  - With O(cache), the whole inventory (journal and cluster) is kept for O(cache_timeout) seconds and a cache hit
    makes no API request and does not open the journal. An inventory made while the cluster was unreachable is
    not cached. C(ansible-playbook --flush-cache) reads afresh (and C(ansible-inventory --flush-cache) from
    ansible-core 2.19).
  - Host variables hold data from the journal and the cluster; every string of them is marked unsafe, so a workspace
    purpose or a container name that looks like a template is never evaluated (on ansible-core 2.17 and 2.18, a
    C(#jinja2:) header would otherwise choose other delimiters than braces).
options:
  plugin:
    description: The name of this plugin; it must be V(ephemera.workspaces.workspaces).
    required: true
    choices: [ephemera.workspaces.workspaces]
    type: str
  hostvar_prefix:
    description: Prefix of every host variable the plugin sets, except C(ansible_host), C(ansible_user) and C(ansible_port).
    type: str
    default: ephemera_
  group_prefix:
    description: Prefix of every group the plugin makes (C(workspaces), C(status_*), C(orphans), ...).
    type: str
    default: ''
  filters:
    description:
      - Which workspaces become hosts. Each key narrows the set; a value is one string or a list.
      - V(status) - workspaces in one of these statuses. Without it, every status except V(destroyed); a destroyed
        workspace that still has cleanup debt is shown all the same.
      - V(node) - workspaces (and orphans) on one of these nodes.
      - V(tag) - workspaces (and orphans) that carry every one of these Proxmox tags. While the cluster is
        unreachable, a workspace's tags are the ones it was created with.
    type: dict
    default: {}
  pools:
    description:
      - Pools whose members are expected to be workspaces. A member that the journal does not know, or whose
        ownership marker does not verify, is an orphan.
      - Pools named by the workspaces' own records are watched as well.
    type: list
    elements: str
    default: [disposable-workspaces]
  include_orphans:
    description:
      - Add orphans as hosts of the C(orphans) group (without C(ansible_host), so nothing connects to them by
        accident). Orphans are never put into any other group.
    type: bool
    default: true
  max_concurrency:
    description: How many C(interfaces) and C(config) requests run at the same time.
    type: int
    default: 8
  controller_secret:
    description:
      - The controller secret that keys the ownership markers, when it is not in the file next to the journal
        (for example from a vault). Needed only to verify the markers of orphans.
    type: str
    env:
      - name: EPHEMERA_CONTROLLER_SECRET
  strict:
    description:
      - Besides its meaning for O(compose), O(groups) and O(keyed_groups), make an unreachable cluster an error
        instead of a warning.
  host_key_pinning:
    description:
      - How the hosts' SSH connections are pinned to the host keys the create flow recorded.
      - V(file) writes them to a known-hosts file (O(known_hosts_file)) and names it in each host's
        C(ansible_ssh_common_args), for a controller that reads the inventory and runs its jobs on the same
        machine (C(ansible), C(ansible-playbook)).
      - V(inline) writes no file. Each host's own key travels in its variables, where an inventory update hands
        them to the jobs that run later in other containers (AWX). Its C(ansible_ssh_common_args) make SSH read
        no known-hosts file and take the key from C(KnownHostsCommand) (OpenSSH 8.5 or later on the machine that
        runs the job), offer only that key's algorithms, and refuse any other key; C(ansible_ssh_host_key_checking)
        is true for the host, so a job whose host key checking is off (ansible-runner's default) verifies it all
        the same.
    type: str
    choices: [file, inline]
    default: file
    env:
      - name: EPHEMERA_HOST_KEY_PINNING
  known_hosts_file:
    description:
      - The known-hosts file that holds the SSH host keys the create flow recorded for the workspaces (at its ssh
        step). Every workspace host with a recorded key gets C(ansible_ssh_common_args) set to
        C(-o UserKnownHostsFile=<this file> -o StrictHostKeyChecking=yes), so SSH verifies the key and refuses a
        guest that presents another.
      - It holds the key of every workspace of the journal that has one, an address, and a container not known to
        be stopped or gone, whatever O(filters) selects, so inventories of one journal with other filters agree on
        it. It is rewritten (atomically, mode 0600) only when that changes.
      - By default one file per journal, named after a hash of the journal's path, in
        C($XDG_CACHE_HOME/ephemera/known_hosts/), else C(~/.cache/ephemera/known_hosts/); that directory is made
        (0700) when missing. A file given here must be in an existing directory.
      - When it cannot be written (a read-only home, say), the hosts are listed all the same, without those SSH
        options, and a warning names the file; set this option to a file in a writable directory to verify the
        keys.
    type: path
    env:
      - name: EPHEMERA_KNOWN_HOSTS'''

EXAMPLES = r'''
# prod.workspaces.yml: every workspace of the journal, reached as the agent user
plugin: ephemera.workspaces.workspaces
journal_path: /var/lib/ephemera/journal.sqlite
api_host: pve1.example.com
api_token_id: automation@pve!inventory
# api_token_secret from PROXMOX_TOKEN_SECRET
ca_file: /etc/ephemera/pve-root-ca.pem

---
# Only ready workspaces on two nodes, grouped by repository, cached for five minutes
plugin: ephemera.workspaces.workspaces
filters:
  status: ready
  node: [pve1, pve2]
keyed_groups:
  - key: ephemera_repo | regex_replace('^.*/', '') | regex_replace('\\.git$', '')
    prefix: repo
compose:
  ansible_user: ephemera_ssh_user
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/ephemera-inventory
cache_timeout: 300
'''

import difflib
import hashlib
import os
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.durable import write_durable
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.pinning import inline_ssh_args, known_hosts_name
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalMissing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import (
    WORKSPACE_STATUSES,
    Journal,
    resolve_path,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    DEFAULT_PROVIDER,
    InventoryConfigError,
    NotFound,
    ProviderError,
    Refused,
    Resource,
    reachable_address,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.queue import Queue

# 2: workspaces carry their recorded SSH host key and private key path. 3: cloud workspaces and orphans, by region.
SNAPSHOT_VERSION = 3
FILTER_KEYS = ('status', 'node', 'tag')
# The create flow names each clone agent-<workspace>; a pool member by another name needs its marker checked.
HOSTNAME_PREFIX = 'agent-'
# Statuses in which the journal expects the workspace's container to exist.
EXPECTS_CONTAINER = ('provisioning', 'booting', 'bootstrapping', 'registering', 'ready', 'failed')
_TAG_SPLIT = re.compile(r'[;,\s]+')
_UNSAFE_GROUP_CHARS = re.compile(r'[^A-Za-z0-9_]')
# What may go into a known-hosts line: an address (IPv4, IPv6, DNS name) and a key as "<type> <base64>". Anything else
# in a journal record is left out rather than written into the file.
_KNOWN_HOSTS_ADDRESS = re.compile(r'^[A-Za-z0-9._:-]+$')
_HOST_KEY = re.compile(r'^[A-Za-z0-9@._+-]+ [A-Za-z0-9+/]+={0,2}$')
# Live states in which the workspace's container cannot be the one answering at its address.
NOT_RUNNING = ('absent', 'stopped', 'mismatch')


# ------------------------------------------------------------------------------------ pure logic

def as_list(value):
    """A filter value as a list of strings: one string, or a list of them."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def parse_tags(text):
    """PVE's tag string (``a;b``, also with commas or spaces) as a sorted list."""
    return sorted(set(t for t in _TAG_SPLIT.split(text or '') if t))


def make_unsafe(value):
    """``value`` with every string in it marked unsafe, so that it is never evaluated as a template.

    Every string, not only those with braces: the templar of ansible-core 2.17 and 2.18 honours a ``#jinja2:``
    header that chooses other delimiters, so a purpose typed into a survey could run a lookup on the controller
    without a single brace.
    """
    if isinstance(value, dict):
        return {make_unsafe(k): make_unsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [make_unsafe(v) for v in value]
    if isinstance(value, (str, bytes)):
        return wrap_var(value)
    return value


def safe_group(name):
    return _UNSAFE_GROUP_CHARS.sub('_', str(name))


def pick_address(interfaces):
    """The address to reach a guest of the cluster at, from its provider's ``interfaces`` answer: the first IPv4
    address of a non-loopback interface, else its first global IPv6 address; None if it has none (or is not
    running)."""
    return reachable_address(registry.inventory_hook(DEFAULT_PROVIDER).addresses(interfaces))


def listed_resource(entry):
    """A provider's listing entry as the inventory shows it: ``vmid`` and ``node`` are the id and location."""
    return {'vmid': entry['id'], 'node': entry['location'], 'type': entry['kind'], 'name': entry['name'],
            'status': entry['status'], 'lock': entry['lock'], 'pool': entry['pool'], 'tags': ';'.join(entry['tags']),
            'template': 0}


def current_step(record, operation=None):
    """Where the workspace is: the step its running operation reports, else one derived from the journal.

    Without a running operation: the first create step not done for a workspace being created, the
    failed step of a failed one, ``destroy`` while destroying, None when ready or destroyed.
    """
    if operation and operation.get('step'):
        return operation['step']
    status = record.get('status')
    if status in ('ready', 'destroyed'):
        return None
    if status == 'destroying':
        return 'destroy'
    if status == 'failed':
        failure = record.get('failure') or {}
        if failure.get('step'):
            return failure['step']
    done = record.get('progress') or {}
    for step in STEPS:
        if step not in done:
            return step
    return None


def live_view(resource):
    """The fields of a /cluster/resources entry the inventory shows."""
    return {
        'vmid': int(resource['vmid']),
        'type': resource.get('type'),
        'name': resource.get('name'),
        'node': resource.get('node'),
        'status': resource.get('status'),
        'lock': resource.get('lock'),
        'pool': resource.get('pool'),
        'tags': parse_tags(resource.get('tags')),
    }


def agent_view(record):
    """What the journal last observed of the workspace's agent, without its events (workspace_info has them)."""
    agent = (record.get('facts') or {}).get('agent')
    if not agent:
        return None
    return {k: agent.get(k) for k in ('name', 'session', 'error', 'waiting', 'running', 'exit', 'observed_at')}


def workspace_entry(record, debts, operation, now=None):
    params = record.get('params') or {}
    shown = leasing.view(record, time.time() if now is None else now, debt=debts)
    return {
        'lease': shown['lease'],
        'cleanup_status': shown['cleanup_status'],
        'name': record['name'],
        'status': record['status'],
        'activity': record['activity'],
        'agent': agent_view(record),
        'desired_state': record['desired_state'],
        'vmid': record['vmid'],
        'candidate_vmid': record['candidate_vmid'],
        'node': record['node'],
        'step': current_step(record, operation),
        'operation': operation,
        'repo': record['repo'],
        'ref': record['ref'],
        'purpose': record['purpose'],
        'created_at': record['created_at'],
        'updated_at': record['updated_at'],
        'last_failure': record['failure'],
        'cleanup_debt': [{k: d[k] for k in ('resource', 'attempts', 'last_error', 'next_retry')} for d in debts],
        'address': record['address'],
        'address_source': 'journal' if record['address'] else None,
        'agent_user': params.get('agent_user') or 'agent',
        'ssh_user': params.get('ssh_user') or 'root',
        'ssh_port': int(params.get('ssh_port') or 22),
        'ssh_private_key_file': params.get('ssh_key_path'),
        'host_key': (record.get('facts') or {}).get('host_key'),
        # The marker nonce of this life of the workspace: a marker of another life is not its (not a host variable).
        'marker_nonce': ownership.record_nonce(record),
        # A template build's candidate (or a built version's container): not a workspace, never a host.
        'template_build': bool(params.get('build')),
        # A warm pool member's pool (docs/pools.md): a host in the groups warm_pool_members and warm_pool_<pool>.
        'warm_pool': (params.get('pool_member') or {}).get('pool'),
        'pool': params.get('pool'),
        'lock': None,
        'tags': sorted(set(['ephemera'] + as_list(params.get('tags')))),
        'live_status': 'unknown',
    }


def assemble(records, debts, operations, resources, pools):
    """The inventory snapshot from the journal's records and cleanup debts, the running operations and
    (None when the cluster was not read) the /cluster/resources answer; ``pools`` are the watched pools.

    Returns ``{'workspaces': [...], 'orphans': [...]}`` of plain dicts. Workspaces that need their
    address (running, none recorded) get ``needs_address``; the orphans and the workspaces whose
    container does not carry the expected name get ``check_marker``: the caller reads those configs.
    """
    by_workspace = {}
    for debt in debts:
        by_workspace.setdefault(debt['workspace'], []).append(debt)
    workspaces = [workspace_entry(r, by_workspace.get(r['name'], []), operations.get(r['name'])) for r in records]
    orphans = []
    if resources is None:
        return {'workspaces': workspaces, 'orphans': orphans}
    live = {int(r['vmid']): r for r in resources if r.get('vmid') is not None and not int(r.get('template') or 0)}
    watched = set(pools) | set(ws['pool'] for ws in workspaces if ws['pool'])
    claimed = set()
    for ws in workspaces:
        ws['live_status'] = 'absent'
        if ws['status'] == 'destroyed':
            continue
        vmid = ws['vmid']
        resource = live.get(vmid) if vmid is not None else None
        if resource is None and vmid is None and ws['candidate_vmid'] is not None:
            # A clone whose answer was not recorded yet: the candidate is ours only under our name.
            candidate = live.get(ws['candidate_vmid'])
            if candidate is not None and candidate.get('name') == HOSTNAME_PREFIX + ws['name']:
                resource = candidate
        if resource is None:
            continue
        view = live_view(resource)
        claimed.add(view['vmid'])
        ws['journal_view'] = {k: ws[k] for k in ('node', 'pool', 'tags')}
        ws.update(vmid=view['vmid'], node=view['node'] or ws['node'], live_status=view['status'] or 'unknown',
                  lock=view['lock'], pool=view['pool'], tags=view['tags'], live=view)
        ws['check_marker'] = view['name'] != HOSTNAME_PREFIX + ws['name']
        ws['needs_address'] = view['status'] == 'running' and not ws['address']
    for vmid in sorted(live):
        resource = live[vmid]
        if vmid in claimed or resource.get('pool') not in watched:
            continue
        orphan = live_view(resource)
        orphan.update(reason='not_in_journal', marker=None, marker_workspace=None, check_marker=True)
        orphans.append(orphan)
    return {'workspaces': workspaces, 'orphans': orphans}


def apply_marker(snapshot, ws_or_orphan, description, secret, controller):
    """Record a config read's verdict on a workspace (whose container bears another name) or an orphan."""
    fields = ownership.parse(description) or {}
    if 'reason' in ws_or_orphan:
        ws_or_orphan['marker'] = ownership.verdict(description, secret, controller, vmid=ws_or_orphan['vmid'])
        ws_or_orphan['marker_workspace'] = fields.get('workspace')
        return
    ws = ws_or_orphan
    verdict = ownership.verdict(description, secret, controller, workspace=ws['name'], vmid=ws['vmid'],
                                nonce=ws.get('marker_nonce'))
    ws['marker'] = verdict
    if verdict == ownership.VERIFIED:
        return
    # The container at the journal's vmid does not prove to be this workspace: a foreign guest took the id.
    view = ws.pop('live')
    ws.update(ws['journal_view'], live_status='mismatch', lock=None)
    if view['pool'] is not None:
        view.update(reason='marker_' + verdict, marker=verdict, marker_workspace=fields.get('workspace'))
        snapshot['orphans'].append(view)
        snapshot['orphans'].sort(key=lambda o: o['vmid'])


def wanted(entry, filters, orphan=False):
    """True if the workspace (or orphan) passes the filters."""
    if not orphan and entry.get('template_build'):
        return False
    if not orphan:
        statuses = as_list(filters.get('status'))
        if statuses:
            if entry['status'] not in statuses:
                return False
        elif entry['status'] == 'destroyed' and not entry['cleanup_debt']:
            return False
    nodes = as_list(filters.get('node'))
    if nodes and entry['node'] not in nodes:
        return False
    tags = as_list(filters.get('tag'))
    return all(tag in entry['tags'] for tag in tags)


def known_hosts(workspaces):
    """The pinned SSH endpoints of the workspaces: ``({endpoint: host key}, {endpoint: [workspace names]})``.

    The second dict holds the endpoints that workspaces record different keys for; they are pinned to none, so
    that neither key passes for the other machine. Only workspaces that have a recorded key and address and whose
    container is not known to be stopped or gone count.
    """
    seen = {}
    for ws in workspaces:
        key, address = ws.get('host_key'), ws.get('address')
        if not key or not address or ws['status'] == 'destroyed' or ws['live_status'] in NOT_RUNNING:
            continue
        if not _HOST_KEY.match(key) or not _KNOWN_HOSTS_ADDRESS.match(address):
            continue
        seen.setdefault(known_hosts_name(address, ws['ssh_port']), []).append((ws['name'], key))
    pinned, conflicts = {}, {}
    for endpoint, claims in seen.items():
        keys = set(key for _name, key in claims)
        if len(keys) == 1:
            pinned[endpoint] = keys.pop()
        else:
            conflicts[endpoint] = sorted(name for name, _key in claims)
    return pinned, conflicts


def known_hosts_text(pinned, journal_path):
    lines = ['# SSH host keys recorded in the journal %s; written by the ephemera.workspaces.workspaces inventory.'
             % journal_path]
    lines.extend('%s %s' % (endpoint, pinned[endpoint]) for endpoint in sorted(pinned))
    return '\n'.join(lines) + '\n'


def default_known_hosts_file(journal_path):
    """``$XDG_CACHE_HOME/ephemera/known_hosts/<hash of the journal path>``, else under ``~/.cache``."""
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'ephemera', 'known_hosts', hashlib.sha256(journal_path.encode('utf-8')).hexdigest()[:16])


def ssh_common_args(known_hosts_file):
    """``ansible_ssh_common_args`` that make SSH verify a host's key against ``known_hosts_file`` alone."""
    value = known_hosts_file.replace('%', '%%')  # ssh expands %-tokens in the file name
    if re.search(r'\s', value):
        value = '"%s"' % value
    return '-o %s -o StrictHostKeyChecking=yes' % shlex.quote('UserKnownHostsFile=' + value)


def write_known_hosts(path, text, make_directory):
    """Write ``text`` to ``path`` (atomically, 0600) unless it holds it already; True if it was written."""
    try:
        with open(path) as existing:
            if existing.read() == text:
                return False
    except (IOError, OSError):
        pass
    directory = os.path.dirname(path)
    if make_directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o700, exist_ok=True)
    write_durable(path, text, 0o600)
    return True


def workspace_vars(ws):
    """The host variables of a workspace, without the prefix."""
    names = ('name', 'status', 'activity', 'agent', 'desired_state', 'vmid', 'candidate_vmid', 'node', 'step', 'operation',
             'repo', 'ref', 'purpose', 'created_at', 'updated_at', 'last_failure', 'cleanup_debt', 'address',
             'address_source', 'agent_user', 'ssh_user', 'ssh_port', 'host_key', 'live_status', 'lock', 'pool', 'tags',
             'lease', 'cleanup_status', 'warm_pool')
    out = {k: ws.get(k) for k in names}
    out['marker'] = ws.get('marker')
    return out


def workspace_groups(ws):
    """The groups of a workspace host (before the group prefix)."""
    groups = ['status_' + ws['status'], 'activity_' + ws['activity']]
    if ws['node']:
        groups.append('node_' + safe_group(ws['node']))
    if ws['cleanup_debt']:
        groups.append('cleanup_debt')
    if ws.get('warm_pool') and ws['status'] != 'destroyed':
        groups += ['warm_pool_members', 'warm_pool_' + safe_group(ws['warm_pool'])]
    # The journal expects a container that the cluster does not show (or shows as someone else's).
    if ws['vmid'] is not None and ws['status'] in EXPECTS_CONTAINER and ws['live_status'] in ('absent', 'mismatch'):
        groups.append('missing')
    return groups


def orphan_vars(orphan):
    names = ('vmid', 'type', 'name', 'node', 'status', 'lock', 'pool', 'tags', 'reason', 'marker', 'marker_workspace')
    out = {k: orphan.get(k) for k in names}
    out['live_status'] = out.pop('status')
    out['orphan_reason'] = out.pop('reason')
    return out


# ----------------------------------------------------------------------------------- clouds

# The providers other than the cluster's are clouds, each read through its inventory hook (registry.inventory_hook):
# one tag-filtered listing per region (or one per scope, of whole sets) gives every instance of ours with its tags,
# the ownership marker among them, so no instance needs a read of its own.
# Statuses of a create whose instance may exist before its id is recorded.
CREATING = ('requested', 'provisioning', 'booting', 'bootstrapping', 'registering')


def record_provider(record):
    """The provider of a journal record (the default one for records made before there were others)."""
    return record.get('provider') or DEFAULT_PROVIDER


def cloud_entry(record, debts, operation, now=None):
    """A workspace of a cloud provider: the journal's view, with its provider, region and instance id."""
    ws = workspace_entry(record, debts, operation, now)
    ws.update(provider=record_provider(record), region=record.get('location'), instance_id=record.get('resource_id'),
              vmid=None, candidate_vmid=None, node=None, pool=None, marker=None)
    return ws


def assemble_cloud(provider, records, debts, operations, listings, judge):
    """The workspaces and orphans of one cloud provider (``provider``: its name).

    ``records`` are that provider's journal records; ``listings`` maps each region to its listing (the provider's
    :meth:`list` entries), or to None when the region could not be read (its workspaces keep the journal's view,
    ``live_status: unknown``). ``judge(entry, workspace, nonce)`` gives ``(verdict, marker's workspace)`` of a
    listed instance as a resource of ``workspace`` (None: whatever workspace a genuine marker names).

    A workspace is matched with the instance at its recorded id when that instance's marker verifies for it (and
    for this life of it; without the controller secret, when the marker names it); a create whose instance id is
    not recorded yet is matched with the one instance whose marker verifies for it. Every other listed instance is
    an orphan, with why: ``not_in_journal`` (no record holds its id), ``destroyed_in_journal`` (the record holding
    its id was destroyed) or ``marker_<verdict>`` (the instance at a workspace's recorded id does not prove to be
    that workspace's).
    """
    by_workspace = {}
    for debt in debts:
        by_workspace.setdefault(debt['workspace'], []).append(debt)
    workspaces = [cloud_entry(r, by_workspace.get(r['name'], []), operations.get(r['name'])) for r in records]
    live = {}
    for region in sorted(listings):
        for entry in listings[region] or ():
            live.setdefault((region, entry['id']), entry)
    claimed, mismatched = set(), {}
    for ws in workspaces:
        if listings.get(ws['region']) is None:
            continue
        ws['live_status'] = 'absent'
        if ws['status'] == 'destroyed':
            continue
        key = (ws['region'], ws['instance_id'])
        entry = live.get(key) if ws['instance_id'] else None
        if entry is None and ws['instance_id'] is None and ws['status'] in CREATING:
            ours = [e for (region, dummy), e in sorted(live.items()) if region == ws['region'] and (region, e['id'])
                    not in claimed and _is_its(ws, *judge(e, ws['name'], ws['marker_nonce']))]
            entry = ours[0] if len(ours) == 1 else None
        if entry is None:
            continue
        verdict, named = judge(entry, ws['name'], ws['marker_nonce'])
        ws['marker'] = verdict
        if not _is_its(ws, verdict, named):
            ws['live_status'] = 'mismatch'
            mismatched[(ws['region'], entry['id'])] = verdict
            continue
        claimed.add((ws['region'], entry['id']))
        ws.update(instance_id=entry['id'], live_status=entry.get('status') or 'unknown', lock=entry.get('lock'),
                  tags=sorted(entry.get('tags') or []), live=entry)
        ws['needs_address'] = entry.get('status') == 'running' and not ws['address']
    recorded = {(ws['region'], ws['instance_id']): ws for ws in workspaces if ws['instance_id']}
    orphans = []
    for key in sorted(live):
        if key in claimed:
            continue
        entry = live[key]
        verdict, named = judge(entry, None, ownership.ANY)
        holder = recorded.get(key)
        if key in mismatched:
            reason = 'marker_' + mismatched[key]
        elif holder is not None and holder['status'] == 'destroyed':
            reason = 'destroyed_in_journal'
        else:
            reason = 'not_in_journal'
        orphans.append({'provider': provider, 'region': key[0], 'instance_id': key[1],
                        'vmid': None, 'node': None, 'type': entry.get('kind'), 'name': entry.get('name'),
                        'status': entry.get('status'), 'lock': entry.get('lock'), 'pool': entry.get('pool'),
                        'tags': sorted(entry.get('tags') or []), 'reason': reason, 'marker': verdict,
                        'marker_workspace': named})
    return {'workspaces': workspaces, 'orphans': orphans}


def _is_its(ws, verdict, named):
    """True when a marker's verdict makes an instance the workspace's: verified, or, without the controller secret
    (unverified), a marker that names the workspace: ours by its words, as far as a reader without the secret can
    tell."""
    return verdict == ownership.VERIFIED or (verdict == ownership.UNVERIFIED and named == ws['name'])


def cloud_vars(ws):
    """The host variables of a cloud workspace, without the prefix."""
    out = workspace_vars(ws)
    out.update(provider=ws['provider'], region=ws['region'], instance_id=ws['instance_id'])
    out.update((k, ws[k]) for k in SET_VARS if k in ws)
    return out


def cloud_groups(ws):
    """The groups of a cloud workspace host: as a cluster one's, by provider and region instead of node."""
    groups = ['status_' + ws['status'], 'activity_' + ws['activity'], 'provider_' + safe_group(ws['provider'])]
    if ws['region']:
        groups.append('region_' + safe_group(ws['region']))
    if ws['cleanup_debt']:
        groups.append('cleanup_debt')
    if ws.get('warm_pool') and ws['status'] != 'destroyed':
        groups += ['warm_pool_members', 'warm_pool_' + safe_group(ws['warm_pool'])]
    expected = ws['instance_id'] is not None and ws['status'] in EXPECTS_CONTAINER
    if expected and ws['live_status'] in ('absent', 'mismatch'):
        groups.append('missing')
    return groups


def cloud_orphan_vars(orphan):
    out = orphan_vars(orphan)
    out.update(provider=orphan['provider'], region=orphan['region'], instance_id=orphan['instance_id'])
    out.update((k, orphan[k]) for k in SET_VARS + SET_ORPHAN_VARS if k in orphan)
    return out


# ----------------------------------------------------------------------------------- clouds of sets

# A workspace's own host variables of a provider that lists whole sets by scope (a resource group), and an orphan's:
# its set, its members, and whether it is complete.
SET_VARS = ('location', 'resource_group')
SET_ORPHAN_VARS = ('set', 'members', 'set_status', 'set_problem', 'address')


def set_listings(records, scopes, read, scope_of, scope_key='resource_group'):
    """The listings of a provider's sets by location, for assemble_cloud, and the state of each scope.

    ``read(scope)`` gives the sets of one scope (a resource group), or raises: that scope's listing is then unknown,
    and so is every location one of the journal's workspaces in that scope (``scope_of(record)``) is in (None: those
    workspaces keep the journal's view). Each entry gets its scope under ``scope_key``. Returns (listings,
    {scope: 'ok' or the error})."""
    listings, states = {}, {}
    for record in records:
        if record.get('location'):
            listings.setdefault(record['location'].lower(), [])
    unknown = set()
    for scope in sorted(scopes):
        try:
            entries = read(scope)
        except ProviderError as err:
            states[scope] = err
            unknown.update(r['location'].lower() for r in records if scope_of(r) == scope and r.get('location'))
            continue
        states[scope] = 'ok'
        for entry in entries:
            entry = dict(entry, **{scope_key: scope})
            listings.setdefault(entry['location'], []).append(entry)
    for location in unknown:
        listings[location] = None
    return listings, states


# ---------------------------------------------------------------------------------------- plugin

class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):

    NAME = 'ephemera.workspaces.workspaces'

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(('.workspaces.yml', '.workspaces.yaml'))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path)
        self._path = path
        config = self._read_config_data(path)
        self._config_data = config
        self._check_config(config)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option('cache') and cache
        update_cache = self.get_option('cache') and not cache
        snapshot = None
        if use_cache:
            try:
                snapshot = self._cache[cache_key]
            except KeyError:
                update_cache = True
            if snapshot is not None and snapshot.get('version') != SNAPSHOT_VERSION:
                snapshot, update_cache = None, True
        if snapshot is None:
            snapshot = self._take_snapshot()
        if update_cache and snapshot['cluster'] != 'offline' and 'offline' not in snapshot['regions'].values():
            self._cache[cache_key] = snapshot
        self._populate(snapshot)

    # ------------------------------------------------------------------------------- options

    def _fail(self, text):
        raise AnsibleParserError('%s: %s' % (self._path, text))

    def _check_config(self, config):
        known = set(self.option_definitions) | set(['plugin'])
        for key in sorted(config):
            if key not in known:
                # The two closest, in name order: journal_path and journal_url are both close to 'journal'.
                close = sorted(difflib.get_close_matches(key, sorted(known), n=2))
                self._fail('unknown option %r%s. Options of %s: %s.' % (
                    key, ' (did you mean %s?)' % ' or '.join(repr(c) for c in close) if close else '', self.NAME,
                    ', '.join(sorted(known))))
        filters = self.get_option('filters') or {}
        for key in sorted(filters):
            if key not in FILTER_KEYS:
                self._fail('unknown filter %r in option filters; the filters are %s.' % (key, ', '.join(FILTER_KEYS)))
        bad = sorted(set(as_list(filters.get('status'))) - set(WORKSPACE_STATUSES))
        if bad:
            self._fail('option filters.status: unknown status %s; the statuses are %s.'
                       % (', '.join(bad), ', '.join(WORKSPACE_STATUSES)))
        if self.get_option('max_concurrency') < 1:
            self._fail('option max_concurrency must be at least 1, not %d.' % self.get_option('max_concurrency'))

    def _given(self, name):
        """The option's value if the file (or an env entry of its own) sets it; None for a bare default. Read from the
        file's data and the environment: before 2.19, ansible-core's get_option_and_origin does not know the file's
        values (it says 'default' for them)."""
        if name in self._config_data:
            return self.get_option(name)
        for entry in self.option_definitions.get(name, {}).get('env') or []:
            if entry.get('name') in os.environ:
                return self.get_option(name)
        return None

    def _where(self, *names):
        """'option api_user (from PROXMOX_USER)': which options (and where their values came from) a message means."""
        parts = []
        env_vars = registry.inventory_hook(DEFAULT_PROVIDER).env_vars
        for name in names:
            source = ''
            if self._given(name) is None and os.environ.get(env_vars.get(name, '')):
                source = ' (from %s)' % env_vars[name]
            parts.append(name + source)
        return 'option%s %s' % ('s' if len(parts) > 1 else '', ', '.join(parts))

    # ------------------------------------------------------------------------------ snapshot

    def _take_snapshot(self):
        everything, debts, operations, journal_path = self._read_journal()
        hooks = registry.inventory_hooks()
        clouds = [hook for hook in hooks if hook.listing != 'cluster']
        records = [r for r in everything if record_provider(r) not in [hook.name for hook in clouds]]
        cluster_hook = registry.inventory_hook(DEFAULT_PROVIDER)
        provider = self._provider(cluster_hook)
        resources, cluster, cluster_error = None, 'skipped', None
        if provider is not None:
            try:
                resources = [listed_resource(entry) for entry in provider.list(every_kind=True)]
                cluster = 'ok'
            except ProviderError as err:
                self._cluster_error(err, provider, cluster_hook)
                cluster, cluster_error = 'offline', str(err)
        pools = self.get_option('pools') or []
        snapshot = assemble(records, debts, operations, resources, pools)
        snapshot.update(version=SNAPSHOT_VERSION, cluster=cluster, cluster_error=cluster_error)
        if resources is not None:
            self._complete(snapshot, provider, journal_path)
        if provider is not None:
            provider.close()
        snapshot['regions'] = {}
        for hook in clouds:
            add = self._add_sets if hook.listing == 'sets' else self._add_cloud
            add(snapshot, hook, [r for r in everything if record_provider(r) == hook.name], debts, operations,
                journal_path)
        return snapshot

    def _add_cloud(self, snapshot, hook, records, debts, operations, journal_path):
        """The workspaces and orphans of a cloud provider (``hook``: its inventory hook): one listing per region
        (every region a record names, and the option's), each read through the provider, which follows every page."""
        name = hook.name
        regions = set(r['location'] for r in records if r['location']) | set(self._cloud_regions(hook))
        if not regions:
            return
        secret = self._secret(journal_path)
        listings, resources, clients = {}, {}, {}
        try:
            for region in sorted(regions):
                provider = clients[region] = self._cloud_provider(hook, region, secret)
                try:
                    # A provider whose listing covers every location is read per location all the same.
                    listings[region] = [e for e in provider.list() if e['location'] == region]
                except ProviderError as err:
                    self._cloud_error(hook, region, err)
                    listings[region] = None
                    snapshot['regions']['%s/%s' % (name, region)] = 'offline'
                    continue
                snapshot['regions']['%s/%s' % (name, region)] = 'ok'
                for entry in listings[region]:
                    try:
                        resources[(region, entry['id'])] = provider.find_listed(entry)
                    except ProviderError as err:
                        resources[(region, entry['id'])] = err

            def judge(entry, workspace, nonce):
                region = entry['location']
                resource = resources.get((region, entry['id']))
                if resource is None or isinstance(resource, Exception):
                    return 'unreadable', None
                provider = clients[region]
                return (provider.verify(resource, workspace, nonce),
                        provider.marker_fields(resource).get('workspace') or None)

            part = assemble_cloud(name, records, debts, operations, listings, judge)
            failed = []
            for ws in part['workspaces']:
                entry = ws.pop('live', None)
                if ws.pop('needs_address', False) and entry is not None:
                    resource = resources.get((ws['region'], entry['id']))
                    try:
                        address = reachable_address(clients[ws['region']].addresses(resource))
                    except ProviderError as err:
                        failed.append((ws['name'], err))
                        continue
                    if address:
                        ws.update(address=address, address_source='instance')
            if failed:
                self.display.warning('%s: the addresses of %d %s instances could not be read; first: %s: %s'
                                     % (self._path, len(failed), name, failed[0][0], failed[0][1]))
        finally:
            for provider in clients.values():
                provider.close()
        snapshot['workspaces'].extend(part['workspaces'])
        snapshot['orphans'].extend(part['orphans'])

    def _add_sets(self, snapshot, hook, records, debts, operations, journal_path):
        """The workspaces and orphans of a provider that lists whole sets (``hook``: its inventory hook): one listing
        (every page) of each scope (a resource group), every set judged from it, its marker from its listing (no read
        of its own)."""
        scopes = set(g for g in (hook.record_scope(r) for r in records) if g) | set(self._cloud_regions(hook))
        if not scopes:
            return
        secret = self._secret(journal_path)
        provider = self._cloud_provider(hook, None, secret)
        try:
            listings, states = set_listings(records, scopes, lambda scope: hook.read_sets(provider, scope),
                                            hook.record_scope, hook.scope_key)
        finally:
            provider.close()
        for scope, state in sorted(states.items()):
            snapshot['regions']['%s/%s' % (hook.name, scope)] = 'ok' if state == 'ok' else 'offline'
            if state != 'ok':
                self._cloud_error(hook, scope, state)
        live = {(location, e['id']): e for location, entries in listings.items() for e in entries or ()}

        def judge(entry, workspace, nonce):
            resource = Resource(entry['id'], entry['location'], marker_text=entry.get('marker_text'),
                                native=entry.get('native'))
            return (provider.verify(resource, workspace, nonce),
                    provider.marker_fields(resource).get('workspace') or None)

        shown = [dict(r, location=(r.get('location') or '').lower() or None) for r in records]
        part = assemble_cloud(hook.name, shown, debts, operations, listings, judge)
        for ws in part['workspaces']:
            ws.update(location=ws['region'])
            entry = ws.pop('live', None)
            record = next((r for r in records if r['name'] == ws['name']), {})
            ws[hook.scope_key] = entry[hook.scope_key] if entry else hook.record_scope(record)
            ws.pop('needs_address', None)
            if entry is not None and not ws['address'] and entry.get('address'):
                # No address recorded yet: the set's public IP as the listing shows it.
                ws.update(address=entry['address'], address_source='listing')
        for orphan in part['orphans']:
            entry = live.get((orphan['region'], orphan['instance_id'])) or {}
            orphan.update(location=orphan['region'], set=entry.get('set'), members=entry.get('members'),
                          set_status=entry.get('status'), set_problem=entry.get('problem'), address=entry.get('address'))
            orphan[hook.scope_key] = entry.get(hook.scope_key)
        snapshot['workspaces'].extend(part['workspaces'])
        snapshot['orphans'].extend(part['orphans'])

    def _read_journal(self):
        try:
            with Journal.open(self.get_option('journal_path'), readonly=True,
                              url=self.get_option('journal_url')) as journal:
                records = journal.list_workspaces()
                debts = journal.cleanup_debts()
                running = Queue(journal).entries(target_type='workspace', states=['running'], recent=0)
                return records, debts, self._operations(running), journal.path
        except JournalMissing as err:
            self._fail('%s: %s' % (self._journal_where(), err))
        except EphemeraError as err:
            self._fail('%s: %s' % (self._journal_where(), err))

    @staticmethod
    def _operations(entries):
        return {e['target']: {'id': e['id'], 'kind': e['kind'], 'step': e['step'], 'started_at': e['started_at'],
                              'runner_alive': e['runner_alive']} for e in entries}

    def _journal_where(self):
        if self._given('journal_path') is None and os.environ.get('EPHEMERA_JOURNAL'):
            return 'option journal_path (from EPHEMERA_JOURNAL)'
        return 'option journal_path'

    def _provider(self, hook):
        params = {name: self._given(name) for name in hook.connection_options}
        try:
            provider = hook.connect_cluster(params)
        except InventoryConfigError as err:
            self._fail(str(err))
        if provider is None:
            self.display.v('%s: %s: the inventory is the journal alone.' % (self._path, hook.unconfigured))
        return provider

    def _cloud_regions(self, hook):
        # A provider without an option of places is read where its workspaces are.
        return (self.get_option(hook.scope_option) if hook.scope_option else None) or []

    def _cloud_provider(self, hook, region, secret):
        try:
            return hook.connect(self.get_option, region, secret)
        except InventoryConfigError as err:
            self._fail(str(err))

    def _cloud_error(self, hook, region, err):
        """Refused credentials or permissions fail the inventory; an endpoint that does not answer, or a listing
        that could not be read completely, leaves the region's workspaces with the journal's view (unless strict)."""
        if isinstance(err, Refused):
            self._fail(hook.refused(self.get_option, region, err))
        text = '%s: %s %s %s: %s' % (self._path, hook.name, hook.scope_word, region, err)
        if self.get_option('strict'):
            raise AnsibleParserError(text)
        self.display.warning(text + ' Its workspaces come from the journal alone; their live state is unknown.')

    def _cluster_error(self, err, provider, hook):
        """Misconfiguration fails the inventory; an unreachable cluster leaves the journal's view (unless strict)."""
        advice = hook.misconfigured(err, provider, self._where)
        if advice is not None:
            self._fail(advice)
        text = '%s: %s: %s' % (self._path, self._where(hook.endpoint_option), err)
        if self.get_option('strict'):
            raise AnsibleParserError(text)
        self.display.warning(text + ' The hosts come from the journal alone; their live state is unknown.')

    def _complete(self, snapshot, provider, journal_path):
        """The few per-guest reads: addresses of running workspaces without one, markers of odd containers."""
        jobs = []
        for entry in snapshot['workspaces'] + snapshot['orphans']:
            if entry.pop('check_marker', False):
                jobs.append(('marker', entry))
            if entry.pop('needs_address', False):
                jobs.append(('address', entry))
        if jobs:
            secret = self._secret(journal_path)
            # Markers name the controller by an id derived from its secret, not by the journal's id.
            controller = ownership.controller_id(secret) if secret is not None else None
            self._run_jobs(snapshot, jobs, provider, controller, secret)
        for ws in snapshot['workspaces']:
            ws.pop('live', None)
            ws.pop('journal_view', None)

    def _run_jobs(self, snapshot, jobs, provider, controller, secret):
        def run(job):
            kind, entry = job
            guest = entry.get('live', entry)
            listed = {'id': guest['vmid'], 'location': guest['node'], 'kind': guest['type']}
            try:
                if kind == 'marker':
                    resource = provider.find_listed(listed)
                    if resource is None:
                        raise NotFound('%s is gone' % provider.label(guest['vmid'], guest['node']))
                    return job, resource.marker_text, None
                return job, provider.addresses(provider.ref(guest['vmid'], guest['node'])), None
            except ProviderError as err:
                return job, None, err

        with ThreadPoolExecutor(max_workers=self.get_option('max_concurrency')) as pool:
            results = list(pool.map(run, jobs))
        failed = [(entry.get('name'), err) for (kind, entry), answer, err in results if err is not None]
        # Markers first: an address read from a container that turns out not to be the workspace's is dropped.
        for (kind, entry), answer, err in results:
            if kind == 'marker':
                if err is None:
                    apply_marker(snapshot, entry, answer, secret, controller)
                else:
                    entry['marker'] = 'unreadable'
        for (kind, entry), answer, err in results:
            if kind == 'address' and err is None and entry['live_status'] == 'running':
                address = reachable_address(answer)
                if address:
                    entry.update(address=address, address_source='interfaces')
        if failed:
            self.display.warning('%s: %d of %d per-guest reads failed (addresses or ownership markers are missing for '
                                 'them); first: %s: %s' % (self._path, len(failed), len(jobs), failed[0][0], failed[0][1]))

    def _secret(self, journal_path):
        given = self.get_option('controller_secret')
        path = ownership.secret_path(journal_path)
        try:
            # Loaded only when there is one to load: a reader never makes the secret (load_secret makes a missing or
            # empty file).
            if given or (os.path.exists(path) and os.path.getsize(path) > 0):
                return ownership.load_secret(journal_path, given)
        except EphemeraError as err:
            self.display.warning('%s: %s Orphan markers are checked without it.' % (self._path, err))
        return None

    # ---------------------------------------------------------------------------- inventory

    def _known_hosts(self, snapshot):
        """A function of a workspace (one with a recorded key and an address) that gives the host variables pinning
        its SSH connection (host_key_pinning: the known-hosts file, written here, or the key inline); None when
        nothing is pinned (no key recorded, or a file that cannot be written).

        A host whose key the file does not pin (its container is stopped, or another workspace records another key
        at its address) gets them too: SSH then refuses it rather than trust whatever answers there.
        """
        pinned, conflicts = known_hosts(snapshot['workspaces'])
        if conflicts:
            self.display.warning('%s: %s' % (self._path, '; '.join(
                'workspaces %s record different SSH host keys for %s, which is pinned to neither' % (
                    ', '.join(names), endpoint) for endpoint, names in sorted(conflicts.items()))))
        if not any(ws.get('host_key') for ws in snapshot['workspaces']):
            return None
        if self.get_option('host_key_pinning') == 'inline':
            def inline(ws):
                endpoint = known_hosts_name(ws['address'], ws['ssh_port']) if ws['address'] else None
                return {'ansible_ssh_common_args': inline_ssh_args(endpoint, pinned.get(endpoint)),
                        'ansible_ssh_host_key_checking': True}
            return inline
        journal_path = resolve_path(self.get_option('journal_path'))
        given = self.get_option('known_hosts_file')
        path = os.path.abspath(os.path.expanduser(given)) if given else default_known_hosts_file(journal_path)
        try:
            write_known_hosts(path, known_hosts_text(pinned, journal_path), make_directory=not given)
        except (IOError, OSError) as exc:
            self.display.warning(
                '%s: cannot write the known-hosts file %s (%s). The workspaces are listed without the SSH options that '
                'verify their host keys, so ansible and ansible-playbook cannot connect with host key checking on. Set '
                'the option known_hosts_file (or EPHEMERA_KNOWN_HOSTS) to a file in a directory this user can write.'
                % (self._path, path, exc.strerror or exc))
            return None
        args = ssh_common_args(path)
        return lambda ws: {'ansible_ssh_common_args': args}

    def _populate(self, snapshot):
        prefix = self.get_option('hostvar_prefix')
        gprefix = self.get_option('group_prefix')
        filters = self.get_option('filters') or {}
        strict = self.get_option('strict')
        pinning = self._known_hosts(snapshot)
        all_group = self.inventory.add_group(gprefix + 'workspaces')
        for ws in snapshot['workspaces']:
            if not wanted(ws, filters):
                continue
            host = self.inventory.add_host(make_unsafe(ws['name']), group=all_group)
            cloud = 'instance_id' in ws
            hostvars = {prefix + k: v for k, v in (cloud_vars(ws) if cloud else workspace_vars(ws)).items()}
            if not cloud:
                hostvars[prefix + 'provider'] = DEFAULT_PROVIDER
            # The login the create flow proved: the request's SSH user with its key.
            hostvars['ansible_user'] = ws['ssh_user']
            hostvars['ansible_port'] = ws['ssh_port']
            if ws['ssh_private_key_file']:
                hostvars['ansible_ssh_private_key_file'] = ws['ssh_private_key_file']
            if ws['address']:
                hostvars['ansible_host'] = ws['address']
            if pinning and ws['host_key']:
                hostvars.update(pinning(ws))
            hostvars = make_unsafe(hostvars)
            for key, value in hostvars.items():
                self.inventory.set_variable(host, key, value)
            for group in cloud_groups(ws) if cloud else workspace_groups(ws):
                self.inventory.add_child(self.inventory.add_group(gprefix + group), host)
            self._construct(host, hostvars, strict)
        if not self.get_option('include_orphans'):
            return
        orphans = self.inventory.add_group(gprefix + 'orphans')
        for orphan in snapshot['orphans']:
            if not wanted(orphan, filters, orphan=True):
                continue
            if 'instance_id' in orphan:
                # A set is named by its scope (resource group) and base, not by its VM's id (which has slashes).
                label = ('%s-%s' % (orphan['resource_group'], orphan['set']) if orphan.get('set')
                         else orphan['instance_id'])
                host = self.inventory.add_host(make_unsafe('orphan-%s' % label), group=orphans)
                shown = cloud_orphan_vars(orphan)
            else:
                host = self.inventory.add_host('orphan-%d' % orphan['vmid'], group=orphans)
                shown = orphan_vars(orphan)
            hostvars = make_unsafe({prefix + k: v for k, v in shown.items()})
            for key, value in hostvars.items():
                self.inventory.set_variable(host, key, value)

    def _construct(self, host, hostvars, strict):
        self._set_composite_vars(self.get_option('compose'), hostvars, host, strict=strict)
        self._add_host_to_composed_groups(self.get_option('groups'), hostvars, host, strict=strict)
        self._add_host_to_keyed_groups(self.get_option('keyed_groups'), hostvars, host, strict=strict)
