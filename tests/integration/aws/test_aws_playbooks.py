"""Workspaces on AWS through the shipped playbooks, on the try-out cloud (moto behind a fault proxy, with SSH guests):
create to ready and destroy; a lost RunInstances answer gives one instance; a lost TerminateInstances answer is
finished; throttling and the visibility window are ridden out; each incomplete inventory is refused with the cleanup
debt kept; lease expiry and release. One cloud and one controller for the file."""

import json
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership

from tests.integration.playbooks import make_repo

from .awsrun import DONE_AGENTS, AwsSite


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site
    print('playbook runs (playbook, workspace, seconds): %s' % site.timings)


@pytest.fixture()
def cloud(site):
    site.cloud.clear()
    yield site.cloud
    site.cloud.clear()


def ready(site, name, **extra):
    run = site.create(name, site.repo, **extra)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'ready' and ws['provider'] == 'aws', ws
    return ws


def destroyed(site, name):
    run = site.destroy(name)
    assert run.ok, run.explain()
    ws = site.workspace(name)
    assert ws['status'] == 'destroyed' and site.debt(name) == []
    assert site.instances(name) == []
    return ws


def rules(cloud, action):
    found = cloud.proxy_rules()
    found = found.get('rules', found) if isinstance(found, dict) else found
    return [r for r in found if r['action'] == action]


def actions(site, name):
    return [e['action'] for e in site.events(name)]


def test_create_to_ready_then_heartbeat_and_destroy(site, cloud):
    run = site.create('aws-happy', site.repo)
    assert run.ok, run.explain()
    ws = site.workspace('aws-happy')
    assert ws['status'] == 'ready' and ws['provider'] == 'aws', ws
    instance_id = ws['resource_id']
    assert instance_id.startswith('i-') and ws['location'] == 'us-east-1'
    # The steps and the report speak of an instance and its launch, not of a container, its clone or a VMID.
    titles = [title for title, _result in run.results()]
    assert [title for title in titles if '/13 ' in title][1:6] == [
        '2/13 (with a warm pool member: 5, 9, 10, 12 and 13 too) candidate client token', '3/13 launch the instance',
        '4/13 wait for the launch', '5/13 configure the instance', '6/13 start the instance']
    assert run.task('2/13 (with a warm pool member: 5, 9, 10, 12 and 13 too) candidate client token')['msg'] == \
        'candidate client token: %s' % ws['candidate_id']
    report = run.task('Report aws-happy')['msg']
    assert report[1] == 'instance %s in us-east-1' % instance_id
    assert not [line for line in titles + report if 'vmid' in line.lower() or 'container' in line or 'clone' in line]
    assert ws['candidate_id'].startswith('ephemera-aws-happy-')
    # Agent briefed, activity read from the runner.
    assert ws['activity'] != 'unknown' and 'brief' in ws['progress']
    # The address the collection reads is the instance's public address, where its sshd answers.
    [instance] = site.instances('aws-happy')
    assert instance['instance_id'] == instance_id and ws['address'] == instance['public_ip']
    # The marker, the lease's labels and the identity are on the instance, written by RunInstances itself.
    provider = site.provider()
    resource = provider.find(instance_id, 'us-east-1')
    assert provider.verify(resource, 'aws-happy', ownership.record_nonce(ws)) == ownership.VERIFIED
    assert provider.labels(resource) == leasing.lease_labels(ws['lease'], 'ready')
    tags = instance['tags']
    assert tags['ephemera:token'] == ws['candidate_id'] and tags['ephemera:scope'] == 'disposable-workspaces'
    assert tags['ephemera:lease-id'] == ws['candidate_id'] and tags['ephemera:created-by']
    # The request recorded the image and the launch settings, no credential.
    recorded = json.dumps(ws['params'])
    assert ws['params']['template_vmid'] == site.cloud.info['seed']['image_id']
    assert ws['params']['launch']['key_name'] == site.cloud.info['seed']['key_name']
    assert site.cloud.info['secret_access_key'] not in recorded
    with site.journal() as journal:
        assert site.cloud.info['secret_access_key'] not in json.dumps(journal.events('aws-happy'), default=str)
    # A heartbeat moves the lease in the journal and the labels on the instance.
    time.sleep(1.1)
    beat = site.playbook('heartbeat.yml', workspace='aws-happy')
    assert beat.ok, beat.explain()
    after = site.workspace('aws-happy')
    assert after['lease']['last_touched_at'] > ws['lease']['last_touched_at']
    assert provider.labels(provider.find(instance_id, 'us-east-1')) == leasing.lease_labels(after['lease'], 'ready')
    # A release without delete retains the instance; a later destroy resumes the cleanup.
    retained = site.destroy('aws-happy', delete=False)
    assert retained.ok, retained.explain()
    held = site.workspace('aws-happy')
    assert held['cleanup']['retained'] is True and held['status'] == 'ready'
    assert [i['instance_id'] for i in site.instances('aws-happy')] == [instance_id]
    destroyed(site, 'aws-happy')
    gone = [i for i in site.cloud.instances() if i['instance_id'] == instance_id]
    assert [i['state'] for i in gone] in ([], ['terminated'])


def test_a_lost_run_answer_gives_exactly_one_instance_and_a_lost_terminate_answer_is_finished(site, cloud):
    cloud.drop_response('RunInstances')
    ws = ready(site, 'aws-lost')
    assert len(site.instances('aws-lost')) == 1
    # The answer that was lost was the launch with the recorded client token.
    [dropped] = rules(cloud, 'drop-response')
    assert [h['client_token'] for h in dropped['hits']] == [ws['candidate_id']]
    assert 'adopted' in actions(site, 'aws-lost')
    instance_id = ws['resource_id']
    cloud.drop_response('TerminateInstances')
    run = site.destroy('aws-lost')
    if not run.ok:
        # The lost answer left cleanup debt; the next run finishes it.
        assert site.debt('aws-lost'), run.explain()
        run = site.destroy('aws-lost')
    assert run.ok, run.explain()
    assert site.workspace('aws-lost')['status'] == 'destroyed' and site.debt('aws-lost') == []
    assert [i['state'] for i in site.cloud.instances() if i['instance_id'] == instance_id] in ([], ['terminated'])
    assert 'delete_outcome_unknown' in actions(site, 'aws-lost')


def test_throttling_and_the_visibility_window_are_ridden_out(site, cloud):
    cloud.throttle('RunInstances', times=2)
    cloud.throttle('DescribeInstances', times=3)
    cloud.invisible(4)
    ws = ready(site, 'aws-slow')
    assert len(site.instances('aws-slow')) == 1
    # Every throttle was met (and ridden out).
    assert sorted((r['operation'], len(r['hits'])) for r in rules(cloud, 'throttle')) == [
        ('DescribeInstances', 3), ('RunInstances', 2)]
    cloud.throttle('TerminateInstances', times=2)
    destroyed(site, 'aws-slow')
    assert ws['resource_id'] not in [i['instance_id'] for i in site.instances('aws-slow')]


def killed_after_launch(site, name, tmp_path):
    """A create killed right after RunInstances answered: the journal holds the client token, not the instance."""
    trace = tmp_path / ('trace-' + name)
    trace.write_text('')
    kill = {'workspace': name, 'point': 'create.clone aws RunInstances', 'nth': 1}
    killed = site.create(name, site.repo, env={'EPHEMERA_FAILPOINT_TRACE': str(trace),
                                               'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
    assert not killed.ok
    ws = site.workspace(name)
    assert ws['resource_id'] is None and ws['candidate_id'] and 'clone' not in (ws['provider_tasks'] or {})
    [instance] = site.instances(name)
    return instance


FAULTS = [('a repeated token', dict(repeat_at=2), 'token of an earlier page'),
          ('a failing later page', dict(fail_at=2, code='InternalError', status=500), 'failed on page 2'),
          ('more than 100 pages', dict(endless=True), 'more than 100 pages')]


def test_each_incomplete_inventory_is_refused_and_keeps_the_debt(site, cloud, tmp_path):
    instance = killed_after_launch(site, 'aws-inv', tmp_path)
    # A second one, so that a listing of our client tokens has more than one page of one instance.
    other = killed_after_launch(site, 'aws-inv-other', tmp_path)
    for what, fault, said in FAULTS:
        cloud.clear()
        cloud.pages(size=1, times=None, **fault)
        # A failing page is retried as a server error for aws_retry_timeout first: a short patience here.
        run = site.destroy('aws-inv', ephemera_aws_retry_timeout=2)
        assert not run.ok and said in run.output, (what, run.explain())
        debt = site.debt('aws-inv')
        assert debt and said in debt[0]['last_error'], (what, debt)
        record = site.workspace('aws-inv')
        assert record['status'] != 'destroyed'
        assert leasing.cleanup_status(dict(record, cleanup_debt=debt)) == leasing.FAILED
        assert [i['instance_id'] for i in site.instances('aws-inv')] == [instance['instance_id']], what
    # With the listing whole again, the next run finds each instance by its token and finishes.
    cloud.clear()
    destroyed(site, 'aws-inv')
    destroyed(site, 'aws-inv-other')
    assert other['instance_id'] != instance['instance_id']


def test_a_launch_never_seen_is_not_taken_as_absent_within_the_absence_window(site, cloud, tmp_path):
    # The controller dies once the launch is recorded as dispatched, before RunInstances went out: no instance.
    trace = tmp_path / 'trace'
    trace.write_text('')
    kill = {'workspace': 'aws-absent', 'point': 'create.clone journal clone', 'nth': 1}
    killed = site.create('aws-absent', site.repo, env={'EPHEMERA_FAILPOINT_TRACE': str(trace),
                                                       'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
    assert not killed.ok and site.instances('aws-absent') == []
    assert site.workspace('aws-absent')['facts']['clone_dispatched'] == site.workspace('aws-absent')['candidate_id']
    # A complete, empty listing within the absence window proves nothing: the debt stays.
    run = site.destroy('aws-absent')
    assert not run.ok and 'proves nothing until 1800 s after the dispatch' in run.output, run.explain()
    assert site.debt('aws-absent') and site.workspace('aws-absent')['status'] != 'destroyed'
    # Past the window (a short one here), the same listing proves the launch made nothing.
    time.sleep(1.1)
    run = site.destroy('aws-absent', ephemera_aws_absence_window=1)
    assert run.ok, run.explain()
    assert site.workspace('aws-absent')['status'] == 'destroyed' and site.debt('aws-absent') == []


def test_lease_expiry_releases_the_instance(site, cloud):
    ws = ready(site, 'aws-idle', ttl=600, idle_timeout=15, ephemera_agents=DONE_AGENTS)
    time.sleep(max(0.0, ws['lease']['expires_at'] - time.time()) + 0.3)
    run = site.playbook('expire.yml')
    assert run.ok, run.explain()
    entries = [e['action'] for e in run.task('Release what expired')['entries'] if e['workspace'] == 'aws-idle']
    assert entries == ['released'], run.task('Release what expired')['report']
    after = site.workspace('aws-idle')
    assert after['status'] == 'destroyed' and site.instances('aws-idle') == []
    assert leasing.view(after, time.time())['cleanup_status'] == 'complete'


def test_bad_input_is_refused_before_anything_is_launched(site, cloud):
    before = len(site.cloud.instances())
    # One each of: refused by EC2 before a launch, refused before any call, no answer, a tag EC2 does not take (the
    # other cases, unit-tested in tests/unit/plugins/module_utils/test_provider_aws.py, take the same path).
    cases = [
        ({'ephemera_template': 'ami-0123456789abcdef0'}, 'InvalidAMIID'),
        ({'ephemera_aws_region': 'us-nowhere-9'}, 'Unknown AWS region'),
        ({'ephemera_aws_endpoint_url': 'http://127.0.0.1:9'}, 'does not answer'),
        ({'ephemera_aws_tags': {'team': 'a#b'}}, 'does not take'),
    ]
    for extra, said in cases:
        run = site.create('aws-bad', site.repo, ephemera_aws_retry_timeout=2, **extra)
        assert not run.ok and said in run.output, (extra, run.output[-3000:])
        assert site.workspace('aws-bad') is None
    assert len(site.cloud.instances()) == before
