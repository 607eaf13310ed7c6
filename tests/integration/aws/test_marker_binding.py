"""The AWS marker binds what EC2 records about an instance, never a tag, through the shipped playbooks on the
try-out cloud (tests/localcloud: moto behind the proxy, which shows EC2's empty client token for an instance launched
without one and answers EC2's client-token filter).

A workspace is made and destroyed by the create and destroy playbooks. Then someone who may only tag instances
takes three instances that another principal launched without a client token and copies onto them every tag of the
destroyed workspace's instance (which EC2 still lists, terminated), with a lease that ended long ago: one carries
the marker as it is now, another the marker the launch wrote, as it was readable in the seconds before the create
signed it again, the third the launch's marker in the form of before version 3. Neither the applied cleanup sweep
nor reconcile in delete mode terminates them; both report them as not ours. Reconcile does not take such a copy for
an instance of ours either when the copied tags are those of a workspace whose create died right after RunInstances
(its destroy found the instance by its client token)."""

import json
import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import token_number
from tests.integration.playbooks import make_repo
from tests.localcloud.clients import foreign_client

from .awsrun import AwsSite

SWEEP_TASK = 'Sweep the pool by labels'
RECONCILE_TASK = 'Compare the journal with the cluster'


@pytest.fixture(scope='module')
def site(localcloud, tmp_path_factory):
    directory = tmp_path_factory.mktemp('aws-binding')
    site = AwsSite(localcloud, directory)
    site.repo = make_repo(str(directory / 'repo'))
    yield site


def _launch_without_client_token(ec2, seed):
    """An instance launched by a RunInstances that carries no ClientToken (boto3 adds one of its own, as every SDK
    does; a plain Query API request, or a tool that builds its own, gives none)."""
    def drop_token(params, **kwargs):
        params['body'].pop('ClientToken', None)
    ec2.meta.events.register('before-call.ec2.RunInstances', drop_token)
    try:
        answer = ec2.run_instances(ImageId=seed['image_id'], InstanceType=seed['instance_type'], MinCount=1,
                                   MaxCount=1, SubnetId=seed['subnet_id'])
    finally:
        ec2.meta.events.unregister('before-call.ec2.RunInstances', drop_token)
    return answer['Instances'][0]['InstanceId']


def _described(ec2, instance_id):
    [reservation] = ec2.describe_instances(InstanceIds=[instance_id])['Reservations']
    return reservation['Instances'][0]


def test_copied_tags_on_an_instance_without_a_client_token_are_never_taken_for_ours(site):
    run = site.create('aws-gone', site.repo, agent='tool', ephemera_agents={'tool': ['true']})
    assert run.ok, run.explain()
    ws = site.workspace('aws-gone')
    instance_id, token, nonce = ws['resource_id'], ws['candidate_id'], ownership.record_nonce(ws)
    run = site.destroy('aws-gone')
    assert run.ok, run.explain()
    assert site.workspace('aws-gone')['status'] == 'destroyed'

    ec2 = foreign_client(site.cloud.info)
    gone = _described(ec2, instance_id)
    assert gone['State']['Name'] == 'terminated' and gone['ClientToken'] == token
    copied = {t['Key']: t['Value'] for t in gone['Tags']}
    secret = site.secret()
    controller = ownership.controller_id(secret)
    launch_marker = ownership.render_resource(secret, controller, 'aws-gone', token, nonce)
    # The launch's marker as the collection wrote it before version 3 (a digest of the token): it binds no more.
    legacy_marker = ownership.render(secret, controller, 'aws-gone', token_number(token), nonce)
    assert ' id=%s ' % instance_id in copied['ephemera:marker']
    past = str(int(time.time()) - 7200)
    victims = {}
    for which, marker in (('current', copied['ephemera:marker']), ('launch', launch_marker),
                          ('legacy launch', legacy_marker)):
        victim = _launch_without_client_token(ec2, site.cloud.info['seed'])
        tags = dict(copied, **{'ephemera:marker': marker, 'ephemera:state': 'ready', 'ephemera:keep': 'false',
                               'ephemera:expires_at': past})
        ec2.create_tags(Resources=[victim], Tags=[{'Key': k, 'Value': v} for k, v in sorted(tags.items())])
        shown = _described(ec2, victim)
        # EC2 shows no client token for it, and its tags are the workspace's, its lease long over.
        assert not shown.get('ClientToken') and shown['State']['Name'] in ('pending', 'running')
        assert {t['Key']: t['Value'] for t in shown['Tags']}['ephemera:token'] == token
        victims[which] = victim
    # EC2's client-token filter finds the destroyed workspace's instance alone.
    found = ec2.describe_instances(Filters=[{'Name': 'client-token', 'Values': [token]}])['Reservations']
    assert [i['InstanceId'] for r in found for i in r['Instances']] == [instance_id]

    run = site.playbook('cleanup.yml', apply=True)
    assert run.ok, run.explain()
    entries = {e['id']: e for e in run.task(SWEEP_TASK)['entries']}
    for victim in victims.values():
        entry = entries[victim]
        assert (entry['action'], entry['verdict'], entry['name']) == ('reported', 'mismatch', 'aws-gone'), entry
        assert 'does not verify' in entry['reason'] and 'not ours to delete' in entry['reason'], entry
    assert not [e for e in entries.values() if e['action'] == 'deleted'], entries

    run = site.playbook('reconcile.yml', reconcile_resume_creates=False, ephemera_orphans='delete')
    assert run.ok, run.explain()
    findings = {f['vmid']: f for f in run.task(RECONCILE_TASK)['findings']}
    for victim in victims.values():
        finding = findings[victim]
        assert (finding['kind'], finding['workspace']) == ('foreign', None), finding
        assert 'made for another resource' in finding['detail'] and 'never touched' in finding['detail'], finding
    assert not [f for f in findings.values() if f['kind'] in ('orphan_deleted', 'destroyed_present')], findings
    states = {i['instance_id']: i['state'] for i in site.cloud.instances()}
    assert all(states[v] in ('pending', 'running') for v in victims.values()), states
    # The create's configure step had signed the marker again over the instance id, and recorded that first.
    assert copied['ephemera:marker'] != launch_marker
    configured = [e['detail']['marker'] for e in site.events('aws-gone')
                  if e['action'] == 'configure' and e['kind'] == 'dispatched' and 'marker' in e['detail']]
    assert configured == [copied['ephemera:marker']], configured


def test_reconcile_never_takes_copied_tags_for_an_instance_of_ours(site, tmp_path):
    trace = tmp_path / 'trace'
    trace.write_text('')
    kill = {'workspace': 'aws-lost-answer', 'point': 'create.clone aws RunInstances', 'nth': 1}
    run = site.create('aws-lost-answer', site.repo, agent='tool', ephemera_agents={'tool': ['true']},
                      env={'EPHEMERA_FAILPOINT_TRACE': str(trace), 'EPHEMERA_FAILPOINT_KILL': json.dumps(kill)})
    assert not run.ok
    ws = site.workspace('aws-lost-answer')
    assert ws['resource_id'] is None and ws['candidate_id']
    run = site.destroy('aws-lost-answer')
    assert run.ok, run.explain()
    [gone] = [i for i in site.cloud.instances() if i['tags'].get('ephemera:workspace') == 'aws-lost-answer']
    assert gone['state'] == 'terminated'

    ec2 = foreign_client(site.cloud.info)
    victim = _launch_without_client_token(ec2, site.cloud.info['seed'])
    tags = dict(gone['tags'], **{'ephemera:expires_at': str(int(time.time()) - 7200)})
    ec2.create_tags(Resources=[victim], Tags=[{'Key': k, 'Value': v} for k, v in sorted(tags.items())])
    assert {t['Key']: t['Value'] for t in _described(ec2, victim)['Tags']}['ephemera:token'] == \
        ws['candidate_id']

    run = site.playbook('reconcile.yml', reconcile_resume_creates=False, ephemera_orphans='delete')
    assert run.ok, run.explain()
    findings = {f['vmid']: f for f in run.task(RECONCILE_TASK)['findings']}
    # Not an instance of ours without a record ('orphan', with the advice to remove it by hand): a stranger's.
    assert (findings[victim]['kind'], findings[victim]['workspace']) == ('foreign', None), findings[victim]
    assert 'made for another resource' in findings[victim]['detail'], findings[victim]
    states = {i['instance_id']: i['state'] for i in site.cloud.instances()}
    assert states[victim] in ('pending', 'running'), states
