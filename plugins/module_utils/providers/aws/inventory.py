# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the inventory plugin needs of AWS (base.InventoryHook): one tag-filtered DescribeInstances per region, and
which options an error is about. Neither boto3 nor the provider's code is imported before it connects."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base


class AwsInventory(base.InventoryHook):

    name = 'aws'
    scope_option = 'aws_regions'
    sdk = 'boto3 on the controller (pip install boto3)'
    needs = ' The inventory needs ec2:DescribeInstances.'

    def provider_class(self):
        # pylint: disable=import-outside-toplevel
        from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.aws.provider import AwsProvider
        return AwsProvider

    def params(self, option, scope):
        params = dict(aws_region=scope)
        params.update((name, option(name)) for name in ('aws_profile', 'aws_access_key_id', 'aws_secret_access_key',
                                                        'aws_session_token', 'aws_endpoint_url', 'aws_retry_timeout'))
        return params

    def where(self, option, scope):
        given = [n for n in ('aws_profile', 'aws_access_key_id', 'aws_endpoint_url') if option(n)]
        return '%s (region %s)' % ('options %s' % ', '.join(given) if given else 'the AWS credentials of the environment',
                                   scope)


HOOK = AwsInventory()
