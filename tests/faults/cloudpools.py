"""The warm pools' rows of the crash-safety matrix on the try-out cloud's Hetzner Cloud, Compute Engine and Azure fakes,
each on a cloud of its own (docs/internals/faults.md, docs/pools.md).

The same rows as the Proxmox pools' (tests/faults/pools.py) and the AWS pools' (tests/faults/awspools.py): a clean
fill (the shipped pool_fill playbook) and a clean claim (a create through the shipped create playbook that takes a
warm member) traced first, then kills of the fill at a point of its member (``<pool>-*``) and of the claim at a point
of the create's candidate step, each followed by the same playbook again (at most twice; the full size's reconcile
variant runs reconcile first), and the lost answers of the fill's creating call and of the claim's re-labelling
(the provider's ``write_remark``), each fault armed on the cloud's fake the way its part's adapter arms it.

:class:`CloudPoolMatrix` is what every cloud's pool rows share (the machines as tests/faults/cloud.py reads them: a
machine is ours when its marker verifies for this controller, bound to what the adapter says); the three small
subclasses say where a pool's members are made, which points are decisive, which answers are lost and how, and any
invariant of their own:

- **Hetzner**: a member is a server; the claim re-labels it with one ``PUT /servers/{id}`` (the marker's labels,
  ``ephemera-workspace``, the lease's labels; its name, which the marker binds, stays).
- **Compute Engine**: a member is an instance; the claim writes its workspace and lease labels
  (``instances.setLabels``) and then the marker into its metadata (``instances.setMetadata``). Its disk is not
  re-labelled (the provider labels no disk), so there is no disk invariant.
- **Azure**: a member is a set of four resources (VM, NIC, public IP, OS disk); the claim re-tags each of them (a
  tags PATCH: the disk's, the public IP's, the NIC's, the VM's last). Its own invariant: every resource of a row's
  set carries the marker and ``ephemera:workspace`` tag of the set's VM.
"""

from tests.faults import azure, cloud, gcp, pools
from tests.faults.azure import AzureSite
from tests.faults.cloud import run_part
from tests.faults.gcp import GcpSite
from tests.faults.hetzner import HetznerSite
from tests.faults.pools import PoolMatrix


class CloudPoolMatrix(PoolMatrix):
    """The pools' rows on a try-out cloud (its site a tests/faults/cloud.py CloudSite): what differs from the
    Proxmox rows' reading of the cluster, the same on every cloud."""

    def make_foreign(self):
        """The cloud's seed and its part's adapter make the foreign machines (and copy_marker one more)."""

    def copy_marker(self, member):
        item = [i for i in self.site.items().values() if i['workspace'] == member and i['live']][0]
        self.site.adapter.copy_foreign(self.site, item, member)

    def view(self):
        return cloud.CloudView(self.site, self.secret)

    def check(self, names, requests, clones):
        return cloud.check(self.site, names, self.foreign_before, requests, self.secret)

    @staticmethod
    def machine(resource):
        return str(resource)

    @staticmethod
    def resource_of(ws):
        return ws['resource_id']

    def guest_problems(self, view, ws):
        return cloud.check_ready(self.site.adapter, view, ws)

    def running(self):
        return set(i for i, item in self.site.items().items() if item['running'])

    def lost_hits(self, rule):
        return [self.site.adapter.rule_hits(self.site, rule)]


def claim_points(label, *calls):
    """The Proxmox claim's decisive points (pools.CI_CLAIM) with the answers of the cloud's re-labelling ``calls`` in
    the place of the container's re-signing."""
    out = []
    for point, nth in pools.CI_CLAIM:
        if ' pve ' in point:
            out += [('create.vmid %s %s' % (label, call), 1) for call in calls]
        else:
            out.append((point, nth))
    return tuple(out)


def fill_points(created, labelled=()):
    """The Proxmox fill's decisive points (pools.CI_FILL) but the member's first record (its place taken just after
    is the one that counts), with the cloud's ``created`` points (the creating calls' answers, the creation seen done)
    in the place of the clone's and the start's, and its ``labelled`` (the warm labels' writes) in the place of the
    container's config update."""
    out = []
    for point, nth in pools.CI_FILL:
        if point.startswith('create.clone pve '):
            out += [('create.clone %s' % what, 1) if what.split(' ', 2)[1] != 'operation'
                    else ('create.wait_clone %s' % what, 1) for what in created]
        elif point.startswith('create.runner pve '):
            out += [('create.runner %s' % what, 1) for what in labelled]
        elif ' pve ' not in point and point != 'pool.begin journal pool_member':
            out.append((point, nth))
    return tuple(out)


def lost_rows(*rows, ci=2):
    """The sizes (pools.sizes) of the lost-answer rows ``'<label>: <call>'``, the label's first word their operation
    (fill, claim): each row loses the answer of the next ``call`` of its operation's run once (the subclass's
    lose)."""
    return pools.sizes(tuple((label, label.split(' ', 1)[0], call, None)
                             for label, call in (row.split(': ', 1) for row in rows)), ci)


class HetznerPoolMatrix(CloudPoolMatrix):
    """The pools' rows on the try-out cloud's Hetzner Cloud fake."""

    prefix = 'hetzner-pools'
    ci_fill = fill_points(['hetzner POST /servers'], ['hetzner PUT /servers'])
    ci_claim = claim_points('hetzner', 'PUT /servers')
    # The call is a method and a path prefix: the fake acts and closes the connection before it answers.
    sizes = lost_rows('fill create: POST /servers', 'claim re-labelling: PUT /servers', 'fill labels: PUT /servers')

    def place(self):
        hz = self.site.info['hetzner']
        return hz['location'], hz['image']

    def lose(self, method, path):
        return self.site.adapter.drop(self.site, *method.split(' ', 1), None)


class GcpPoolMatrix(CloudPoolMatrix):
    """The pools' rows on the try-out cloud's Compute Engine fake."""

    prefix = 'gcp-pools'
    ci_fill = fill_points(['gcp instances.insert', 'gcp operation DONE insert'], ['gcp instances.setLabels'])
    # The claim writes the labels, then the marker: killed between them, the member's marker is left for the rerun.
    ci_claim = claim_points('gcp', 'instances.setLabels', 'instances.setMetadata')
    # The ci size loses both of the claim's writes.
    sizes = lost_rows('fill insert: instances.insert', 'claim re-labelling: instances.setLabels',
                      'claim re-signing: instances.setMetadata', 'fill labels: instances.setLabels', ci=3)

    def place(self):
        g = self.site.info['gcp']
        return g['zone'], g['image']

    def lose(self, method, path):
        """The next ``method`` (a call: ``instances.<verb>``) of any instance, as the fake's path shows it."""
        verb = method.split('.', 1)[1]
        if verb == 'insert':
            return self.site.adapter.arm(self.site, 'drop', *gcp.INSERT)
        call, pattern = gcp.PATHS[verb]
        return self.site.adapter.arm(self.site, 'drop', call, pattern % '[^/]+')


class AzurePoolMatrix(CloudPoolMatrix):
    """The pools' rows on the try-out cloud's ARM fake: a member is a set of four resources."""

    prefix = 'azure-pools'
    ci_fill = fill_points(['azure PUT virtualMachines'], ['azure PATCH virtualMachines'])
    # The claim re-tags the disk first and the VM last: killed after the first, the set is half the workspace's.
    ci_claim = claim_points('azure', 'PATCH disks', 'PATCH virtualMachines')
    # The calls are ARM operations.
    sizes = lost_rows('fill VM: VirtualMachines_CreateOrUpdate', 'claim re-tagging of the VM: VirtualMachines_Update',
                      'claim re-tagging of the disk: Disks_Update', 'fill tags: VirtualMachines_Update')

    def place(self):
        seed = self.site.info['azure']['seed']
        return seed['location'], seed['image_urn']

    def lose(self, method, path):
        return self.site.cloud.azure('rule', action='drop-response', operation=method)

    @staticmethod
    def machines_of(view, name):
        """The VMs carrying ``name``'s marker: a record names its set's VM (the rest of the set is checked by the
        ready check, which wants the four, and set_problems)."""
        return sorted(v for v, o in view.ours.items() if o == name and view.instances[v]['kind'] == 'vm')

    def pool_problems(self, view, pool, workspaces, size):
        return super().pool_problems(view, pool, workspaces, size) + self.set_problems(view, pool, workspaces)

    def set_problems(self, view, pool, workspaces):
        """Every resource of the row's sets (its pool's members' and its workspaces': the sets whose VM carries
        their marker) carries the marker and ``ephemera:workspace`` tag of its set's VM: the fill tags the four
        alike, a claim re-tags the four."""
        items = view.instances
        vms = {items[i]['base']: items[i] for i, owner in view.ours.items()
               if items[i]['kind'] == 'vm' and (owner in workspaces or owner.startswith(pool['name'] + '-'))}
        out = []
        for dummy, item in sorted(items.items()):
            vm = vms.get(item['base'])
            # A resource of the set is named after it (another's copy of its tags is not).
            if vm is None or item is vm or azure.base_of_name(item['name']) != item['base']:
                continue
            out += ['%s %s of set %s has %s %s, its VM %s' % (item['kind'], item['name'], item['base'], key,
                                                              item['tags'].get(key), vm['tags'].get(key))
                    for key in (azure.TAG_MARKER, azure.TAG_WORKSPACE) if item['tags'].get(key) != vm['tags'].get(key)]
        return out


MATRICES = {'hetzner-pools': (HetznerSite, HetznerPoolMatrix), 'gcp-pools': (GcpSite, GcpPoolMatrix),
            'azure-pools': (AzureSite, AzurePoolMatrix)}


def run_cloud_pools_part(part, size, keep, log=print):
    """The pools' rows of ``part`` (a key of MATRICES) on a try-out cloud of their own: (cells, uncovered)."""
    site_class, matrix_class = MATRICES[part]
    return run_part(site_class, matrix_class, size, keep, log=log, label=part)
