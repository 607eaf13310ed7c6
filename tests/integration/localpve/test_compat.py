"""Other Proxmox VE clients work with the try-out cluster: plain proxmoxer and community.proxmox's modules."""

import json

from tests.ansible_run import run_ansible
from tests.localpve import guest_address, proxmox, ssh, wait_task

PLAYBOOK = '''
- name: A container's life with community.proxmox
  hosts: localhost
  gather_facts: false
  module_defaults:
    group/community.proxmox.proxmox:
      api_host: "{{ cluster.proxy_host }}"
      api_port: "{{ cluster.proxy_port }}"
      api_user: "{{ cluster.user }}"
      api_token_id: "{{ cluster.token_name }}"
      api_token_secret: "{{ cluster.token_secret }}"
      validate_certs: true
  tasks:
    - name: Clone the template
      community.proxmox.proxmox:
        vmid: "{{ vmid }}"
        node: "{{ cluster.template_node }}"
        clone: "{{ cluster.template_vmid }}"
        clone_type: linked
        hostname: compat
        pool: "{{ cluster.pool }}"
        timeout: 30
      register: cloned
    - name: Start it
      community.proxmox.proxmox:
        vmid: "{{ vmid }}"
        node: "{{ cluster.template_node }}"
        state: started
        timeout: 30
      register: started
    - name: Read its interfaces
      community.proxmox.proxmox_vm_info:
        vmid: "{{ vmid }}"
        type: lxc
        network: true
      register: info
    - name: Stop it
      community.proxmox.proxmox:
        vmid: "{{ vmid }}"
        node: "{{ cluster.template_node }}"
        state: stopped
        timeout: 30
      register: stopped
    - name: Delete it
      community.proxmox.proxmox:
        vmid: "{{ vmid }}"
        node: "{{ cluster.template_node }}"
        state: absent
        purge: true
        timeout: 30
      register: deleted
    - name: Report
      ansible.builtin.debug:
        msg: "{{ {'cloned': cloned, 'started': started, 'info': info, 'stopped': stopped, 'deleted': deleted} | to_json }}"
'''


def test_proxmoxer_clone_start_interfaces_stop_delete(localpve):
    info = localpve.info
    api = proxmox(info, auth='token')
    vmid = int(api.cluster.nextid.get())
    node = info['template_node']
    upid = api.nodes(node).lxc(info['template_vmid']).clone.post(newid=vmid, hostname='plain', full=0)
    assert upid.split(':')[5:7] == ['vzclone', str(info['template_vmid'])]
    assert wait_task(api, upid)['exitstatus'] == 'OK'
    assert wait_task(api, api.nodes(node).lxc(vmid).status.start.post())['exitstatus'] == 'OK'
    address = guest_address(api, node, vmid)
    ssh(info, address).close()
    assert wait_task(api, api.nodes(node).lxc(vmid).status.shutdown.post(timeout=10))['exitstatus'] == 'OK'
    assert api.nodes(node).lxc(vmid).interfaces.get() is None
    assert wait_task(api, api.nodes(node).lxc(vmid).delete(purge=1))['exitstatus'] == 'OK'
    assert vmid not in [r['vmid'] for r in api.cluster.resources.get(type='vm')]


def test_community_proxmox_modules(localpve, tmp_path):
    info = localpve.info
    vmid = int(proxmox(info).cluster.nextid.get())
    book = tmp_path / 'compat.yml'
    book.write_text(PLAYBOOK)
    run = run_ansible(['ansible-playbook', str(book), '-e', json.dumps({'cluster': info, 'vmid': vmid})], timeout=300,
                      callback='ansible.builtin.json', env={'REQUESTS_CA_BUNDLE': info['ca_file']})
    assert run.ok, run.output[-6000:]
    tasks = run.results()
    report = json.loads(tasks[-1][1]['msg'])
    assert all(report[step]['changed'] for step in ('cloned', 'started', 'stopped', 'deleted'))
    proxmox_vms = report['info']['proxmox_vms']
    assert [vm['vmid'] for vm in proxmox_vms] == [vmid]
    eth0 = {nic['name']: nic for nic in proxmox_vms[0]['network']}['eth0']
    address = eth0['ip-addresses'][0]
    assert eth0['inet'] == '{0}/{1}'.format(address['ip-address'], address['prefix'])
    assert address['ip-address'].startswith(info['api_host'].rsplit('.', 1)[0] + '.')
    assert vmid not in [r['vmid'] for r in proxmox(info).cluster.resources.get(type='vm')]
