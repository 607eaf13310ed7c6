"""What must hold once the runs after a fault have converged, each invariant checked and reported on its own.

    ready        every workspace the journal calls ready has exactly one container, with a marker that
                 verifies, reachable over SSH, its runner answering
    destroyed    every workspace the journal calls destroyed has no container
    unrecorded   no container in the pool without a journal record unless reconcile reports it
    foreign      no foreign container was modified (configs before and after; no request of ours touched one)
    credentials  no temporary credential remains on any guest or on the controller
    events       the event log agrees with what the cluster did: every mutating request our controller sent
                 was recorded as dispatched before it went out, and every dispatched mutation has an outcome

A leak is one of our containers (its marker verifies for this controller) that the journal does not
account for: no record, a destroyed record, or a record naming another VMID.

A template build (check_build) adds two, over one template:

    pointer      the pointer (current and previous) names only versions that are built; checked after every run
    versions     every built version's container is there, ours, and a template, and its record is a template's
                 (status template, no address held); a container of a build candidate
                 is a leak unless it is the container of a built version (a failed or unfinished version leaves none)
"""

import os
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import operations as guest_ops
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.journal import epoch
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.reconcile import Reconciler
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest.ssh import Guest, SshError

NAMES = ('ready', 'destroyed', 'unrecorded', 'foreign', 'credentials', 'events')
# Mutating requests and the journal action that must announce them.
ACTIONS = (
    ('PUT', re.compile(r'^/nodes/[^/]+/lxc/(\d+)/config$'), 'configure'),
    ('POST', re.compile(r'^/nodes/[^/]+/lxc/(\d+)/status/start$'), 'start'),
    ('POST', re.compile(r'^/nodes/[^/]+/lxc/(\d+)/status/shutdown$'), 'shutdown'),
    ('POST', re.compile(r'^/nodes/[^/]+/lxc/(\d+)/status/stop$'), 'stop'),
    ('DELETE', re.compile(r'^/nodes/[^/]+/lxc/(\d+)$'), 'delete'),
    ('POST', re.compile(r'^/nodes/[^/]+/lxc/(\d+)/template$'), 'convert'),
    ('POST', re.compile(r'^/nodes/[^/]+/lxc/\d+/clone$'), 'clone'),
)
# Journal actions that announce a request of another action: a warm pool's claim records its nonce (dispatched
# pool_claim) before it re-signs the member's container for the workspace, a config update.
ANNOUNCES = {'pool_claim': 'configure'}
# A template build's own invariants (check_build), over one template's pointer and versions.
BUILD_NAMES = ('pointer', 'versions')
IGNORED_CONFIG_KEYS = ('digest',)


class ClusterView:
    """The cluster as our controller sees it: which containers are ours (and whose), which are foreign."""

    def __init__(self, site, secret):
        self.containers = site.containers()
        controller = ownership.controller_id(secret)
        self.ours = {}
        self.foreign = {}
        for vmid, (dummy, config, resource) in self.containers.items():
            description = config.get('description')
            name = (ownership.parse(description) or {}).get('workspace')
            if name and ownership.verify(description, secret, controller, name, vmid) == ownership.VERIFIED:
                self.ours[vmid] = name
            else:
                self.foreign[vmid] = {k: v for k, v in config.items() if k not in IGNORED_CONFIG_KEYS}
        self.pool_members = set(vmid for vmid, (dummy, dummy2, resource) in self.containers.items()
                                if resource.get('pool') == site.info['pool'])


def leaks(view, records):
    """Our containers the journal does not account for: vmid -> why."""
    out = {}
    for vmid, name in view.ours.items():
        ws = records.get(name)
        if ws is None:
            out[vmid] = '%s: no journal record' % name
        elif ws['status'] == 'destroyed':
            out[vmid] = '%s: the journal says destroyed' % name
        elif vmid not in (ws['vmid'], ws['candidate_vmid']):
            out[vmid] = '%s: the journal names CT %s' % (name, ws['vmid'] or ws['candidate_vmid'])
    return out


def check_ready(site, view, ws):
    owned = sorted(vmid for vmid, name in view.ours.items() if name == ws['name'])
    if owned != [ws['vmid']]:
        return ['%s is ready with CT %s, but its containers are %s' % (ws['name'], ws['vmid'], owned)]
    return check_guest(ws, ws['vmid'])


def check_guest(ws, guest_id):
    """The ready workspace's guest answers over SSH with its pinned host key, and its runner is alive."""
    req = ws['params']
    layout = guest_ops.Layout(req['guest_root'], guest_id, req['checkout_path'], req['agent_user'])
    try:
        with Guest(ws['address'], port=req['ssh_port'], user=req['ssh_user'], key_file=req['ssh_key_path'],
                   host_key=ws['facts'].get('host_key')).connect() as connected:
            answer = guest_ops.runner_call(connected, layout, req['ssh_user'], {'op': 'ping'})
    except SshError as err:
        return ['%s is ready but SSH to %s fails: %s' % (ws['name'], ws['address'], err)]
    if not answer.get('alive'):
        return ['%s is ready but its runner does not answer: %s' % (ws['name'], answer.get('error'))]
    return []


def check_unrecorded(site, view, records, secret):
    """Pool members without a record of a live workspace must be in reconcile's report."""
    live = set(ws['vmid'] for ws in records.values() if ws['status'] != 'destroyed' and ws['vmid'])
    strays = sorted(vmid for vmid in view.pool_members if vmid not in live)
    if not strays:
        return []
    with site.journal() as journal:
        reconciler = Reconciler(journal, site.api, secret, {'pool': site.info['pool']}, check_mode=True)
        report = reconciler.run()
    reported = set(int(f['vmid']) for f in report.get('findings', []) if f.get('vmid') is not None)
    return ['CT %d is in the pool with no live workspace record, and reconcile does not report it' % vmid
            for vmid in strays if vmid not in reported]


def check_foreign(before, view, requests):
    out = []
    for vmid, config in sorted(before.items()):
        now = view.foreign.get(vmid)
        if now is None:
            out.append('foreign CT %d is gone' % vmid)
        elif now != config:
            changed = sorted(k for k in set(now) | set(config) if now.get(k) != config.get(k))
            out.append('foreign CT %d changed: %s' % (vmid, ', '.join(changed)))
    foreign = set(before) | set(view.foreign)
    for dummy, method, path in requests:
        if method == 'GET':
            continue
        match = re.match(r'^/nodes/[^/]+/lxc/(\d+)(/.*)?$', path)
        if match and int(match.group(1)) in foreign and not path.endswith('/clone'):
            out.append('our controller sent %s %s to foreign CT %s' % (method, path, match.group(1)))
    return out


def _files(top):
    for directory, dummy, files in os.walk(top):
        for name in files:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield path


def _holding(paths, needles):
    """(path, needle) for every file that contains one of ``needles``."""
    found = []
    for path in paths:
        try:
            with open(path, 'rb') as src:
                data = src.read()
        except OSError:
            continue
        found.extend((path, needle) for needle in needles if needle.encode() in data)
    return found


def check_credentials(site):
    """The git token nowhere (controller, guests); the agent's key only in its guest's credentials file."""
    out = []
    runs = os.path.join(site.workdir, 'runs')
    # The runs since the faults were last cleared: earlier ones were checked when they ended.
    recent = [os.path.join(runs, entry) for entry in (sorted(os.listdir(runs)) if os.path.isdir(runs) else [])
              if int(entry) > site.runs_at_clear]
    controller = list(_files(os.path.dirname(site.journal_path))) + [path for run in recent for path in _files(run)]
    for path, needle in _holding(controller, [site.git_token, site.agent_key]):
        out.append('controller file %s holds the %s' % (path, 'git token' if needle == site.git_token else 'agent key'))
    guests = list(_files(site.guests_dir)) if os.path.isdir(site.guests_dir) else []
    for path in guests:
        if os.path.basename(path) == 'git-askpass':
            out.append('temporary git credential helper left on a guest: %s' % path)
    for path, needle in _holding(guests, [site.git_token, site.agent_key]):
        if needle == site.agent_key and os.path.basename(path) == 'agent.env':
            continue
        out.append('guest file %s holds the %s' % (path, 'git token' if needle == site.git_token else 'agent key'))
    return out


def check_events(journal, names, requests, records, clones, since):
    """Dispatched before sent, and every dispatched mutation of ``names`` followed by an outcome.

    A VMID can pass from one workspace to another (a candidate taken, then given to the next), so a
    request counts as announced when any workspace recorded it as dispatched before it went out.
    """
    out = []
    announced = {}
    clones_recorded = {}
    for name, ws in records.items():
        events = journal.events(name)
        for index, event in enumerate(events):
            if event['kind'] != 'dispatched':
                continue
            if event['action'] == 'clone':
                clones_recorded[name] = clones_recorded.get(name, 0) + 1
            if name in names and not any(later['kind'] != 'dispatched' for later in events[index + 1:]):
                out.append('%s: dispatched %s (event %d) has no outcome recorded after it'
                           % (name, event['action'], event['id']))
            vmids = set([(event['detail'] or {}).get('vmid'), ws.get('vmid')]) - set([None])
            for vmid in vmids:
                action = ANNOUNCES.get(event['action'], event['action'])
                announced.setdefault((int(vmid), action), []).append(epoch(event['at']))
    mine = set()
    for name in names:
        ws = records.get(name) or {}
        mine |= set([ws.get('vmid'), ws.get('candidate_vmid')]) - set([None])
        for event in journal.events(name):
            if (event['detail'] or {}).get('vmid'):
                mine.add(int(event['detail']['vmid']))
    sent = {}
    for at, method, path in requests:
        for wanted_method, pattern, action in ACTIONS:
            match = pattern.match(path)
            if method == wanted_method and match and action != 'clone' and int(match.group(1)) in mine:
                sent.setdefault((int(match.group(1)), action), []).append((at, method, path))
    # One announcement per request: the k-th request of an action on a VMID needs k announcements before it.
    for key, sends in sorted(sent.items()):
        times = sorted(t for t in announced.get(key, []) if t >= since)
        for k, (at, method, path) in enumerate(sorted(sends), 1):
            if sum(1 for t in times if t <= at) < k:
                out.append('%s %s was sent without a dispatched %s recorded before it' % (method, path, key[1]))
    for name in names:
        sent = sum(1 for hostname in clones if hostname == 'agent-' + name)
        if sent > clones_recorded.get(name, 0):
            out.append('%s: %d clone requests were sent, %d recorded as dispatched' % (
                name, sent, clones_recorded.get(name, 0)))
    return out


def check(site, names, foreign_before, requests, secret, clones, since):
    """Every invariant over the workspaces ``names``; returns (violations by invariant, leaks, view)."""
    view = ClusterView(site, secret)
    with site.journal() as journal:
        records = {ws['name']: ws for ws in journal.list_workspaces()}
        found = {k: [] for k in NAMES}
        for name in names:
            ws = records.get(name)
            if ws is None:
                continue
            if ws['status'] == 'ready':
                found['ready'].extend(check_ready(site, view, ws))
            elif ws['status'] == 'destroyed':
                owned = sorted(vmid for vmid, owner in view.ours.items() if owner == name)
                if owned:
                    found['destroyed'].append('%s is destroyed, yet CT %s carries its marker' % (name, owned))
        found['events'] = check_events(journal, names, requests, records, clones, since)
    found['unrecorded'] = check_unrecorded(site, view, records, secret)
    found['foreign'] = check_foreign(foreign_before, view, requests)
    found['credentials'] = check_credentials(site)
    return found, leaks(view, records), view


def check_pointer(journal, template):
    """The template's pointer names only built versions (current and previous): violations, as text."""
    pointer = journal.template(template)
    if not pointer:
        return []
    out = []
    for field in ('current', 'previous'):
        number = pointer.get(field)
        if number is None:
            continue
        version = journal.template_version(template, number)
        if version is None or version['state'] != 'built':
            out.append('template %s: %s names v%s, which is %s, not built'
                       % (template, field, number, version['state'] if version else 'not recorded'))
    return out


def check_build(site, view, template):
    """Over one template's builds: (violations by BUILD_NAMES, leaks vmid -> why) after the runs converged.

    A container whose marker names a build candidate of ``template`` is accounted for only by a built version
    that records that very container; any other (of a failed version, of one still building, of no version)
    is a leak.
    """
    from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.template import candidate_name
    found = {k: [] for k in BUILD_NAMES}
    leaked = {}
    with site.journal() as journal:
        found['pointer'] = check_pointer(journal, template)
        versions = journal.template_versions(template)
        records = {v['workspace']: journal.get_workspace(v['workspace']) for v in versions}
        held = set(lease['workspace'] for lease in journal.address_leases())
    by_name = {v['workspace']: v for v in versions}
    prefix = candidate_name(template, 1)[:-1]
    for vmid, owner in sorted(view.ours.items()):
        if not owner.startswith(prefix):
            continue
        version = by_name.get(owner)
        if version is None:
            leaked[vmid] = '%s: no version of template %s records it' % (owner, template)
        elif version['state'] != 'built':
            leaked[vmid] = '%s: version %d is %s, yet CT %d is there' % (
                owner, version['version'], version['state'], vmid)
        elif version['resource_id'] != vmid:
            leaked[vmid] = '%s: version %d records CT %s, not CT %d' % (
                owner, version['version'], version['resource_id'], vmid)
    templates = set(vmid for vmid, (dummy, dummy2, resource) in view.containers.items() if resource.get('template'))
    for version in versions:
        if version['state'] != 'built':
            continue
        vmid = version['resource_id']
        if view.ours.get(vmid) != version['workspace']:
            found['versions'].append('%s v%d: CT %s is gone or not ours' % (template, version['version'], vmid))
        elif vmid not in templates:
            found['versions'].append('%s v%d: CT %s is not a template' % (template, version['version'], vmid))
        record = records.get(version['workspace']) or {}
        if record.get('status') != 'template':
            found['versions'].append('%s v%d is built, but its record %s is %s, not template'
                                     % (template, version['version'], version['workspace'], record.get('status')))
        if version['workspace'] in held:
            found['versions'].append('%s v%d is built, but its record %s still holds an address'
                                     % (template, version['version'], version['workspace']))
    return found, leaked
