"""What the cloud providers share (providers/cloud.py): the ids they derive stay the ones journals already hold, the
wording and keys of each provider, option lookup, and the task loop's three outcomes. The providers' own paths run
end to end against the try-out cloud's fakes (test_provider_aws.py, test_provider_hetzner.py, tests/integration/)."""

import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership, waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base, cloud
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import AwsProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.provider import GcpProvider
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner.provider import HetznerProvider

STAMP = '2026-01-02T03:04:05Z'


def test_derived_candidates_are_the_ones_records_already_hold():
    # Values the providers derived before they shared the code: a rerun of a recorded request must find its machine.
    assert AwsProvider(None).candidate_for('Work.Space_1', STAMP) == 'ephemera-Work.Space_1-3590f5cd2fa6d945b3ae608b'
    assert AwsProvider(None).candidate_for('Work.Space_1', STAMP, avoid=('x',)) == \
        'ephemera-Work.Space_1-5d969f750852b542d66779ef'
    assert HetznerProvider(None).candidate_for('Work.Space_1', STAMP) == 'eph-work-space-1-3590f5cd2fa6'
    assert GcpProvider(None).candidate_for('Work.Space_1', STAMP) == 'eph-work-space-1-3590f5cd2fa6d945'
    assert cloud.bound_number('ephemera-w-abc') == 1763063338
    taken = [cloud.derived_candidate('w', STAMP, (), 'p-', 8, 'name')]
    for dummy in range(3):
        taken.append(cloud.derived_candidate('w', STAMP, tuple(taken), 'p-', 8, 'name'))
    assert len(set(taken)) == 4 and all(t.startswith('p-') and len(t) == 10 for t in taken)


@pytest.mark.parametrize('cls, kind, noun', [
    (AwsProvider, 'ec2', 'instance'), (HetznerProvider, 'hcloud', 'server'), (GcpProvider, 'gce', 'instance')])
def test_keys_and_wording_per_provider(cls, kind, noun):
    assert cls.resource_key('x1', 'here') == kind + '/x1@here'
    assert cls.resource_key('x1') == kind + '/x1'
    assert cls.parse_resource_key(kind + '/x1@here') == ('x1', 'here')
    assert cls.parse_resource_key('other/x1@here') == (None, None)
    assert cls.parse_resource_key(None) == (None, None)
    assert cls.label('x1', 'here') == '%s x1 in here' % noun
    with pytest.raises(base.InvalidRequest, match='derived from its workspace: use candidate_for'):
        cls(None).candidate()
    with pytest.raises(base.InvalidRequest, match='^Template builds are for Proxmox VE; on .* give an'):
        cls(None).make_image(None)


def test_option_reads_params_then_the_first_environment_variable_set():
    env = {'A': '', 'B': 'from-b', 'C': 'from-c'}
    assert cloud.option({'x': 'given'}, 'x', ('B',), env) == 'given'
    assert cloud.option({'x': ''}, 'x', ('A', 'B', 'C'), env) == 'from-b'
    assert cloud.option({}, 'x', 'C', env) == 'from-c'
    assert cloud.option({}, 'x', 'A', env) is None
    assert cloud.option({}, 'x', None, env) is None


class Scripted(cloud.CloudProvider):
    """A cloud whose task looks are a script (a unit-level double of the loop alone)."""

    kind = 'test'

    def __init__(self, looks):
        super().__init__(b's' * 32)
        self.looks = list(looks)
        self.slept = []

    def sleep(self, seconds):
        self.slept.append(seconds)

    def task_look(self, handle):
        return self.looks.pop(0), 'detail'

    def task_timeout(self, handle, seconds, detail):
        return 'still going after %d s (%s)' % (seconds, detail)


def test_the_task_loop_waits_fails_and_times_out():
    done = Scripted([cloud.RUNNING, cloud.RUNNING, cloud.DONE])
    assert done.wait('h1', 60).succeeded and done.slept == [0.3, 0.3 * 1.5]
    with pytest.raises(base.TaskFailed) as failed:
        Scripted([cloud.RUNNING, 'it broke']).wait('h2', 60)
    assert str(failed.value) == 'it broke' and failed.value.task_id == 'h2' and failed.value.log_tail == ['it broke']
    with pytest.raises(base.TaskTimeout) as late:
        Scripted([cloud.RUNNING]).wait('h3', 0)
    assert str(late.value) == 'still going after 0 s (detail)' and late.value.task_id == 'h3'
    assert Scripted([cloud.RUNNING]).task_status('h4').status == 'running'
    failed_status = Scripted(['no']).task_status('h5')
    assert failed_status.exitstatus == 'no' and not failed_status.succeeded


def test_the_marker_binds_the_number_of_the_candidate():
    provider = HetznerProvider(None, secret=b's' * 32)
    text = provider.marker('w1', 'eph-w1-abc', nonce='cd' * 16)
    server = base.Resource('42', 'fsn1', marker_text=text, native={'name': 'eph-w1-abc'})
    assert provider.verify(server, 'w1') == ownership.VERIFIED
    renamed = base.Resource('42', 'fsn1', marker_text=text, native={'name': 'eph-w1-other'})
    assert provider.verify(renamed, 'w1') != ownership.VERIFIED
    assert provider.verify(None) == ownership.ABSENT


@pytest.mark.parametrize('name', sorted(registry.PROVIDERS))
def test_the_advice_when_no_address_or_no_start_came_speaks_of_the_providers_own_machines(name):
    cls = registry.provider_class(name)
    advice = ' '.join((cls.address_source, cls.address_advice, cls.start_advice('m-1')))
    if name == 'proxmox':
        assert cls.address_source == 'an address from DHCP' and 'bridge' in cls.address_advice
        assert 'pct start m-1 --debug' in cls.start_advice('m-1')
    else:
        for word in ('DHCP', 'pct', 'container', 'bridge'):
            assert word not in advice, (name, advice)


def test_a_long_task_wait_says_which_task_and_what_it_saw(monkeypatch):
    monkeypatch.setenv('EPHEMERA_PROGRESS_INTERVAL', '0.1')

    class Slow(Scripted):
        def sleep(self, seconds):
            time.sleep(0.12)

        def task_what(self, handle):
            return 'the start of machine %s' % handle

    said = []
    with waiter.reporting(said.append):
        assert Slow([cloud.RUNNING] * 3 + [cloud.DONE]).wait('m-7', 60).succeeded
    assert said and all(line.startswith('waiting for the start of machine m-7 (') for line in said), said
