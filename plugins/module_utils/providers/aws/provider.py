# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AWS provider: workspaces are EC2 instances launched from an AMI.

Ids are instance ids, locations are regions, the scope is the ``ephemera:scope`` tag, task handles name an
instance and what was asked of it (``ec2/run/<region>/<id>/<epoch>``), and the ownership marker is the value of
the ``ephemera:marker`` tag. The candidate id a create records before it dispatches is the ``ClientToken`` of
``RunInstances`` (derived from the workspace and its record), so a retry after a lost answer asks for the same
instance; every tag goes on the instance and its volumes in the ``RunInstances`` call itself
(``TagSpecifications``), so the claim and the resource are one act. The instance id of the answer is in the handle
the flow records at once.

The marker binds what EC2 itself records about the instance, never a tag (anyone who may tag instances can copy
tags): at launch, the ``ClientToken`` EC2 keeps with the instance; once the instance id is known, the configure
step signs it again over the instance id (:meth:`AwsProvider.plan_settings`), which EC2 gives no other instance.
Markers written before version 3 bound a digest of the client token, or of the client token and the instance id
(token_number, instance_number), and still verify against them. An instance
without a client token (launched by a request that gave none) verifies no marker of ours, and an instance is looked
up by its token with EC2's ``client-token`` filter, never by the ``ephemera:token`` tag, which is only a hint for
people.

A new instance id may be unknown to ``DescribeInstances`` for a while: within ``visibility_window`` seconds of
learning it, ``InvalidInstanceID.NotFound`` means "not visible yet", never "absent". A delete is done when
``TerminateInstances`` acknowledged the exact instance and a read then shows it ``terminated`` (or an exact
NotFound once the window has passed).
"""

import base64
import re
import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import lease as leasing
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import cloud
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import hostkeys
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws import options
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.client import (
    ENDPOINT_ENV,
    REGION_ENV,
    Ec2,
)

NAME = 'aws'
KIND = 'ec2'
TAG_PREFIX = 'ephemera:'
TAG_MARKER = 'ephemera:marker'
TAG_WORKSPACE = 'ephemera:workspace'
TAG_SCOPE = 'ephemera:scope'
TAG_TOKEN = 'ephemera:token'
TAG_LEASE_ID = 'ephemera:lease-id'
TAG_CREATED_BY = 'ephemera:created-by'
# On a fork's image and its EBS snapshots: the image's name (the fork's), by which its snapshots are found again.
TAG_FORK_IMAGE = 'ephemera:fork-image'
LABEL_KEYS = (leasing.LABEL_STATE, leasing.LABEL_EXPIRES_AT, leasing.LABEL_KEEP, leasing.LABEL_CREATED_AT)
# EC2's tag rules: letters, digits, spaces and + - = . _ : / @; keys up to 128 characters, values up to 256.
TAG_CHARS = re.compile(r'^[\w +\-=.:/@]*$', re.U)
GONE = ('terminated',)
ENDING = ('shutting-down', 'terminated')
DEFAULT_VISIBILITY_WINDOW = 60
DEFAULT_ABSENCE_WINDOW = 1800
SSM_PREFIX = 'resolve:ssm:'
INSTANCE_ID = re.compile(r'^i-[0-9a-f]{8,17}$')
AMI_ID = re.compile(r'^ami-[0-9a-f]{8,17}$')


def tag_label(name):
    """The tag key of a lease label."""
    return TAG_PREFIX + name


def check_tag(key, value):
    """Refused, saying what is wrong, unless EC2 accepts the tag ``key``=``value`` and it is not one of ours."""
    if not isinstance(key, str) or not key or len(key) > 128 or not TAG_CHARS.match(key):
        raise base.InvalidRequest('Tag key %r is not allowed: EC2 takes 1 to 128 letters, digits, spaces and '
                                  '"+-=._:/@".' % (key,))
    if key.lower().startswith('aws:') or key.startswith(TAG_PREFIX) or key == 'Name':
        raise base.InvalidRequest('Tag key %r is reserved (aws:, %s and Name are set by AWS or the collection). '
                                  'Choose another key.' % (key, TAG_PREFIX))
    text = '' if value is None else str(value)
    if len(text) > 256 or not TAG_CHARS.match(text):
        raise base.InvalidRequest('Tag %s has the value %r, which EC2 does not take: at most 256 letters, digits, '
                                  'spaces and "+-=._:/@". Change the value.' % (key, text))


# The number a version 2 marker bound for a client token (the marker written at launch).
token_number = cloud.bound_number


def instance_number(client_token, instance_id):
    """The number a re-signed version 2 marker bound: the client token and the instance id, both as EC2 records
    them."""
    return cloud.bound_number('%s\n%s' % (client_token, instance_id))


def bindings(client_token, instance_id):
    """What a marker of ours on the instance may bind (ownership.Bound), the re-signed one first: the instance id
    (before version 3, the digest of the token and the id), then the client token its launch bound."""
    launched = ownership.Bound(client_token, token_number(client_token))
    if not instance_id:
        return (launched,)
    return ownership.Bound(instance_id, instance_number(client_token, instance_id)), launched


def tags_of(instance):
    return {t.get('Key'): t.get('Value') for t in instance.get('Tags') or []}


def task_handle(action, region, instance_id, at=None):
    return 'ec2/%s/%s/%s/%d' % (action, region, instance_id, int(at if at is not None else time.time()))


def parse_handle(text):
    """(action, region, instance id, epoch) of a handle; ValueError for anything else."""
    parts = (text or '').split('/')
    if len(parts) != 5 or parts[0] != KIND:
        raise ValueError('not an EC2 task handle: %r' % (text,))
    return parts[1], parts[2], parts[3], int(parts[4])


def address_of(instance, kind='public'):
    """The instance's IPv4 address of ``kind`` (public or private) from the documented fields, or None."""
    if kind == 'public':
        found = instance.get('PublicIpAddress')
        if not found:
            for nic in instance.get('NetworkInterfaces') or []:
                found = (nic.get('Association') or {}).get('PublicIp')
                if found:
                    break
        return found
    found = instance.get('PrivateIpAddress')
    if not found:
        for nic in instance.get('NetworkInterfaces') or []:
            found = nic.get('PrivateIpAddress')
            if found:
                break
    return found


def launch_options(params, environ=None):
    """The launch settings of module params (doc fragment ephemera.workspaces.aws), as a request records them."""
    groups = params.get('aws_security_group_ids') or []
    return {
        'instance_type': params.get('aws_instance_type') or 't3.micro',
        'subnet_id': params.get('aws_subnet_id'),
        'security_group_ids': sorted(groups),
        'key_name': params.get('aws_key_name'),
        'ssh_public_key': params.get('aws_ssh_public_key'),
        'address': params.get('aws_address') or 'public',
        'tags': dict(params.get('aws_tags') or {}),
    }


class AwsProvider(cloud.CloudProvider):
    """The provider seam over EC2 in one region (``ec2``: an :class:`Ec2`)."""

    name = NAME
    location_option = options.LOCATION_OPTION
    kind = KIND
    noun = 'instance'
    candidate_noun = 'An EC2 client token'
    allocation_words = {
        'vmid': ('candidate client token', 'candidate client token'),
        'clone': ('launch', 'launch the instance'),
        'wait_clone': ('wait launch', 'wait for the launch'),
    }
    image_hint = 'on AWS give an AMI'
    # An instance id is never given to another instance.
    unique_ids = True
    # A fork copies the parent as an AMI made without reboot (CreateImage NoReboot) and launches the children from it.
    fork_refusal = None
    # cloud-init prints the host keys to the console, which EC2 keeps (published_host_keys).
    host_key_source = 'the console output (GetConsoleOutput)'
    host_key_advice = 'An image whose cloud-init prints the keys to the console (its default) avoids that.'

    def __init__(self, ec2, secret=None, launch=None, visibility_window=DEFAULT_VISIBILITY_WINDOW,
                 absence_window=DEFAULT_ABSENCE_WINDOW, sleep=time.sleep):
        super().__init__(secret)
        self.ec2 = ec2
        self.launch = dict(launch or {})
        self.visibility_window = visibility_window
        self.absence_window = absence_window
        self.sleep = sleep
        # Instance ids learned from an answer in this process, and when: NotFound within the window is "not yet".
        self.learned = {}

    @classmethod
    def from_params(cls, params, secret=None, environ=None):
        """A provider from module params (the options of doc fragment ephemera.workspaces.aws)."""
        ec2 = Ec2(cloud.option(params, 'aws_region', REGION_ENV, environ),
                  profile=cloud.option(params, 'aws_profile', ('AWS_PROFILE',), environ),
                  access_key=params.get('aws_access_key_id'), secret_key=params.get('aws_secret_access_key'),
                  session_token=params.get('aws_session_token'),
                  endpoint_url=cloud.option(params, 'aws_endpoint_url', ENDPOINT_ENV, environ),
                  retry_timeout=params.get('aws_retry_timeout') or 60)
        visibility = params.get('aws_visibility_window')
        absence = params.get('aws_absence_window')
        return cls(ec2, secret, launch_options(params, environ),
                   DEFAULT_VISIBILITY_WINDOW if visibility is None else visibility,
                   DEFAULT_ABSENCE_WINDOW if absence is None else absence)

    def with_secret(self, secret):
        other = AwsProvider(self.ec2, secret, self.launch, self.visibility_window, self.absence_window, self.sleep)
        other.learned = self.learned
        return other

    @staticmethod
    def serves(api):
        return isinstance(api, Ec2)

    @property
    def region(self):
        return self.ec2.region

    @property
    def here(self):
        return self.region

    # ------------------------------------------------------------------- ownership

    @staticmethod
    def token_of(resource):
        """The client token EC2 recorded for the instance (its own ``ClientToken`` field), or None when it was
        launched without one. Never a tag: anyone who may tag instances can write those."""
        native = resource.native or {}
        return native.get('ClientToken') or None

    def bound_id(self, resource):
        return self.token_of(resource)

    def _bindings(self, resource):
        """What a marker of ours on ``resource`` may bind (bindings()): () without a client token."""
        token = self.token_of(resource)
        if not token:
            return ()
        return bindings(token, (resource.native or {}).get('InstanceId') or resource.id)

    def verify(self, resource, workspace=None, nonce=ownership.ANY):
        """The marker's verdict against EC2's own facts of the instance: its client token and its id (the marker
        its launch wrote binds the token alone). An instance without a client token has nothing a marker of ours
        can bind: a genuine marker on it was copied there (MISMATCH)."""
        if resource is None:
            return ownership.ABSENT
        verdict = ownership.ABSENT
        for bound in self._bindings(resource) or (-1,):
            verdict = ownership.verdict(resource.marker_text, self.secret, self.controller, workspace, bound, nonce)
            if verdict != ownership.MISMATCH:
                return verdict
        return verdict

    def _resigned(self, resource):
        """The marker that binds the instance id, for an instance that carries the verifying marker its launch wrote
        (None otherwise: it is re-signed already, or not ours to sign)."""
        bound = self._bindings(resource)
        if self.secret is None or len(bound) != 2:
            return None
        text = resource.marker_text
        launched = ownership.verdict(text, self.secret, self.controller, None, bound[1])
        if launched != ownership.VERIFIED:
            return None
        fields = ownership.parse(text)
        if fields['version'] == ownership.LEGACY:
            # A marker of before nonces is signed again in its own form: its record holds no nonce.
            return ownership.render(self.secret, self.controller, fields['workspace'], bound[0].number)
        return ownership.render_resource(self.secret, self.controller, fields['workspace'], bound[0].resource,
                                         fields['nonce'])

    def plan_settings(self, resource, settings):
        """The only setting of an instance that changes after its launch: its marker, signed again to bind the
        instance id once EC2 named it ({'marker': (before, after)}), else nothing."""
        resigned = self._resigned(resource)
        return {'marker': (resource.marker_text, resigned)} if resigned else {}

    def apply_settings(self, resource, changes):
        marker = (changes.get('marker') or (None, None))[1]
        if marker:
            ids = [resource.id] + self._volumes(resource)
            self.ec2.call('create_tags', acts=True, Resources=ids, Tags=[{'Key': TAG_MARKER, 'Value': marker}])

    # ------------------------------------------------------------------- warm pools

    # A claim re-tags the member's instance (and its volumes): marker, Name, ephemera:workspace, the lease's tags.
    pool_refusal = None

    def remark_bound(self, resource):
        """A claimed instance's marker binds its id, as a launched one's after its configure."""
        bound = self._bindings(resource)
        if not bound:
            raise base.Refused('%s has no client token: no marker of ours can bind it, and it is not given to a '
                               'workspace.' % self.label(resource.id, self.region))
        return bound[0].resource

    def write_remark(self, resource, workspace, marker, hostname, labels, created_by=None):
        """One CreateTags on the instance and its volumes: the marker, the Name tag (the instance's name in the
        console; the guest's own host name is left as the image set it), the workspace tag, the lease's tags and
        ephemera:created-by (the workspace's requester, when known). ephemera:token and ephemera:lease-id stay: they
        are the client token the marker binds."""
        tags = {TAG_MARKER: marker, 'Name': hostname, TAG_WORKSPACE: workspace}
        if created_by:
            tags[TAG_CREATED_BY] = str(created_by)[:256]
        tags.update((tag_label(k), str(v)) for k, v in labels.items())
        self.ec2.call('create_tags', acts=True, Resources=[resource.id] + self._volumes(resource),
                      Tags=[{'Key': k, 'Value': v} for k, v in sorted(tags.items())])

    # ------------------------------------------------------------------- the lease

    def labels(self, resource):
        tags = tags_of(resource.native or {})
        return {k: tags[tag_label(k)] for k in LABEL_KEYS if tag_label(k) in tags}

    def write_labels(self, resource, labels):
        ids = [resource.id] + self._volumes(resource)
        tags = [{'Key': tag_label(k), 'Value': str(v)} for k, v in sorted(labels.items())]
        self.ec2.call('create_tags', acts=True, Resources=ids, Tags=tags)

    @staticmethod
    def _volumes(resource):
        return [m['Ebs']['VolumeId'] for m in (resource.native or {}).get('BlockDeviceMappings') or []
                if (m.get('Ebs') or {}).get('VolumeId')]

    # ------------------------------------------------------------------- allocation

    def resolve_source(self, source):
        """The AMI id of ``source`` (an AMI id, or an SSM parameter name, resolve:ssm:NAME or a name starting with
        /), resolved once; Refused with what to give otherwise."""
        text = str(source or '').strip()
        if AMI_ID.match(text):
            return text
        name = text[len(SSM_PREFIX):] if text.startswith(SSM_PREFIX) else text
        if not name.startswith('/'):
            raise base.InvalidRequest('Image %r is neither an AMI id (ami-...) nor an SSM parameter name '
                                      '(resolve:ssm:/aws/service/...).' % (source,))
        try:
            value = self.ec2.ssm_parameter(name)
        except base.ProviderError as err:
            raise base.InvalidRequest('Image %r: the SSM parameter could not be read: %s' % (source, err))
        if not AMI_ID.match(value or ''):
            raise base.InvalidRequest('Image %r: the SSM parameter holds %r, not an AMI id.' % (source, value))
        return value

    def check_source(self, source, location, scope):
        """The region, after checking the AMI, the launch settings and the tags (no instance is launched)."""
        if location and location != self.region:
            raise base.InvalidRequest('The request names region %s, and the AWS connection is for %s: give one '
                                      'region (aws_region).' % (location, self.region))
        launch = self.launch
        for key, value in sorted((launch.get('tags') or {}).items()):
            check_tag(key, value)
        check_tag('scope', scope)
        if launch.get('address') not in ('public', 'private'):
            raise base.InvalidRequest('aws_address is %r: give public or private.' % (launch.get('address'),))
        images = self.ec2.call('describe_images', ImageIds=[source]).get('Images') or []
        if not images:
            raise base.InvalidRequest('AMI %s does not exist in %s. Give an AMI of this region.' % (source, self.region))
        if images[0].get('State') not in (None, 'available'):
            raise base.InvalidRequest('AMI %s is %s, not available.' % (source, images[0].get('State')))
        self.ec2.call('describe_instance_types', InstanceTypes=[launch.get('instance_type') or 't3.micro'])
        if launch.get('subnet_id'):
            self.ec2.call('describe_subnets', SubnetIds=[launch['subnet_id']])
        if launch.get('security_group_ids'):
            self.ec2.call('describe_security_groups', GroupIds=list(launch['security_group_ids']))
        if launch.get('key_name'):
            self.ec2.call('describe_key_pairs', KeyNames=[launch['key_name']])
        elif not launch.get('ssh_public_key'):
            raise base.InvalidRequest('No way into the instance: give aws_key_name (an EC2 key pair) or '
                                      'aws_ssh_public_key (a public key the instance gets through its user data).')
        return self.region

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        """The client token of ``workspace``'s record made at ``stamp``: the same for every rerun, another one for
        every token in ``avoid``."""
        return cloud.derived_candidate(workspace, stamp, avoid, 'ephemera-%s-' % workspace[:30], 24, 'client token')

    def _tags(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        tags = {'Name': a.hostname, TAG_MARKER: self.marker(a.workspace, a.candidate, a.nonce),
                TAG_WORKSPACE: a.workspace, TAG_SCOPE: a.scope, TAG_TOKEN: a.candidate}
        for key, value in (a.labels or {}).items():
            tags[tag_label(key)] = str(value)
        extra = launch.get('lease') or {}
        if extra.get('id'):
            tags[TAG_LEASE_ID] = str(extra['id'])
        if extra.get('created_by'):
            tags[TAG_CREATED_BY] = str(extra['created_by'])[:256]
        tags.update(launch.get('tags') or {})
        return tags

    def allocate(self, allocation):
        a = allocation
        launch = dict(self.launch, **(a.options or {}))
        tags = [{'Key': k, 'Value': v} for k, v in sorted(self._tags(a).items())]
        image = a.source
        if a.snapshot:
            # A fork's child: launched from the fork's image of its parent (a.source), found again by its name.
            found = self._fork_image(a.snapshot, a.source)
            if found is None or found.get('State') != 'available':
                raise base.Refused('The fork image %s of %s is %s: a child is launched only from an available image. '
                                   'Run the fork again.' % (a.snapshot, self.label(a.source, self.region),
                                                            'missing' if found is None else found.get('State')))
            image = found['ImageId']
        args = dict(ImageId=image, InstanceType=launch.get('instance_type') or 't3.micro', MinCount=1,
                    MaxCount=1, ClientToken=a.candidate,
                    TagSpecifications=[{'ResourceType': 'instance', 'Tags': tags},
                                       {'ResourceType': 'volume', 'Tags': tags}])
        if launch.get('subnet_id'):
            args['SubnetId'] = launch['subnet_id']
        if launch.get('security_group_ids'):
            args['SecurityGroupIds'] = list(launch['security_group_ids'])
        if launch.get('key_name'):
            args['KeyName'] = launch['key_name']
        if launch.get('ssh_public_key'):
            args['UserData'] = user_data(launch['ssh_public_key'])
        answer = self.ec2.call('run_instances', acts=True, **args)
        instances = answer.get('Instances') or []
        if len(instances) != 1 or not instances[0].get('InstanceId'):
            raise base.UnknownOutcome('RunInstances answered without exactly one instance (%d); look for the client '
                                      'token %s before anything else.' % (len(instances), a.candidate))
        instance_id = instances[0]['InstanceId']
        now = time.time()
        self.learned[instance_id] = now
        return task_handle('run', self.region, instance_id, now)

    def allocation_task(self, allocation, since):
        found = self._by_token(allocation.candidate)
        if len(found) != 1:
            return None
        return task_handle('run', self.region, found[0]['InstanceId'])

    def resource_of(self, candidate, task, location=None):
        """The instance id of an allocation: the one its handle names, else the one found by its client token."""
        if task:
            return parse_handle(task)[2]
        found = self._by_token(candidate)
        if len(found) != 1:
            raise base.Refused('%d live instances were launched with the client token %s; expected one. Look at them '
                               '(aws ec2 describe-instances --filters Name=client-token,Values=%s) before going on.'
                               % (len(found), candidate, candidate))
        return found[0]['InstanceId']

    # --------------------------------------------------------------------------------- forks

    # A fork's image is an AMI of the parent made without reboot, named by the fork (the name the journal recorded
    # before CreateImage: an account has one image of a name in a region, so a rerun finds it and never makes a
    # second), its marker tag binding the parent's instance id, its EBS snapshots tagged with its name.

    def _images_named(self, name):
        """Every image of this account named ``name`` (any state)."""
        answer = self.ec2.call('describe_images', Owners=['self'], Filters=[{'Name': 'name', 'Values': [name]}])
        return [i for i in answer.get('Images') or [] if i.get('Name') == name]

    def _image_ours(self, image, instance_id):
        """True when the image's marker is ours and binds ``instance_id`` (the instance it was made of)."""
        verdict = ownership.verdict(tags_of(image).get(TAG_MARKER), self.secret, self.controller, None,
                                    instance_id, ownership.ANY)
        return verdict == ownership.VERIFIED

    def _fork_image(self, name, instance_id):
        """The image ``name`` of ``instance_id`` made by a fork of ours, or None; Refused for one of that name that
        is not ours."""
        found = self._images_named(name)
        for image in found:
            if self._image_ours(image, instance_id):
                return image
        if found:
            raise base.Refused('Image %s (%s) carries no marker of this controller for %s: it is not the fork\'s '
                               'image, and it is left alone. Abandon the fork (-e fork_abandon=true) and fork again.'
                               % (name, found[0].get('ImageId'), self.label(instance_id, self.region)))
        return None

    def snapshot(self, resource, name, description):
        """CreateImage of the running instance without reboot, named ``name``, its marker ``description`` on the
        image and its snapshots; a handle that waits for the image to be available. Conflict when the name is
        taken."""
        tags = [{'Key': TAG_MARKER, 'Value': description}, {'Key': TAG_FORK_IMAGE, 'Value': name},
                {'Key': 'Name', 'Value': name}]
        try:
            answer = self.ec2.call('create_image', acts=True, InstanceId=resource.id, Name=name, NoReboot=True,
                                   Description='Copy of %s for a fork (ephemera)' % resource.id,
                                   TagSpecifications=[{'ResourceType': 'image', 'Tags': tags},
                                                      {'ResourceType': 'snapshot', 'Tags': tags}])
        except base.Refused as err:
            if getattr(err, 'code', '') == 'InvalidAMIName.Duplicate':
                raise base.Conflict(str(err))
            raise
        if not answer.get('ImageId'):
            raise base.UnknownOutcome('CreateImage answered without an image id; look for image %s first.' % name)
        return task_handle('image', self.region, answer['ImageId'])

    def snapshot_exists(self, resource, name):
        image = self._fork_image(name, resource.id)
        return image is not None and image.get('State') == 'available'

    def snapshot_pending(self, resource, name):
        image = self._fork_image(name, resource.id)
        return image is not None and image.get('State') == 'pending'

    def _fork_snapshots(self, name):
        """The EBS snapshots of this account tagged as the fork image ``name``'s."""
        answer = self.ec2.call('describe_snapshots', OwnerIds=['self'],
                               Filters=[{'Name': 'tag:' + TAG_FORK_IMAGE, 'Values': [name]}])
        return [s['SnapshotId'] for s in answer.get('Snapshots') or []]

    def delete_snapshot(self, resource, name):
        """Deregister the fork image ``name`` (ours) and delete its EBS snapshots (those its block device mappings
        name, and any tagged with its name); a handle that is done once describing finds neither. None when there
        was none."""
        images = [i for i in self._images_named(name) if tags_of(i).get(TAG_FORK_IMAGE) == name and
                  (resource is None or self._image_ours(i, resource.id))]
        snapshots = set(self._fork_snapshots(name))
        for image in images:
            snapshots.update(m['Ebs']['SnapshotId'] for m in image.get('BlockDeviceMappings') or []
                             if (m.get('Ebs') or {}).get('SnapshotId'))
            self._remove(lambda ami=image['ImageId']: self.ec2.call('deregister_image', acts=True, ImageId=ami),
                         ('InvalidAMIID',))
        for snapshot_id in sorted(snapshots):
            self._remove(lambda snap=snapshot_id: self.ec2.call('delete_snapshot', acts=True, SnapshotId=snap),
                         ('InvalidSnapshot.NotFound',))
        if not images and not snapshots:
            return None
        return task_handle('unimage', self.region, name)

    @staticmethod
    def _remove(call, gone):
        """One removal of the fork's copy (``call()``); an error whose code starts with one of ``gone`` means it is
        gone already. A lost answer is asked once more: a removal repeated allocates nothing, and what was removed
        meanwhile answers with one of those codes (the handle's wait then confirms both absent)."""
        for attempt in (1, 2):
            try:
                call()
                return
            except base.UnknownOutcome:
                if attempt == 2:
                    raise
            except base.Refused as err:
                if str(getattr(err, 'code', '')).startswith(gone):
                    return
                raise

    def _image_gone(self, name):
        """'done' when neither the fork image ``name`` nor a snapshot of it is described any more, else 'running'."""
        return 'running' if self._images_named(name) or self._fork_snapshots(name) else 'done'

    def _image_state(self, ami_id):
        try:
            images = self.ec2.call('describe_images', ImageIds=[ami_id]).get('Images') or []
        except base.Refused as err:
            if str(getattr(err, 'code', '')).startswith('InvalidAMIID'):
                return None, None
            raise
        return ((images[0].get('State'), images[0]) if images else (None, None))

    # ------------------------------------------------------------------------------- looking

    def _by_token(self, token):
        """Every live instance EC2 launched with the client token ``token`` (a complete read, or
        IncompleteInventory)."""
        # EC2's own filter on the token it recorded, every page, and the field checked again here; the
        # ephemera:token tag is never asked: anyone who may tag an instance can copy it.
        found = self.ec2.describe_instances(Filters=[{'Name': 'client-token', 'Values': [token]}])
        return [i for i in found if i.get('ClientToken') == token and (i.get('State') or {}).get('Name') not in GONE]

    def _resource(self, instance):
        state = (instance.get('State') or {}).get('Name')
        return base.Resource(instance['InstanceId'], self.region, deleting=state in ENDING,
                             marker_text=tags_of(instance).get(TAG_MARKER), native=instance)

    def _describe(self, instance_id):
        """The instance's description, or None when EC2 says it does not exist, or shows it terminated. Within the
        visibility window of an id learned here, NotFound is waited out (up to the window's end)."""
        while True:
            try:
                found = self.ec2.describe_instances(InstanceIds=[instance_id])
            except base.NotFound:
                learned = self.learned.get(instance_id)
                if learned is not None and time.time() - learned < self.visibility_window:
                    self.sleep(1.0)
                    continue
                return None
            found = [i for i in found if i.get('InstanceId') == instance_id]
            if len(found) > 1:
                raise base.Refused('DescribeInstances listed %s %d times.' % (instance_id, len(found)))
            if not found or (found[0].get('State') or {}).get('Name') in GONE:
                return None
            return found[0]

    def find(self, resource_id, location=None, search=False):
        if resource_id is None:
            return None
        if location and location != self.region:
            raise base.InvalidRequest('%s is in region %s; this connection is for %s. Run with aws_region %s.'
                                      % (self.label(resource_id), location, self.region, location))
        if not INSTANCE_ID.match(str(resource_id)):
            # A client token: the instance an allocation with it made, if any.
            found = self._by_token(resource_id)
            if len(found) > 1:
                raise base.Refused('%d live instances carry the client token %s; expected at most one.'
                                   % (len(found), resource_id))
            return self._resource(found[0]) if found else None
        instance = self._describe(resource_id)
        return None if instance is None else self._resource(instance)

    def native(self, resource_id):
        return self._describe(resource_id)

    def published_host_keys(self, resource):
        """The host keys the instance's cloud-init printed to its console at boot, read from EC2 (GetConsoleOutput)
        over its API, which nobody on the network path to the instance can answer for. [] until they are there."""
        answer = self.ec2.call('get_console_output', InstanceId=resource.id)
        return hostkeys.console_host_keys(answer.get('Output'))

    def native_running(self, native):
        return native['State']['Name'] in ('pending', 'running')

    def addresses(self, resource):
        instance = self._describe(resource.id)
        if instance is None or instance['State']['Name'] != 'running':
            return []
        kind = self.launch.get('address') or 'public'
        found = address_of(instance, kind)
        return [('eth0', 'inet', found)] if found else []

    def list(self, every_kind=False):
        """Every live instance of the region that carries a tag of ours (``ephemera:*``, filtered by EC2): a complete
        read, or IncompleteInventory. Each entry holds the instance as read (``resource``, for :meth:`find_listed`)."""
        out = []
        for instance in self.ec2.describe_instances(Filters=[{'Name': 'tag-key', 'Values': [TAG_PREFIX + '*']}]):
            state = (instance.get('State') or {}).get('Name')
            if state in GONE:
                continue
            tags = tags_of(instance)
            keys = sorted(k for k in tags)
            if any(k.startswith(TAG_PREFIX) for k in keys):
                keys.append('ephemera')
            out.append(cloud.listed(instance['InstanceId'], self.region, KIND, tags.get('Name'), state,
                                    tags.get(TAG_SCOPE), keys, self._resource(instance)))
        return out

    # -------------------------------------------------------------------------------- acting

    def _act(self, action, operation, resource, key, **args):
        answer = self.ec2.call(operation, acts=True, InstanceIds=[resource.id], **args)
        changes = [c for c in answer.get(key) or [] if c.get('InstanceId') == resource.id]
        if len(changes) != 1:
            raise base.UnknownOutcome('%s did not acknowledge %s; look at it before repeating the call.'
                                      % (operation, self.label(resource.id, self.region)))
        return task_handle(action, self.region, resource.id)

    def act_start(self, resource):
        return self._act('start', 'start_instances', resource, 'StartingInstances')

    def act_shutdown(self, resource):
        return self._act('stop', 'stop_instances', resource, 'StoppingInstances')

    def act_stop(self, resource):
        return self._act('stop', 'stop_instances', resource, 'StoppingInstances', Force=True)

    def delete_blocker(self, resource, source=None):
        try:
            answer = self.ec2.call('describe_instance_attribute', InstanceId=resource.id,
                                   Attribute='disableApiTermination')
        except base.ProviderError:
            return None
        if (answer.get('DisableApiTermination') or {}).get('Value'):
            return ('%s has termination protection; AWS refuses to terminate it. Turn it off (aws ec2 '
                    'modify-instance-attribute --instance-id %s --no-disable-api-termination) if it really should go, '
                    'then destroy again.' % (self.label(resource.id, self.region), resource.id))
        return None

    def delete(self, resource):
        try:
            return self._act('terminate', 'terminate_instances', resource, 'TerminatingInstances')
        except base.NotFound:
            learned = self.learned.get(resource.id)
            if learned is not None and time.time() - learned < self.visibility_window:
                raise base.Transient('%s is not visible yet; it cannot be terminated before it is.'
                                     % self.label(resource.id, self.region))
            raise

    # --------------------------------------------------------------------------------- tasks

    def _look(self, task):
        """(state or None for NotFound, the instance or None) of a handle's instance."""
        action, region, instance_id, at = parse_handle(task)
        try:
            found = self.ec2.describe_instances(InstanceIds=[instance_id])
        except base.NotFound:
            return None, None
        found = [i for i in found if i.get('InstanceId') == instance_id]
        return ((found[0].get('State') or {}).get('Name'), found[0]) if found else (None, None)

    def _verdict(self, task, state):
        """'done', 'running' or a failure message of a handle for the state (None: NotFound) read now."""
        action, region, instance_id, at = parse_handle(task)
        invisible = state is None
        fresh = time.time() - at < self.visibility_window
        if action == 'terminate':
            if state == 'terminated' or (invisible and not fresh):
                return 'done'
            return 'running'
        want = {'run': 'running', 'start': 'running', 'stop': 'stopped'}[action]
        if state == want:
            return 'done'
        if invisible:
            return 'running' if fresh else '%s did not become visible within %d s of its id being learned.' % (
                self.label(instance_id, region), self.visibility_window)
        if state in ('pending', 'stopping') or (action == 'stop' and state == 'running'):
            return 'running'
        return '%s is %s, not %s.' % (self.label(instance_id, region), state, want)

    def task_look(self, handle):
        action, region, ident, at = parse_handle(handle)
        if action == 'unimage':
            return self._image_gone(ident), None
        if action == 'image':
            state, image = self._image_state(ident)
            if state == 'available':
                return 'done', (state, None)
            if state == 'pending' or (state is None and time.time() - at < self.visibility_window):
                return 'running', (state, None)
            return ('Image %s is %s, not available. AWS says: %s' % (
                ident, state or 'not there', ((image or {}).get('StateReason') or {}).get('Message') or 'nothing'),
                (state, None))
        state, instance = self._look(handle)
        return self._verdict(handle, state), (state, instance)

    def task_failure(self, handle, verdict, detail):
        reason = ((detail[1] or {}).get('StateReason') or {}).get('Message')
        return verdict + (' AWS says: %s' % reason if reason else ''), [reason] if reason else []

    def task_what(self, handle):
        action, region, instance_id, at = parse_handle(handle)
        if action in ('image', 'unimage'):
            return '%s of image %s in %s' % ('the creation' if action == 'image' else 'the removal', instance_id,
                                             region)
        return 'the %s of %s' % (action, self.label(instance_id, region))

    def task_timeout(self, handle, seconds, detail):
        action, region, instance_id, at = parse_handle(handle)
        if action in ('image', 'unimage'):
            return ('Image %s in %s is not %s after %d s. Look at it in EC2 (describe-images, describe-snapshots), '
                    'then run the fork again: it looks for the image first.'
                    % (instance_id, region, 'available' if action == 'image' else 'gone', seconds))
        return ('%s is %s after %d s; asked to %s it. Check its state and state reason in EC2 (describe-instances), '
                'then run again: the next run looks at it again.'
                % (self.label(instance_id, region), (detail or (None,))[0] or 'not visible', seconds, action))

    def wait(self, handle, timeout):
        action, region, instance_id, at = parse_handle(handle)
        if action not in ('image', 'unimage'):
            self.learned.setdefault(instance_id, at)
        return super().wait(handle, timeout)


def user_data(public_key):
    """cloud-config user data that authorizes ``public_key`` for the default user and root."""
    key = ' '.join(str(public_key).split())
    text = '#cloud-config\nssh_authorized_keys:\n  - %s\ndisable_root: false\n' % key
    return text if len(text) < 16384 else base64.b64encode(text.encode('utf-8')).decode('ascii')
