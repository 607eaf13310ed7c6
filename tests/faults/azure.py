"""The Azure rows of the crash-safety matrix, on a try-out cloud of their own (its ARM fake: tests/localcloud/azure.py,
docs/localcloud.md): the cloud parts' shape (tests/faults/cloud.py) with a workspace that is a set of four resources.

The traced create and destroy run with the fake logging every request; every point the traces passed is a kill row,
and every ARM call that acts in those runs (a PUT, PATCH or DELETE of a public IP, NIC, VM or disk: the fake's
operation ids) is a lost-answer row: the fake acts and cuts the connection before the answer, the rule matching only
its own workspace's set (its names begin with the workspace's).

A resource is ours when its ``ephemera:marker`` tag verifies for this controller, bound to the set's number (from its
``ephemera:set`` tag). What differs from the other clouds' invariants:

    ready        the ready workspace's set is complete (a VM, NIC, public IP and OS disk carrying its marker), its VM
                 is the one the record names, succeeded and running, and its guest answers over SSH
    leaks        a resource of ours is accounted for by its workspace's record when it belongs to the set the record
                 names (the same base name)
    foreign      the foreign principal's resources (a public IP, a NIC bound to it, a public IP copying a
                 workspace's tags) keep their tags, bindings and identity, and no acting request of ours names one
    events       every creating PUT our controller sent named a set whose base a journal record holds as the
                 candidate it recorded before the first PUT

A kill right after a member's PUT was recorded as dispatched (``UNSENT``) is a row of its own in both sizes: the run
after it may not send that PUT again, so it ends ``failed``, and the destroy after it takes the set away.
"""

import os
import re
import time

from tests.faults import cloud
from tests.faults.cells import failure_of, status_of
from tests.faults.cloud import CloudMatrix, CloudSite
from tests.faults.site import Kill
from tests.localpve.guests import end_guest_processes

# The shared shape's, under the names the Azure rows' readers know.
NAMES = cloud.NAMES
SIZES = cloud.SIZES
CloudView = cloud.CloudView
TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_SET = 'ephemera:set'
# ARM operations that only read: what a request of ours may do to a foreign resource.
READS = ('_Get', '_List', '_ListAll', '_InstanceView')
ACTING = ('_CreateOrUpdate', '_Delete', '_Update', '_UpdateTags', '_Start', '_PowerOff', '_Deallocate', '_Restart')
SUFFIXES = ('-vm', '-nic', '-pip', '-osdisk')
MEMBERS = ['disk', 'nic', 'pip', 'vm']


def base_of_name(name):
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def azure_decisive(points):
    """The ci size's points: every Azure point of the traces (the set's progress commits, ``journal azure ...``, one
    before and one after each member's PUT and DELETE, its acceptance, its claim; and the answer of every ARM call
    that acts, ``azure PUT publicIPAddresses``, ...: Azure acted, the record does not know yet), and the flows' commits
    around them (CI_POINTS: a create's clone intent and confirmation, a destroy's mark, its delete's intent, its
    end). The other points (step starts, the queue's, guest commands) are the flows the Proxmox rows cover; the full
    size kills every point."""
    return [(point, nth) for point, nth in points
            if point.split(' ', 1)[-1].startswith(('azure ', 'journal azure ')) or (point, nth) in CI_POINTS]


CI_POINTS = (('create.clone journal clone', 1), ('create.clone journal clone', 2),
             ('create.wait_clone journal clone_confirmed', 1), ('destroy.mark journal destroy', 1),
             ('destroy.delete journal delete', 1), ('destroy.delete journal delete', 2),
             ('destroy.finish journal destroyed', 1))
# A kill right after a member's PUT was recorded as dispatched, before it went out: its outcome is unknown to the
# next run, which by the provider's rule may not send it again (a 404 after a PUT of unknown outcome is no permission).
UNSENT = re.compile(r'(^| )journal azure (pip|nic|vm) dispatched$')
# What the failed create says of the member (providers/azure/members.py, WorkspaceSet.create).
DEBT = re.compile(r'The PUT of (pip|nic|vm) \S+ was sent and its answer lost, and Azure has not shown it since')
CREATING = {'pip': 'PublicIPAddresses_CreateOrUpdate', 'nic': 'NetworkInterfaces_CreateOrUpdate',
            'vm': 'VirtualMachines_CreateOrUpdate'}
# The ci size's lost answers: every PUT and DELETE of a member (the full size loses the answer of every ARM call that
# acts in the traces: the lease labels' tag updates and the power-off too).
CI_LOST = ('_CreateOrUpdate', '_Delete')


class AzureAdapter(cloud.Adapter):
    label = 'azure'
    title = 'Azure'
    foreign_fields = ('tags', 'identity', 'bindings')
    # The set's first PUT; what a creating PUT carries is the set's base name.
    clone_op = 'PublicIPAddresses_CreateOrUpdate'
    clone_identity = 'set'

    def started(self, site):
        cloud_ = site.cloud
        cloud_.azure('settings', pending_secs=0.2)
        # Another principal's public IP, and its NIC bound to it.
        cloud_.azure('foreign_create', kind='pip', name='their-pip', tags={'team': 'web'})
        cloud_.azure('foreign_create', kind='nic', name='their-nic', attach_to='their-pip')

    def provider_vars(self, info):
        az = info['azure']
        seed = az['seed']
        return {
            'ephemera_provider': 'azure', 'ephemera_azure_endpoint_url': az['resource_manager_url'],
            'ephemera_azure_authority_host': az['authority_host'], 'ephemera_azure_ca_file': az['ca_file'],
            'ephemera_azure_subscription_id': az['subscription_id'], 'ephemera_azure_tenant_id': az['tenant_id'],
            'ephemera_azure_client_id': az['client_id'], 'ephemera_azure_client_secret': az['client_secret'],
            'ephemera_azure_resource_group': seed['resource_group'], 'ephemera_azure_location': seed['location'],
            'ephemera_azure_subnet_id': seed['subnet_id'], 'ephemera_azure_vm_size': seed['vm_size'],
            'ephemera_azure_ssh_public_key': info['ssh_public_key'], 'ephemera_template': seed['image_urn'],
            'ephemera_azure_lost_answer_window': 10, 'ephemera_azure_operation_timeout': 60,
            'ephemera_pool': 'disposable-workspaces', 'ephemera_guest_root': az['guest_prefix'],
        }

    def items(self, site):
        out = {}
        for r in site.cloud.azure('resources'):
            tags = r['tags']
            base = tags.get(TAG_SET)
            out[r['id']] = {
                'id': r['id'], 'kind': r['kind'], 'name': r['name'], 'state': '%s, %s' % (r.get('state'), r.get('power')),
                'running': r['kind'] == 'vm' and r.get('power') == 'running' and r.get('state') == 'Succeeded',
                'live': True, 'tags': tags, 'workspace': tags.get(TAG_WORKSPACE) if base else None,
                'marker': tags.get(TAG_MARKER), 'bound': base or -1, 'base': base,
                'identity': r.get('identity'),
                'bindings': {k: r.get(k) for k in ('ip_configuration', 'public_ip', 'virtual_machine',
                                                   'managed_by')}}
        return out

    def log_requests(self, site):
        if site.logging_rule is None:
            site.logging_rule = site.cloud.azure('rule', action='log', operation='*', times=None)['id']

    def requests(self, site):
        """(time, operation, resource names, the set's base for a creating PUT) of every ARM request since the faults
        were cleared."""
        out = []
        for rule in site.cloud.azure('rules'):
            for hit in rule['hits'] if rule['action'] == 'log' else ():
                names = tuple(n for n in hit['names'] if not n.startswith('/'))
                base = base_of_name(names[0]) if names and self.creates(hit['operation']) else None
                out.append((hit['time'], hit['operation'], names, base))
        return sorted(out)

    def is_read(self, op):
        return op.endswith(READS) or not op.endswith(ACTING)

    def creates(self, op):
        return op.endswith('_CreateOrUpdate')

    def candidate_identity(self, candidate):
        return base_of_name(str(candidate).rsplit('/', 1)[-1])

    def decisive(self, points):
        return azure_decisive(points)

    def accounts_for(self, ws, resource_id, item):
        return not ws.get('resource_id') or base_of_name(str(ws['resource_id']).rsplit('/', 1)[-1]) == item['base']

    def ready_machine(self, view, ws):
        name = ws['name']
        mine = [rid for rid, owner in view.ours.items() if owner == name]
        vms = sorted(rid for rid in mine if view.instances[rid]['kind'] == 'vm')
        if [v.lower() for v in vms] != [str(ws['resource_id']).lower()]:
            return ['%s is ready with %s, but its VMs carrying its marker are %s' % (name, ws['resource_id'], vms)], None
        members = sorted(view.instances[rid]['kind'] for rid in mine)
        if members != MEMBERS:
            return ['%s is ready, but the resources carrying its marker are %s' % (name, members)], None
        if not view.instances[vms[0]]['running']:
            return ['%s is ready, but its VM is %s' % (name, view.instances[vms[0]]['state'])], None
        return [], vms[0]

    def foreign_names(self, before, view):
        # Requests name resources by their names; a foreign resource replaced behind our back by its old one too.
        names = set(view.instances[rid]['name'] for rid in set(before) | set(view.foreign) if rid in view.instances)
        return names | set(rid.rsplit('/', 1)[-1] for rid in before)

    def lost_calls(self, create_points, destroy_points, created, destroyed, workspace):
        """Every ARM call that acts on the traced workspace's set, as the fake's log names it."""
        out = []
        for op, requests in (('create', created), ('destroy', destroyed)):
            for dummy, call, names, dummy2 in requests:
                if call.endswith(ACTING) and any(base_of_name(n).startswith(workspace) for n in names) \
                        and (op, call) not in out:
                    out.append((op, call))
        return out

    def in_ci(self, call):
        return call.endswith(CI_LOST)

    def own_rows(self, op, points):
        return [p for p in points if UNSENT.search(p[0])] if op == 'create' else []

    def copy_foreign(self, site, item, workspace):
        # Another principal copies a workspace's tags (with a marker no controller made) onto a resource of its own.
        site.cloud.azure('foreign_create', kind='pip', name='copied-pip',
                         tags=dict(item['tags'], **{TAG_MARKER: 'not-a-marker-of-ours'}))

    def lost_rule(self, site, op, call, name, resource_id):
        # The set's names begin with the workspace's name: the rule cuts only this workspace's answer.
        return site.cloud.azure('rule', action='drop-response', operation=call, match=name + '-*')

    def rule_hits(self, site, rule):
        return len([r for r in site.cloud.azure('rules') if r['id'] == rule['id']][0]['hits'])

    def stop_guest_leftovers(self, site, keep):
        # A VM's guest is guests/azure/<its ARM id>/root.
        root = os.path.join(site.guests_dir, 'azure')
        for dirpath, dirnames, dummy in os.walk(root):
            if 'root' in dirnames:
                if dirpath[len(root):] not in keep:
                    end_guest_processes(os.path.join(dirpath, 'root') + os.sep)
                dirnames[:] = []


class AzureSite(CloudSite):
    """A try-out cloud (its own process; the ARM fake is the part used), a git server with a token, a journal and the
    controller secret (the Azure provider's set records are in the journal)."""

    adapter = AzureAdapter()


class AzureMatrix(CloudMatrix):
    """Kill chains (or single kills) through the Azure create's and destroy's points, every PUT recorded and not sent,
    and every lost answer of an ARM call that acts, against one AzureSite."""

    def kill_ends(self, op, point):
        # The member's PUT is never sent again: the create ends failed (the destroy after it takes the set away).
        return 'failed' if op == 'create' and point and UNSENT.search(point) else super().kill_ends(op, point)

    def _kill(self, cell, op, point, nth):
        if op == 'create' and UNSENT.search(point):
            return lambda: self._unsent_put(cell, point, nth)
        return super()._kill(cell, op, point, nth)

    def _unsent_put(self, cell, point, nth):
        """A kill right after a member's PUT was recorded as dispatched, before it was sent. The run after it (the
        create again, or reconcile first) reads 404 for the member through the lost-answer window, and ends
        ``failed`` keeping the member as cleanup debt: it is never sent again. The destroy that follows waits the
        window out too and takes away what the set has. Converged: failed, then destroyed, in the two runs, and no
        PUT of the member ever sent."""
        site, name = self.site, cell.names[0]
        member = UNSENT.search(point).group(2)
        started = time.monotonic()
        outcome = site.run([site.create_op(name)], kill=Kill(name, point, nth))
        if not outcome.killed:
            cell.reached = False
            cell.notes.append('the run did not die at %s #%d (%s)' % (point, nth, outcome.explain()[:200]))
        first = site.run([site.reconcile_op() if cell.variant == 'reconcile' else site.create_op(name)])
        after_first = status_of(site, name)
        # The run says why: the member's PUT, kept as debt (not a search for another name, nor any other failure).
        said = failure_of(site, name)
        said_why = DEBT.search(said) is not None and ('%s %s-' % (member, name)) in said
        second = site.run([site.destroy_op(name)])
        cell.reruns = 2
        sent = [op for dummy, op, names, dummy2 in site.requests()
                if op == CREATING[member] and any(base_of_name(n).startswith(name + '-') for n in names)]
        cell.converged = after_first == 'failed' and said_why and status_of(site, name) == 'destroyed' and not sent
        if after_first != 'failed':
            cell.notes.append('after the run that followed the kill %s is %s, not failed (%s)'
                              % (name, after_first, first.explain()[:200]))
        elif not said_why:
            cell.notes.append('%s failed for another reason than its %s PUT kept as debt: %s'
                              % (name, member, said[:300]))
        if status_of(site, name) != 'destroyed':
            cell.notes.append('%s is %s after the destroy, not destroyed (%s)' % (name, status_of(site, name),
                                                                                  second.explain()[:300]))
        if sent:
            cell.notes.append('the %s PUT of %s was sent %d times' % (member, name, len(sent)))
        cell.seconds = time.monotonic() - started
