"""The folder provider's part of a try-out cloud (tests/providerkit): a folder, <state>/folder, whose machines (each a
directory with its machine.json, written by the provider) get guests of the cloud's own machinery, as the fakes'
machines do. There is no API: the part reads the folder on every tick, gives a running machine an address of the
cloud's public range (written to the machine's ``address`` file) and takes it back when the machine is gone. What
cloud.json says of it is its `folder` key; its control operations are CloudSite.op_folder's."""

import json
import os

from .machines import CloudPart, KeyedAddresses, MachineGuests

IMAGE = 'plain'
PREFIX = 'folder-'


class Folder:
    """The folder: its machines as the provider wrote them, and their addresses."""

    def __init__(self, path, addresses):
        self.path = path
        self.addresses = addresses
        self.given = {}
        for sub in ('images', 'machines'):
            os.makedirs(os.path.join(path, sub), exist_ok=True)
        with open(os.path.join(path, 'images', IMAGE), 'w', encoding='utf-8') as out:
            out.write('a machine with /workspace and the keys it is made with\n')

    def machines(self):
        """{id: machine.json} of every machine in the folder (one being written or deleted is not there yet, or any
        more: the provider renames them into and out of place)."""
        out = {}
        top = os.path.join(self.path, 'machines')
        for name in sorted(os.listdir(top)):
            if name.startswith('.'):
                continue
            try:
                with open(os.path.join(top, name, 'machine.json'), encoding='utf-8') as src:
                    out[name] = json.load(src)
            except (OSError, ValueError):
                continue
        return out

    def address(self, machine_id):
        """The machine's address, given at its first look and written to its directory."""
        if machine_id not in self.given:
            self.given[machine_id] = self.addresses.allocate(machine_id)
        directory = os.path.join(self.path, 'machines', machine_id)
        path = os.path.join(directory, 'address')
        if os.path.isdir(directory) and not os.path.exists(path):
            staged = os.path.join(directory, '.address')
            with open(staged, 'w', encoding='utf-8') as out:
                out.write(self.given[machine_id] + '\n')
            os.replace(staged, path)
        return self.given[machine_id]

    def forget(self, present):
        """Take back the addresses of the machines that are gone."""
        for machine_id in sorted(set(self.given) - set(present)):
            self.addresses.release(machine_id)
            del self.given[machine_id]

    def stop(self):
        return None


class FolderGuests(MachineGuests):
    """Guests of the folder's machines, keyed by the machines' ids."""

    known_hosts_name = 'folder_known_hosts'

    def machines(self):
        found = self.fake.machines()
        self.fake.forget(found)
        out = {}
        for machine_id, data in found.items():
            address = self.fake.address(machine_id)
            out[machine_id] = {'id': machine_id, 'address': address, 'keys': data.get('keys') or [],
                               'running': bool(data.get('running'))}
        return out

    def view_id(self, item):
        return item['id']


class FolderPart(CloudPart):
    """Started and stopped by CloudSite; ticked with the fleet."""

    title = 'folder'

    async def start(self, public_key):
        path = os.path.join(self.site.options.state_dir, 'folder')
        self.fake = Folder(path, KeyedAddresses(self.site.fleet.public_pool, PREFIX))
        self.guests = FolderGuests(self.site, self.fake)
        self.info = {'path': path, 'image': IMAGE, 'ssh_public_key': public_key,
                     'guest_prefix': os.path.join(self.guests.dir, '{vmid}', 'root'),
                     'ssh_known_hosts': self.guests.known_hosts}
        return self.info

    def op_machines(self):
        """The folder's machines, each with its guest's state."""
        guests = self.guests.view()
        out = []
        for machine_id, data in self.fake.machines().items():
            data.update(guests.get(machine_id, {'sshd': 'stopped', 'sshd_pid': None}))
            out.append(data)
        return out
