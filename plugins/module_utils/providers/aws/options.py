# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of doc fragment ephemera.workspaces.aws: how a module reaches EC2 and launches instances there. No SDK
is imported here."""

from ansible.module_utils.basic import env_fallback

# How messages name a resource of this provider: (what, where) (base.resource_label, Provider.label).
RESOURCE_LABEL = ('instance {id}', ' in {location}')
# An EC2 client serves one region (Provider.location_option).
LOCATION_OPTION = 'aws_region'


def aws_argument_spec():
    """The AWS options (credentials: boto3's own environment variables and profiles)."""
    return dict(
        aws_region=dict(type='str', fallback=(env_fallback, ['AWS_REGION', 'AWS_DEFAULT_REGION'])),
        aws_profile=dict(type='str', fallback=(env_fallback, ['AWS_PROFILE'])),
        aws_access_key_id=dict(type='str', no_log=True),
        aws_secret_access_key=dict(type='str', no_log=True),
        aws_session_token=dict(type='str', no_log=True),
        aws_endpoint_url=dict(type='str', fallback=(env_fallback, ['EPHEMERA_AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL'])),
        aws_retry_timeout=dict(type='int', default=60),
        aws_visibility_window=dict(type='int', default=60),
        aws_absence_window=dict(type='int', default=1800),
        aws_instance_type=dict(type='str', default='t3.micro'),
        aws_subnet_id=dict(type='str'),
        aws_security_group_ids=dict(type='list', elements='str', default=[]),
        aws_key_name=dict(type='str', no_log=False),
        aws_ssh_public_key=dict(type='str', no_log=False),
        aws_address=dict(type='str', default='public', choices=['public', 'private']),
        aws_tags=dict(type='dict', default={}),
    )


# The options this provider adds to a module (registry.provider_argument_spec).
argument_spec = aws_argument_spec
