"""The Compute Engine client's reading of answers: google-cloud-compute's own REST transports make the requests, a
real local server answers in the API's place with more than any answer holds."""

import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import answers, base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.gcp.client import Compute, credentials
from tests.floodserver import MIB, FloodServer

pytest.importorskip('google.cloud.compute_v1')


def test_an_answer_larger_than_the_cap_is_not_read_and_fails_clearly():
    """48 MiB (more than twice CLOUD_ANSWER_MAX) to a get and to an insert: the client stops reading at the cap and
    fails saying what was wrong; the read is not repeated (a repeat would get the same), the insert is an unknown
    outcome."""
    assert answers.CLOUD_ANSWER_MAX == 16 * MIB
    with FloodServer(48 * MIB, key='name') as server:
        compute = Compute('proj', 'europe-west1-b', credentials('anonymous'), endpoint=server.url, retry_timeout=30)
        with pytest.raises(base.Refused) as info:
            compute.call('instances.get', compute.instances.get, project='proj', zone='europe-west1-b',
                         instance='ws-1')
        types = compute.types
        with pytest.raises(base.UnknownOutcome) as acted:
            compute.call('instances.insert', compute.instances.insert_unary, acts=True, project='proj',
                         zone='europe-west1-b', instance_resource=types.Instance(name='ws-1'))
        assert server.settled(2)
    assert (server.hung_up, server.completed) == (2, 0)
    assert [method for method, dummy in server.requests] == ['GET', 'POST']  # neither repeated
    message = str(info.value)
    assert message.startswith('instances.get: the answer of %s/compute/v1/projects/proj/zones/europe-west1-b/instances/'
                              'ws-1 is larger than 16 MiB' % server.url), message
    assert 'gcp_endpoint_url' in message and 'look before repeating it' in str(acted.value)
