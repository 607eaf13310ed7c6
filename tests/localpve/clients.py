"""Clients of a running cluster, from the dict of its cluster.json: the Proxmox API and SSH to guests."""

import collections
import time

import paramiko
from proxmoxer import ProxmoxAPI


Workspace = collections.namedtuple('Workspace', 'vmid node address')


def proxmox(info, via='proxy', auth='password', timeout=10):
    """A proxmoxer ProxmoxAPI: via 'proxy' (faults apply) or 'api' (raw); auth 'password' or 'token'."""
    host, port = (info['proxy_host'], info['proxy_port']) if via == 'proxy' else (info['api_host'], info['api_port'])
    if auth == 'token':
        return ProxmoxAPI(host, port=port, user=info['user'], token_name=info['token_name'],
                          token_value=info['token_secret'], verify_ssl=info['ca_file'], timeout=timeout)
    return ProxmoxAPI(host, port=port, user=info['user'], password=info['password'], verify_ssl=info['ca_file'],
                      timeout=timeout)


def wait_task(api, upid, timeout=60):
    """Poll a task until it stops; returns its status (exitstatus 'OK' or the error)."""
    node = upid.split(':')[1]
    deadline = time.monotonic() + timeout
    while True:
        status = api.nodes(node).tasks(upid).status.get()
        if status['status'] == 'stopped':
            return status
        if time.monotonic() > deadline:
            raise TimeoutError('task {0} still running after {1}s'.format(upid, timeout))
        time.sleep(0.02)


def guest_address(api, node, vmid):
    """The IPv4 address /interfaces reports for the container's first NIC (not lo), or None."""
    for nic in api.nodes(node).lxc(vmid).interfaces.get() or []:
        if nic['name'] == 'lo':
            continue
        for entry in nic.get('ip-addresses', []):
            if entry['ip-address-type'] == 'inet':
                return entry['ip-address']
    return None


def ssh(info, address, timeout=10.0):
    """A paramiko SSHClient logged in to the guest at address with the cluster's key. The timeout bounds the TCP
    connection, the banner, the key exchange and the login each: a refused connection fails at once whatever it is,
    and on a loaded host the key exchange alone can take more than a second."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(address, port=info['ssh_port'], username=info['ssh_user'], key_filename=info['ssh_private_key'],
                   timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, look_for_keys=False,
                   allow_agent=False)
    return client


def ssh_run(client, command):
    """Run command over an SSHClient: (exit status, stdout, stderr); the status is -1 if the connection
    dropped before the command ended."""
    stdin, stdout, stderr = client.exec_command(command)
    stdin.close()
    out, err = stdout.read(), stderr.read()
    return stdout.channel.recv_exit_status(), out, err


def clone_workspace(api, info, hostname='ws', start=True, vmid=None, description=None):
    """Clone the template into the pool (linked) and start it; returns a Workspace (vmid, node, address
    or None). Task failures raise RuntimeError with PVE's exit status."""
    node = info['template_node']
    vmid = int(vmid if vmid is not None else api.cluster.nextid.get())
    upid = api.nodes(node).lxc(info['template_vmid']).clone.post(newid=vmid, hostname=hostname, full=0,
                                                                 pool=info['pool'], description=description)
    for step in ('clone', 'start'):
        status = wait_task(api, upid)
        if status.get('exitstatus') != 'OK':
            raise RuntimeError('{0} of CT {1}: {2}'.format(step, vmid, status.get('exitstatus')))
        if step == 'start' or not start:
            break
        upid = api.nodes(node).lxc(vmid).status.start.post()
    return Workspace(vmid, node, guest_address(api, node, vmid) if start else None)
