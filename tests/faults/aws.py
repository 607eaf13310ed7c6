"""The AWS rows of the crash-safety matrix, on a try-out cloud of their own (tests/localcloud, docs/localcloud.md): the
cloud parts' shape (tests/faults/cloud.py) with EC2 on moto behind the cloud's fault proxy.

The calls that act have failpoints of their own, right after their answer (``aws RunInstances``, ``aws CreateTags``,
``aws StopInstances``, ``aws TerminateInstances``); they are also the lost-answer rows: the proxy lets moto act and
cuts the connection before the answer, each rule matching only its own workspace's request (the launch by its
``ephemera:workspace`` tag, the later calls by the instance id).

A machine is an instance; it is ours when its ``ephemera:marker`` tag verifies for this controller, bound to the
instance's ClientToken (the launch's marker) or to its ClientToken and id (the marker the configure step signs
again); a live instance is one moto does not hold as terminated. The foreign instances are the
cloud's seed (an untagged one, an otherwise tagged one, one with our tag keys and a marker no controller made), and
one made after the traced create that copies that workspace's tags, marker included, onto an instance of another
principal (its ClientToken is not the workspace's, so the marker does not verify for it). Events: every RunInstances
our controller sent carried a ClientToken a journal record holds as its candidate.
"""

from tests.faults import cloud
from tests.faults.cloud import CloudMatrix, CloudSite

# The shared shape's, under the names the AWS rows' readers know.
NAMES = cloud.NAMES
CLOUD = cloud.CLOUD
SIZES = cloud.SIZES

TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_TOKEN = 'ephemera:token'
# EC2 calls that only read: what a request of ours may do to a foreign instance.
READS = ('Describe', 'Get', 'List')
DISPATCHES = cloud.DISPATCHES


def bindings(token, instance_id):
    """What a marker of ours on the instance may bind, the re-signed one first: its provider's own function."""
    from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import (
        bindings as bound)
    return bound(token, instance_id)


def bound_of(token, instance_id, marker):
    """What the instance's marker must bind (an ownership.Bound): the re-signed binding when the marker claims it
    (the instance id; before version 3, the number of the token and the id), else the launch's (-1 without a client
    token: nothing of ours binds such an instance)."""
    if not token:
        return -1
    resigned, launched = bindings(token, instance_id)
    claims = ('id=%s ' % resigned.resource, 'vmid=%d ' % resigned.number)
    return resigned if any(claim in (marker or '') for claim in claims) else launched


def aws_decisive(points):
    """The ci size's points: the answer of every EC2 call that acts and the commits of a launch's and a termination's
    dispatch (cloud.decisive)."""
    return cloud.decisive(points, 'aws')


class AwsAdapter(cloud.Adapter):
    label = 'aws'
    title = 'AWS'
    guest_prefix = 'i-'
    clone_op = 'RunInstances'
    clone_identity = 'ClientToken'

    def guest_dir(self, resource_id):
        return resource_id

    def provider_vars(self, info):
        seed = info['seed']
        return {
            'ephemera_provider': 'aws', 'ephemera_aws_region': info['region'],
            'ephemera_aws_endpoint_url': info['endpoint_url'], 'ephemera_aws_access_key_id': info['access_key_id'],
            'ephemera_aws_secret_access_key': info['secret_access_key'], 'ephemera_template': seed['image_id'],
            'ephemera_aws_instance_type': seed['instance_type'], 'ephemera_aws_subnet_id': seed['subnet_id'],
            'ephemera_aws_security_group_ids': [seed['security_group_id']], 'ephemera_aws_key_name': seed['key_name'],
            'ephemera_pool': seed['scope'], 'ephemera_aws_visibility_window': 30, 'ephemera_aws_absence_window': 5,
            'ephemera_aws_retry_timeout': 20, 'ephemera_guest_root': info['guest_prefix'],
        }

    def items(self, site):
        out = {}
        for i in site.cloud.instances():
            tags = i['tags']
            token = i.get('client_token')
            out[i['instance_id']] = {
                'id': i['instance_id'], 'state': i['moto_state'], 'running': i['state'] == 'running',
                'live': i['moto_state'] != 'terminated', 'tags': tags, 'workspace': tags.get(TAG_WORKSPACE),
                'marker': tags.get(TAG_MARKER), 'bound': bound_of(token, i['instance_id'], tags.get(TAG_MARKER)),
                'client_token': i.get('client_token')}
        return out

    def log_requests(self, site):
        """A proxy rule that records every request and lets the fault rules act on it."""
        if site.logging_rule is None:
            site.logging_rule = site.cloud.proxy_add('log', '*', times=None)['id']

    def requests(self, site):
        """(time, operation, instance ids named, client token) of every request since the faults were cleared."""
        return sorted((hit['time'], hit['operation'], tuple(hit.get('instances') or ()), hit.get('client_token'))
                      for rule in site.cloud.proxy_rules() if rule['action'] == 'log' for hit in rule['hits'])

    def is_read(self, op):
        return op.startswith(READS)

    def copy_foreign(self, site, item, workspace):
        # Another principal copies a workspace's tags onto an instance of its own (the marker is not ours to make).
        site.cloud.foreign_create(copy_tags_of=item['id'])

    def lost_rule(self, site, op, call, name, resource_id):
        if op == 'destroy':
            return site.cloud.drop_response(call, match=resource_id)
        if call == 'RunInstances':
            # The launch request carries the workspace's name as its ephemera:workspace tag.
            return site.cloud.drop_response(call, match=name)
        if call == 'CreateTags':
            # The create's first CreateTags writes the marker, which names the workspace: armed before the run, it
            # cannot miss a call that follows the launch by less than a second.
            return site.cloud.drop_response(call, match='* workspace=%s *' % name)
        return None

    def rule_hits(self, site, rule):
        return len([r for r in site.cloud.proxy_rules() if r['id'] == rule['id']][0]['hits'])


class AwsSite(CloudSite):
    """A try-out cloud (its own process), a git server with a token, a journal and the controller secret."""

    adapter = AwsAdapter()


# The shared shape's view and checks, under the names the detector tests know.
CloudView = cloud.CloudView
check = cloud.check


class AwsMatrix(CloudMatrix):
    """Kill chains (or single kills) through the AWS create's and destroy's points, and every lost answer of an EC2
    call that acts, against one AwsSite."""
