"""The destroy flow's verdict on every answer a Hetzner DELETE /servers/{id} can get, against the Hetzner Cloud fake
(hcloud making the requests): each rejection status retires only that attempt's dispatch (a failure kept as debt,
or for 409 conflict and 423 locked a fresh read and a new recorded dispatch in the same run), each uncertain answer
(408, 422, 5xx, a timeout, a malformed action, a lost answer) never does: the run looks before anything else. The
end-to-end runs of one rejection and one uncertain status through the shipped playbooks are in
tests/integration/hetzner/test_hetzner_playbooks.py."""

# pylint: disable=redefined-outer-name
import pytest

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import client as hclient
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.hetzner import provider as hprovider

import test_hetzner_destroy as flow_site
from test_hetzner_destroy import PUBLIC_KEY, SECRET, TOKEN, created, destroy

# The fake (one per module) and a journal, provider and SSH key per test, as test_hetzner_destroy.py has them.
fake = flow_site.fake
site = flow_site.site

# (status, error code, the seam's kind). The reference names no code for 405 and 412: any code there is a rejection.
REJECTIONS = [(400, 'invalid_input', base.InvalidRequest), (401, 'unauthorized', base.InvalidRequest),
              (403, 'forbidden', base.Refused), (405, 'method_not_allowed', base.Refused),
              (410, 'deprecated_api_endpoint', base.Refused), (412, 'precondition_failed', base.Refused),
              (429, 'rate_limit_exceeded', base.Transient)]
LOCKS = [(409, 'conflict'), (423, 'locked')]
UNCERTAIN_STATUSES = [408, 422, 500, 502, 503, 504]


def actions(site, name):
    return [e['action'] for e in site['journal'].events(name)]


def dispatches(site, name):
    return [e for e in site['journal'].events(name) if e['action'] == 'delete' and e['kind'] == 'dispatched']


def deletes_sent(fake, server_id):
    return len([r for r in fake.requests if r['method'] == 'DELETE' and r['path'] == '/servers/%s' % server_id])


def ready_to_delete(site, name):
    server_id = created(site, name)
    destroy(site, name, ('mark', 'shutdown', 'stop'))
    return server_id


@pytest.mark.parametrize('status,code,kind', REJECTIONS)
def test_a_rejected_delete_retires_its_attempt(site, status, code, kind):
    name = 'hz-rej-%d' % status
    server_id = ready_to_delete(site, name)
    site['fake'].add_rule('error', 'DELETE', '/servers/%s' % server_id, status=status, code=code)
    with pytest.raises(kind):
        destroy(site, name, ('delete',))
    events = actions(site, name)
    assert 'delete_rejected' in events and 'delete_outcome_unknown' not in events
    assert site['provider'].find(server_id) is not None and site['fake'].deleting == {}
    assert site['journal'].cleanup_debts(name), 'a rejected delete keeps the cleanup debt'
    # The next attempt reads ownership again and records a dispatch of its own; it completes.
    sent = len(dispatches(site, name))
    destroy(site, name, ('delete', 'finish'))
    assert len(dispatches(site, name)) == sent + 1
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace(name)['status'] == 'destroyed'


@pytest.mark.parametrize('status,code', LOCKS)
def test_a_locked_delete_is_retried_with_a_new_dispatch(site, status, code):
    name = 'hz-lock-%d' % status
    server_id = ready_to_delete(site, name)
    site['fake'].add_rule('error', 'DELETE', '/servers/%s' % server_id, status=status, code=code)
    destroy(site, name, ('delete', 'finish'), lock_timeout=10)
    events = actions(site, name)
    assert 'delete_locked' in events and 'delete_outcome_unknown' not in events
    assert len(dispatches(site, name)) == 2 and deletes_sent(site['fake'], server_id) == 2
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace(name)['status'] == 'destroyed'


@pytest.mark.parametrize('status', UNCERTAIN_STATUSES)
def test_an_uncertain_status_never_retires_the_dispatch(site, status):
    name = 'hz-unc-%d' % status
    server_id = ready_to_delete(site, name)
    site['fake'].add_rule('error', 'DELETE', '/servers/%s' % server_id, status=status)
    destroy(site, name, ('delete', 'finish'))
    events = actions(site, name)
    # Looked first: the server was still there and not deleting, so (ownership read again) a new dispatch was sent.
    assert 'delete_outcome_unknown' in events and 'delete_rejected' not in events
    assert events.index('delete_outcome_unknown') < len(events) - 1
    assert len(dispatches(site, name)) == 2 and deletes_sent(site['fake'], server_id) == 2
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace(name)['status'] == 'destroyed'


@pytest.mark.parametrize('fault', ['malformed', 'drop'])
def test_an_answer_that_acted_unseen_is_waited_out_not_sent_again(site, fault):
    """The DELETE acted and its answer was lost or was not an action: the run looks, finds the server deleting,
    waits for its 404 and never sends a second DELETE."""
    name = 'hz-acted-%s' % fault
    server_id = ready_to_delete(site, name)
    site['fake'].add_rule(fault, 'DELETE', '/servers/%s' % server_id)
    destroy(site, name, ('delete', 'finish'))
    events = actions(site, name)
    assert 'delete_outcome_unknown' in events and 'delete_rejected' not in events
    assert len(dispatches(site, name)) == 1 and deletes_sent(site['fake'], server_id) == 1
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace(name)['status'] == 'destroyed'


def test_a_timed_out_delete_is_looked_at_before_it_is_sent_again(site):
    """No answer within the request timeout (the cloud takes the request late): never a rejection; the run looks
    first, and only a server still there and not deleting gets a new recorded dispatch."""
    name = 'hz-timeout'
    server_id = ready_to_delete(site, name)
    api = hclient.HCloud(TOKEN, site['fake'].url, request_timeout=1, retry_timeout=15)
    site['provider'] = hprovider.HetznerProvider(api, SECRET, 'fsn1', {
        'server_type': 'cx22', 'ssh_public_key': PUBLIC_KEY, 'networks': [], 'labels': {}}, action_timeout=10)
    site['fake'].add_rule('delay', 'DELETE', '/servers/%s' % server_id, seconds=2)
    destroy(site, name, ('delete', 'finish'))
    events = [(e['kind'], e['action']) for e in site['journal'].events(name)]
    assert ('observed', 'delete_rejected') not in events
    unknown = events.index(('observed', 'delete_outcome_unknown'))
    sent = [i for i, e in enumerate(events) if e == ('dispatched', 'delete')]
    # The first dispatch before the verdict; any later one only after the look the verdict asked for.
    assert sent[0] < unknown and all(i > unknown for i in sent[1:])
    assert site['provider'].find(server_id) is None
    assert site['journal'].get_workspace(name)['status'] == 'destroyed'
