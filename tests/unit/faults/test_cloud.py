"""The cloud parts' shared pieces (tests/faults/cloud.py) and what each adapter reads and arms: decisive points, the
calls that act in a trace, whose machines are ours, leaks, foreign machines changed or named, creating requests no
record holds, the rows' names, and the faults the Compute Engine and EC2 adapters arm. The clouds are stand-ins
here; the matrix itself (python -m tests.faults matrix --part aws|hetzner|gcp) and
tests/integration/faults/test_aws_detectors.py and test_gcp_detectors.py run the same code on the try-out cloud."""

import fnmatch
import re

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp import provider as gcp_provider
from tests.faults import aws, cloud, gcp, hetzner

SECRET = b'unit-secret-0123456789abcdef0123456789abcdef'
CREATE = [('queue.claimed begin', 1), ('create.clone begin', 1), ('create.clone journal clone', 1),
          ('create.clone gcp instances.insert', 1), ('create.clone journal clone', 2),
          ('create.wait_clone gcp operation DONE insert', 1), ('create.ready gcp instances.setLabels', 1),
          ('create.ready gcp operation DONE labels', 1), ('create.ready journal ready', 1)]
DESTROY = [('destroy.shutdown gcp instances.stop', 1), ('destroy.delete journal delete', 1),
           ('destroy.delete gcp instances.delete', 1), ('destroy.delete journal delete', 2),
           ('destroy.delete gcp operation DONE delete', 1), ('destroy.delete gcp instances.get 404', 1)]


def test_the_decisive_points_are_the_provider_points_and_the_dispatch_commits():
    picked = cloud.decisive(CREATE + DESTROY, 'gcp')
    assert ('create.clone journal clone', 1) in picked and ('destroy.delete journal delete', 1) in picked
    # The second commit of a step and the bookkeeping are the full size's only.
    assert ('create.clone journal clone', 2) not in picked and ('queue.claimed begin', 1) not in picked
    assert ('create.ready journal ready', 1) not in picked
    assert ('destroy.delete gcp instances.get 404', 1) in picked
    assert gcp.gcp_decisive(CREATE) == cloud.decisive(CREATE, 'gcp')
    # Another provider's points are not this one's.
    assert cloud.decisive([('create.clone aws RunInstances', 1)], 'hetzner') == []
    assert aws.aws_decisive([('create.clone aws RunInstances', 1)]) == [('create.clone aws RunInstances', 1)]


def test_the_lost_answers_are_the_calls_that_act_once_per_operation():
    found = cloud.lost_calls(CREATE + CREATE, DESTROY, gcp.call_of)
    assert found == [('create', 'instances.insert'), ('create', 'instances.setLabels'),
                     ('destroy', 'instances.stop'), ('destroy', 'instances.delete')]
    # The adapter adds the deletion whose operation ends DONE with an error, named as a fault of its own.
    adapter = gcp.GcpAdapter()
    assert adapter.extra_faults(found) == [('destroy', gcp.DONE_WITH_ERROR)]
    assert adapter.extra_faults(found[:2]) == []
    assert adapter.row_of('destroy', gcp.DONE_WITH_ERROR).startswith('gcp fault: instances.delete')
    assert adapter.row_of('create', 'instances.insert') == 'gcp lost answer: instances.insert (create)'
    hz = cloud.lost_calls([('create.clone hetzner POST /servers', 1)], [('destroy.delete hetzner DELETE /servers', 1)],
                          hetzner.HetznerAdapter().call_of)
    assert hz == [('create', 'POST /servers'), ('destroy', 'DELETE /servers')]


def test_an_operation_seen_done_and_the_get_404_are_kill_points_but_no_calls_that_act():
    assert gcp.call_of('gcp instances.delete') == 'instances.delete'
    assert gcp.call_of('gcp operation DONE delete') is None
    assert gcp.call_of('gcp instances.get 404') is None
    assert gcp.call_of('gcp instances.get') is None
    assert gcp.call_of('journal clone') is None


class Cloud:
    """A stand-in for the try-out cloud's control API: instances and calls as the GCP fake gives them, faults kept."""

    def __init__(self, instances=(), calls=()):
        self.listed = list(instances)
        self.calls = list(calls)
        self.faults = []

    def gcp(self, what, **arguments):
        if what == 'instances':
            return self.listed
        if what == 'calls':
            return self.calls
        if what == 'fault':
            self.faults.append(arguments)
            return []
        raise AssertionError(what)


class Site:
    def __init__(self, adapter, cloud_api):
        self.adapter = adapter
        self.cloud = cloud_api
        self.calls_mark = 0

    def items(self):
        return self.adapter.items(self)


def instance(name, workspace, marker, status='RUNNING'):
    return {'name': name, 'id': '1', 'status': status, 'labels': {'ephemera': 'workspace', 'ephemera-workspace': workspace},
            'metadata': {'ephemera-marker': marker}}


def marker_for(workspace, name, secret=SECRET):
    return ownership.render_resource(secret, ownership.controller_id(secret), workspace, name, ownership.new_nonce())


def test_a_machine_is_ours_only_when_its_marker_binds_its_own_name():
    ours = instance('eph-w1-0001', 'w1', marker_for('w1', 'eph-w1-0001'))
    copy = instance('theirs-w1', 'w1', marker_for('w1', 'eph-w1-0001'))
    other = instance('eph-w2-0002', 'w2', marker_for('w2', 'eph-w2-0002', secret=b'another-controller-secret-000000'))
    view = cloud.CloudView(Site(gcp.GcpAdapter(), Cloud([ours, copy, other])), SECRET)
    assert view.ours == {'eph-w1-0001': 'w1'}
    assert set(view.foreign) == {'theirs-w1', 'eph-w2-0002'}
    assert view.foreign['theirs-w1'] == {'state': 'RUNNING', 'tags': copy['labels']}


def test_leaks_are_ours_without_a_record_a_destroyed_one_or_one_naming_another_machine():
    class View:
        ours = {'m1': 'w1', 'm2': 'w2', 'm3': 'w3', 'm4': 'w4'}
        instances = {m: {'id': m} for m in ours}
    records = {'w2': {'status': 'destroyed', 'resource_id': 'm2'}, 'w3': {'status': 'ready', 'resource_id': 'm9'},
               'w4': {'status': 'ready', 'resource_id': 'm4'}}
    assert cloud.leaks(gcp.GcpAdapter(), View, records) == {
        'm1': 'w1: no journal record', 'm2': 'w2: the journal says destroyed', 'm3': 'w3: the journal names m9'}


def test_a_foreign_machine_changed_gone_or_named_by_a_request_that_acts_is_seen():
    class View:
        foreign = {'f1': {'state': 'TERMINATED', 'tags': {'a': '1'}}, 'f3': {'state': 'RUNNING', 'tags': {}}}
    before = {'f1': {'state': 'RUNNING', 'tags': {'a': '1'}}, 'f2': {'state': 'RUNNING', 'tags': {}},
              'f3': {'state': 'RUNNING', 'tags': {}}}
    requests = [(1, 'GET instances', ('f3',), None), (2, 'POST instances.testIamPermissions', ('f3',), None),
                (3, 'POST instances.stop', ('f1',), None), (4, 'DELETE instances', ('ours',), None)]
    found = cloud.check_foreign(gcp.GcpAdapter(), before, View, requests)
    assert found == ['foreign f1 changed: state', 'foreign f2 is gone', 'our controller sent POST instances.stop to '
                     'foreign f1']


def test_a_creating_request_must_carry_what_a_record_holds_as_its_candidate():
    records = {'w1': {'candidate_id': 'eph-w1-0001'}, 'w2': {'candidate_id': None}}
    held = gcp_provider.request_id('eph-w1-0001', 'insert')
    requests = [(1, 'POST instances', (), held), (2, 'POST instances', (), 'not-ours'),
                (3, 'POST instances.setLabels', ('eph-w1-0001',), 'x')]
    assert cloud.check_events(gcp.GcpAdapter(), records, requests) == [
        'POST instances was sent with requestId not-ours, which no journal record holds']
    assert cloud.check_events(aws.AwsAdapter(), {'w1': {'candidate_id': 'tok'}},
                              [(1, 'RunInstances', (), 'tok'), (2, 'RunInstances', (), 'other')]) == [
        'RunInstances was sent with ClientToken other, which no journal record holds']


def test_the_gcp_requests_name_their_instances_from_the_mark_on_and_leave_the_foreign_principal_out():
    calls = [['GET', 'zones/z/instances/before', {}],
             ['POST', 'zones/z/instances', {'requestId': 'r1'}],
             ['POST', 'zones/z/instances', {'requestId': 'theirs'}],
             ['GET', 'zones/z/operations/operation-1', {}],
             ['POST', 'zones/z/instances/eph-a/setLabels', {'requestId': 'r2'}],
             ['DELETE', 'zones/z/instances/eph-a', {'requestId': 'r3'}],
             ['GET', 'global/images/debian-12', {}]]
    site = Site(gcp.GcpAdapter(), Cloud(calls=calls))
    site.calls_mark = 1
    site.foreign_requests = {'theirs'}
    assert site.adapter.requests(site) == [
        (0, 'POST instances', (), 'r1'), (2, 'GET zones/z/operations/operation-1', (), None),
        (3, 'POST instances.setLabels', ('eph-a',), 'r2'), (4, 'DELETE instances', ('eph-a',), 'r3'),
        (5, 'GET global/images/debian-12', (), None)]
    assert site.adapter.is_read('GET instances') and not site.adapter.is_read('DELETE instances')


def test_the_gcp_faults_are_matched_to_the_instance_where_the_path_names_it():
    fake = Cloud(calls=[['GET', 'zones/z/instances/eph-a', {}]])
    site = Site(gcp.GcpAdapter(), fake)
    adapter = site.adapter
    # A create's later call is armed before the run, by the instance name the provider derives from the workspace:
    # armed once the instance showed, it could come after the call. A destroy's names the instance from the journal.
    rule = adapter.lost_rule(site, 'create', 'instances.setLabels', 'w1', None)
    provider = gcp_provider.GcpProvider.__new__(gcp_provider.GcpProvider)
    for workspace, hit in (('w1', True), ('w10', False), ('w', False)):
        path = 'zones/z/instances/%s/setLabels' % provider.candidate_for(workspace, '2026-12-07T14:00:00Z')
        assert bool(re.search(rule['pattern'], path)) is hit, (workspace, rule)
    assert not re.search(rule['pattern'], 'zones/z/instances/eph-w1-0123abcd/setMetadata')
    rule = adapter.lost_rule(site, 'destroy', 'instances.delete', 'w1', 'eph-a')
    assert fake.faults[-1] == {'kind': 'drop', 'method': 'DELETE', 'pattern': r'/instances/eph\-a$', 'times': 1}
    assert adapter.rule_hits(site, rule) == 0
    fake.calls += [['DELETE', 'zones/z/instances/eph-ab', {}], ['DELETE', 'zones/z/instances/eph-a', {}]]
    assert adapter.rule_hits(site, rule) == 1
    adapter.lost_rule(site, 'destroy', gcp.DONE_WITH_ERROR, 'w1', 'eph-a')
    assert fake.faults[-1]['kind'] == 'fail_delete' and fake.faults[-1]['message'] == gcp.ERROR_MESSAGE
    # An insert names no instance in its path; its body names the instance the provider derives from the workspace.
    adapter.lost_rule(site, 'create', 'instances.insert', 'Work_1', None)
    assert fake.faults[-1]['pattern'] == '/instances$' and fake.faults[-1]['match'] == '"eph-work-1-'
    assert not adapter.exclusive('instances.insert')


class Ec2Control:
    """A stand-in for the EC2 proxy's rules: a rule's match is a glob on any field value of a request."""

    def __init__(self):
        self.rules = []

    def drop_response(self, operation, times=1, skip=0, match=None):
        self.rules.append({'id': len(self.rules) + 1, 'operation': operation, 'match': match})
        return self.rules[-1]


def test_the_aws_create_s_createtags_is_armed_before_the_run_by_the_marker_s_workspace():
    control = Ec2Control()
    site = Site(aws.AwsAdapter(), control)
    rule = site.adapter.lost_rule(site, 'create', 'CreateTags', 'l5', None)
    assert rule is not None and rule['operation'] == 'CreateTags'
    # The create's first CreateTags writes the marker that binds the instance id: its workspace field names it.
    nonce = ownership.new_nonce()
    for workspace, hit in (('l5', True), ('l50', False), ('xl5', False)):
        marker = ownership.render_resource(SECRET, 'ctl', workspace, 'i-0123456789abcdef0', nonce)
        assert fnmatch.fnmatchcase(marker, rule['match']) is hit, (workspace, marker)
    # A destroy's call names the instance its record holds.
    rule = site.adapter.lost_rule(site, 'destroy', 'TerminateInstances', 'l5', 'i-0abc')
    assert rule['match'] == 'i-0abc'


class Stub:
    def __init__(self, adapter):
        self.adapter = adapter


def test_kill_rows_carry_the_part_s_label():
    matrix = gcp.GcpMatrix(Stub(gcp.GcpAdapter()))
    rows = [c.row for c, dummy in matrix.kill_cells('create', [('create.clone gcp instances.insert', 1)])]
    assert rows == ['gcp kill create: create.clone gcp instances.insert #1']
    rows = [c.row for c, dummy in aws.AwsMatrix(Stub(aws.AwsAdapter())).kill_cells('destroy', [('destroy.delete x', 1)])]
    assert rows == ['aws kill destroy: destroy.delete x #1']


def test_the_playbook_variables_of_each_provider_come_from_the_cloud_s_settings():
    info = {'gcp': {'endpoint': 'http://127.0.0.1:1', 'project': 'p', 'zone': 'europe-west1-b', 'machine_type': 'e2-small',
                    'network': 'default', 'ssh_public_key': 'ssh-ed25519 AAAA', 'image': 'debian-12',
                    'guest_prefix': '/g/gce-{vmid}/root', 'metadata_port': 8081}}
    values = gcp.GcpAdapter().provider_vars(info)
    assert values['ephemera_provider'] == 'gcp' and values['ephemera_gcp_auth_kind'] == 'anonymous'
    # Nothing of an expiry guard any more: the instances run with no service account and no guard.
    assert not [k for k in values if 'guard' in k or 'service_account' in k]


class ReadySite(Stub):
    """A site whose every workspace is ready and whose runs do nothing."""

    def clear_faults(self):
        pass

    def log_requests(self):
        pass

    def working_on(self, cell):
        import contextlib
        return contextlib.nullcontext()

    def journal(self):
        import contextlib

        class Journal:
            @staticmethod
            def get_workspace(name):
                return {'name': name, 'status': 'ready'}
        return contextlib.nullcontext(Journal())


@pytest.mark.parametrize('make', [lambda site: gcp.GcpMatrix(site, log=lambda line: None),
                                  lambda site: aws.AwsMatrix(site, log=lambda line: None)])
def test_a_ready_workspace_a_create_row_leaves_is_handed_to_one_destroy_row_only(make):
    site = ReadySite(gcp.GcpAdapter())
    matrix = make(site)
    matrix.judge = lambda cells: None
    work = matrix.kill_cells('create', [('create.clone x', 1)])

    def converge(cell):
        cell.converged = True
        cell.commands.append('ansible-playbook ephemera.workspaces.create -e x')
    matrix.wave([(cell, lambda cell=cell: converge(cell)) for cell, dummy in work])
    assert matrix.ready == [c.names[0] for c, dummy in work] and len(matrix.ready) == len(work)
