"""Settings of the request: static addresses leased from a range (never twice), full clones instead of linked ones."""

import ipaddress
import json

from .createrun import WORKING_AGENT


def test_static_addresses_are_leased_once_each_and_a_full_clone_is_a_switch(controller, repo, tmp_path):
    base = ipaddress.ip_address(controller.info['api_host'])
    # Two addresses the cluster's own IPAM does not hand out first (it starts at .10).
    first, last = base + 199, base + 200
    names = ['static-linked', 'static-full']
    hosts = {'static-linked': {'workspace': 'static-linked'},
             # A storage is refused for a linked clone: the run succeeds only if the clone was made a full one.
             'static-full': {'workspace': 'static-full', 'ephemera_full_clone': True,
                             'ephemera_storage': controller.info['storage']}}
    inventory = tmp_path / 'hosts.json'
    inventory.write_text(json.dumps({'workspaces': {'hosts': hosts, 'vars': {
        'ansible_connection': 'local', 'ansible_python_interpreter': '{{ ansible_playbook_python }}'}}}))
    run = controller.create({'repo': repo.url, 'purpose': 'Add a farewell next to greet', 'agent': 'worker',
                             'ephemera_agents': {'worker': WORKING_AGENT}, 'ephemera_address_mode': 'static',
                             'ephemera_address_range': '%s-%s' % (first, last)},
                            inventory=str(inventory), target='workspaces', forks=2)
    assert run.ok, run.explain()
    records = {name: controller.workspace(name) for name in names}
    assert sorted(ws['address'] for ws in records.values()) == [str(first), str(last)]
    with controller.journal() as journal:
        leases = {lease['address']: lease['workspace'] for lease in journal.address_leases()}
    assert leases == {ws['address']: name for name, ws in records.items()}
    for name, ws in records.items():
        assert ws['status'] == 'ready'
        config = controller.config(ws['vmid'])
        assert 'ip=%s/24' % ws['address'] in config['net0']
        # The template's NIC settings stay (its firewall flag); the address is the only change.
        assert 'firewall=1' in config['net0'] and 'hwaddr=' in config['net0']
    for name, full in (('static-linked', 0), ('static-full', 1)):
        # (Two at once may meet on one candidate VMID: the second then clones again to another.)
        assert set(e['detail']['full'] for e in controller.events(name) if e['action'] == 'clone'
                   and e['kind'] == 'dispatched') == {full}
    assert records['static-full']['params']['full_clone'] is True
