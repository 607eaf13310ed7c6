# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment:

    DOCUMENTATION = r'''
options:
  aws_region:
    description:
      - The EC2 region (V(eu-central-1)). With O(provider=aws) required, here or in E(AWS_REGION)
        (or E(AWS_DEFAULT_REGION)).
      - An unknown region is refused before anything is sent.
    type: str
  aws_profile:
    description:
      - The profile of the AWS configuration files to take credentials from. If not set, E(AWS_PROFILE) is used.
      - Without a profile and without O(aws_access_key_id), boto3 looks where it always does
        (E(AWS_ACCESS_KEY_ID), E(AWS_SECRET_ACCESS_KEY), E(AWS_SESSION_TOKEN), the default profile, an instance
        role).
    type: str
  aws_access_key_id:
    description:
      - Access key id. Prefer E(AWS_ACCESS_KEY_ID) or a profile; never recorded in the journal or shown.
    type: str
  aws_secret_access_key:
    description:
      - Secret access key of O(aws_access_key_id). Prefer E(AWS_SECRET_ACCESS_KEY) or a profile.
    type: str
  aws_session_token:
    description:
      - Session token of temporary credentials. Prefer E(AWS_SESSION_TOKEN) or a profile.
    type: str
  aws_endpoint_url:
    description:
      - The EC2 endpoint to talk to instead of AWS's own (a private endpoint, or the try-out cloud of the tests).
      - If not set, E(EPHEMERA_AWS_ENDPOINT_URL), then E(AWS_ENDPOINT_URL) is used.
    type: str
  aws_retry_timeout:
    description:
      - Seconds for which throttling (RequestLimitExceeded, Throttling) and server errors of one call are ridden
        out with backoff before the call fails as transient.
    type: int
    default: 60
  aws_visibility_window:
    description:
      - Seconds after an instance id was learned during which EC2 answering InvalidInstanceID.NotFound for it means
        "not visible yet", never "absent".
    type: int
    default: 60
  aws_absence_window:
    description:
      - Seconds after a RunInstances whose answer was lost during which a complete, empty inventory does not yet
        prove that no instance was made. A destroy in that time keeps cleanup debt and is retried.
    type: int
    default: 1800
  aws_instance_type:
    description:
      - The instance type of new workspaces. Checked before anything is launched.
    type: str
    default: t3.micro
  aws_subnet_id:
    description:
      - The subnet new workspaces are launched in; the account's default subnet if not set.
    type: str
  aws_security_group_ids:
    description:
      - Security groups of new workspaces (they must let the controller reach port 22).
    type: list
    elements: str
    default: []
  aws_key_name:
    description:
      - The EC2 key pair new workspaces are launched with (its private key is the create's C(ssh_private_key)).
      - One of O(aws_key_name) and O(aws_ssh_public_key) is needed to create a workspace.
    type: str
  aws_ssh_public_key:
    description:
      - A public key put into new workspaces through cloud-config user data, instead of a key pair.
    type: str
  aws_address:
    description:
      - Which IPv4 address the controller reaches a workspace at, read from the instance's documented fields
        (PublicIpAddress or PrivateIpAddress, else those of its network interfaces).
    type: str
    choices: [public, private]
    default: public
  aws_tags:
    description:
      - More tags for new instances and their volumes. Keys starting with C(aws:) or C(ephemera:), and C(Name), are
        refused; values take at most 256 letters, digits, spaces and C(+-=._:/@).
    type: dict
    default: {}
requirements:
  - boto3 >= 1.28
notes:
  - boto3 is imported only with O(provider=aws).
  - Credentials are read the AWS way and never recorded in the journal, the events or the task results.
  - docs/aws.md of the collection lists the IAM actions the AWS provider uses.
'''

    # The options, notes and requirements of the workspaces inventory plugin for this provider.
    INVENTORY = r'''
requirements:
  - boto3 >= 1.28 (only when the journal holds AWS workspaces or O(aws_regions) is set)
notes:
  - AWS workspaces (made with O(ephemera.workspaces.workspace_create#module:provider=aws)) are hosts beside the
    Proxmox ones, with C(ephemera_provider), C(ephemera_region) and C(ephemera_instance_id), in the groups
    C(provider_aws) and C(region_<region>). Their live state comes from one paginated, tag-filtered
    C(DescribeInstances) per region, whose tags carry the ownership markers, so no instance costs a read of its
    own. A region that cannot be read completely leaves its workspaces with the journal's view and a warning (an
    error with O(strict)); refused credentials are an error.
options:
  aws_regions:
    description:
      - AWS regions to read besides those the journal's AWS workspaces are in. Each region read costs one
        C(DescribeInstances) (all its pages), filtered to instances that carry a tag of ours (C(ephemera:*)); an
        instance there that no live workspace accounts for is an orphan.
      - Without AWS workspaces in the journal and without this option, AWS is not asked at all.
    type: list
    elements: str
    default: []
  aws_profile:
    description: The AWS profile to read credentials from. Without it (and E(AWS_PROFILE)), boto3 looks where it always does.
    type: str
    env:
      - name: AWS_PROFILE
  aws_access_key_id:
    description: Access key id; prefer E(AWS_ACCESS_KEY_ID) or a profile, which boto3 reads itself.
    type: str
  aws_secret_access_key:
    description: Secret access key of O(aws_access_key_id); prefer E(AWS_SECRET_ACCESS_KEY) or a profile.
    type: str
  aws_session_token:
    description: Session token of temporary credentials; prefer E(AWS_SESSION_TOKEN) or a profile.
    type: str
  aws_endpoint_url:
    description: The EC2 endpoint to read instead of AWS's own (a private endpoint, the try-out cloud).
    type: str
    env:
      - name: EPHEMERA_AWS_ENDPOINT_URL
      - name: AWS_ENDPOINT_URL
  aws_retry_timeout:
    description: Seconds for which throttling and server errors of one read are ridden out with backoff.
    type: int
    default: 60
'''
