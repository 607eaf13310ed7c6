"""Guest addresses: a loopback range handed out as static IPAM pins or as DHCP leases."""

import ipaddress
import re
import socket

from .config import ClusterError, parse_range

IP_PROP = re.compile(r'(?:^|,)ip=([^,]*)')


def net_ip(value):
    """The ip= property of a netN config value ('dhcp', 'manual', 'A/P', or None)."""
    found = IP_PROP.search(str(value or ''))
    return found.group(1) if found else None


def with_ip(value, ip):
    """The netN value with its ip= property set to ip."""
    value = str(value)
    if net_ip(value) is None:
        return value + ',ip=' + ip
    return IP_PROP.sub(lambda m: (',' if m.group(0).startswith(',') else '') + 'ip=' + ip, value, count=1)


def loopback(ip):
    """The address of 'A/P' if it is an IPv4 loopback address, else None."""
    try:
        address = ipaddress.ip_interface(str(ip)).ip
    except ValueError:
        return None
    return str(address) if address.version == 4 and address.is_loopback else None


class AddressPool:
    """Addresses of a range given to guests; each VMID keeps its address until the guest is destroyed."""

    def __init__(self, text, exclude=()):
        self.text = text
        first, last, self.prefix = parse_range(text, exclude)
        self.first, self.last = int(first), int(last)
        self.exclude = set(int(ipaddress.ip_address(x)) for x in exclude)
        # vmid -> address, for DHCP leases and static pins alike.
        self.assigned = {}

    def allocate(self, vmid, taken=()):
        """The address of vmid: the one it had, else the lowest free one (ClusterError if none is left)."""
        if vmid in self.assigned:
            return self.assigned[vmid]
        busy = set(self.assigned.values()) | set(taken)
        for n in range(self.first, self.last + 1):
            candidate = str(ipaddress.ip_address(n))
            if n not in self.exclude and candidate not in busy:
                self.assigned[vmid] = candidate
                return candidate
        raise ClusterError('address range {0} is exhausted'.format(self.text))

    def release(self, vmid):
        self.assigned.pop(vmid, None)


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port
