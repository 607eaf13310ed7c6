"""The ARM client's reading of answers: azure-mgmt-compute's own pipeline and transport make the requests over HTTPS,
a real local server answers in Resource Manager's place with more than any answer holds. Only the token is given
here (a fixed one: the identity platform is not what is tested)."""

import time

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.azure import client as azclient
from tests.floodserver import MIB, FloodServer

pytest.importorskip('azure.mgmt.compute')
SUB = '00000000-0000-0000-0000-000000000001'


class FixedToken:
    def get_token(self, *scopes, **kwargs):
        from azure.core.credentials import AccessToken
        return AccessToken('fixed-token', int(time.time()) + 3600)


def test_an_answer_larger_than_the_cap_is_not_read_and_fails_clearly(tmp_path):
    """48 MiB (more than twice CLOUD_ANSWER_MAX) to a GET and to a PUT: the client stops reading at the cap and fails
    saying what was wrong; the read is not repeated (a repeat would get the same), the PUT is an unknown outcome."""
    from azure.mgmt.compute import ComputeManagementClient
    assert answers.CLOUD_ANSWER_MAX == 16 * MIB
    with FloodServer(48 * MIB, key='name', tls_dir=tmp_path) as server:
        compute = ComputeManagementClient(FixedToken(), SUB, base_url=server.url, retry_total=0,
                                          credential_scopes=[azclient.SCOPE], connection_verify=server.ca_file)
        arm = azclient.Arm(SUB, compute, compute)
        path = '/subscriptions/%s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/ws-1' % SUB
        with pytest.raises(base.Refused) as info:
            arm.send('GET', path, '2024-07-01')
        with pytest.raises(base.UnknownOutcome) as acted:
            arm.send('PUT', path, '2024-07-01', body={'location': 'westeurope'}, acts=True)
        assert server.settled(2)
    assert (server.hung_up, server.completed) == (2, 0)
    assert [method for method, dummy in server.requests] == ['GET', 'PUT']  # neither repeated
    message = str(info.value)
    assert message.startswith('GET %s: the answer of %s%s is larger than 16 MiB' % (path, server.url, path)), message
    assert 'azure_endpoint_url' in message and 'look before repeating it' in str(acted.value)
