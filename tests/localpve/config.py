"""Options of a try-out cluster: defaults, checks, and where its files live."""

import dataclasses
import getpass
import ipaddress
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE_ENV = 'LOCALPVE_STATE_DIR'
INFO_FILE = 'cluster.json'
DEFAULT_HOST = '127.0.80.1'
LOOPBACK = ipaddress.ip_network('127.0.0.0/8')
NODE_NAME = re.compile(r'^[a-zA-Z][a-zA-Z0-9-]{0,62}$')
POOL_NAME = re.compile(r'^[A-Za-z][A-Za-z0-9_-]*$')
# host: commands run on this machine as the current user, each guest's files in a directory of its own.
# debian: each guest is a Debian userland of its own (tests/localpve/debian.py).
GUEST_TIERS = ('host', 'debian')


class ClusterError(Exception):
    """Something the user can fix (an option, a busy port, a missing program); the message says what."""


def state_dir(value=None):
    """The state directory: the argument, else $LOCALPVE_STATE_DIR, else .localpve/ in the repository root."""
    return os.path.abspath(value or os.environ.get(STATE_ENV) or os.path.join(ROOT, '.localpve'))


def load_info(directory=None):
    """The cluster.json of a running cluster (a dict), or ClusterError if there is none."""
    return read_info(state_dir(directory), INFO_FILE, 'cluster', 'tests.localpve', ClusterError)


def read_info(directory, info_file, noun, module, error):
    """The ``info_file`` in ``directory`` of a running try-out ``noun`` (a dict), or ``error`` saying how to start
    one (python -m ``module`` up) if there is none."""
    path = os.path.join(directory, info_file)
    try:
        with open(path, encoding='utf-8') as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise error('no {0} is running with state in {1} (no {2}); start one with: '
                    'python -m {3} up'.format(noun, os.path.dirname(path), info_file, module)) from None
    except ValueError as exc:
        raise error('{0} is not valid JSON ({1}); stop the {2} with down and start it again'.format(
            path, exc, noun)) from None


def ensure_agent_clis(announce=None):
    """The bin directory of the real agent CLIs the host tier's guests carry, installed first if need be."""
    from tests.models.clis import CliError, ensure_clis  # pylint: disable=import-outside-toplevel
    try:
        return ensure_clis(announce=announce)
    except CliError as err:
        raise ClusterError('the guests carry the real agent CLIs, and installing them failed: {0}. Start the cluster '
                           'with --no-agent-clis to do without'.format(err)) from None


def loopback_address(text, what):
    """An IPv4 address in 127.0.0.0/8, or ClusterError naming the option."""
    try:
        address = ipaddress.ip_address(str(text).strip())
    except ValueError:
        raise ClusterError('{0} {1!r} is not an IPv4 address; the try-out cluster listens on 127.0.0.0/8 '
                           'only'.format(what, text)) from None
    if address.version != 4 or address not in LOOPBACK:
        raise ClusterError('{0} {1} is not a loopback address: the try-out cluster listens on 127.0.0.0/8 only, '
                           'so nothing of it is reachable from other machines'.format(what, address))
    return address


def parse_range(text, exclude=()):
    """(first, last, prefix) of 'A-B' or 'A/N' in 127.0.0.0/8; ClusterError for anything else."""
    text = str(text).strip()
    try:
        if '/' in text:
            net = ipaddress.ip_network(text, strict=False)
            hosts = list(net.hosts()) if net.num_addresses > 2 else list(net)
            first, last, prefix = hosts[0], hosts[-1], net.prefixlen
        else:
            low, dash, high = text.partition('-')
            first, last = ipaddress.ip_address(low.strip()), ipaddress.ip_address((high if dash else low).strip())
            prefix = 24 if int(first) >> 8 == int(last) >> 8 else 8
    except ValueError:
        raise ClusterError('address range {0!r} is neither FIRST-LAST nor a CIDR such as 127.0.80.0/24'.format(
            text)) from None
    for address in (first, last):
        if address.version != 4 or address not in LOOPBACK:
            raise ClusterError('address range {0} leaves 127.0.0.0/8: guests get loopback addresses only'.format(
                text))
    if int(last) < int(first):
        raise ClusterError('address range {0}: the last address comes before the first'.format(text))
    inside = [x for x in exclude if int(first) <= int(ipaddress.ip_address(x)) <= int(last)]
    if int(last) - int(first) + 1 <= len(inside):
        raise ClusterError('address range {0} has no address left for guests'.format(text))
    return first, last, prefix


def _port(value, what, error=ClusterError):
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise error('{0} {1!r} is not a port number'.format(what, value)) from None
    if not 0 <= port <= 65535:
        raise error('{0} {1} is not a port number (0-65535; 0 lets the system choose)'.format(what, port))
    return port


def guest_ssh_port(value, error=ClusterError):
    """The guests' sshd port: ``value``, else 22 as root and 2222 otherwise; never 0."""
    if value is None:
        value = 22 if os.geteuid() == 0 else 2222
    port = _port(value, 'SSH port', error)
    if not port:
        raise error('guests need a fixed SSH port, not 0')
    return port


def check_sshd(path, error=ClusterError):
    """``error`` saying what to install unless ``path`` is an sshd that can run."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise error('sshd not found at {0}: install Debian\'s openssh-server '
                    '(apt-get install -y openssh-server) or pass --sshd PATH'.format(path))


@dataclasses.dataclass
class Options:
    """What `up` and LocalCluster.start take. check() validates them and fills in the derived values."""
    state_dir: str = None
    host: str = DEFAULT_HOST
    api_port: int = 8006
    proxy_port: int = 8007
    control_port: int = 0
    user: str = 'root@pam'
    token_name: str = 'workspaces'
    nodes: tuple = ('pve1', 'pve2')
    template_vmid: int = 9000
    pool: str = 'disposable-workspaces'
    storage: str = 'local-lvm'
    bridge: str = 'vmbr0'
    time_scale: float = 0.1
    latency: float = 0.0
    addressing: str = 'static'
    dhcp_delay: float = 1.0
    guest_range: str = None
    ssh_port: int = None
    sshd: str = '/usr/sbin/sshd'
    fresh: bool = False
    guests: str = 'host'
    # host tier: the guests carry the real agent CLIs (tests/models/clis.py), installed once per machine.
    agent_clis: bool = True

    def check(self):
        """Validate every option (ClusterError with the reason) and derive the defaults that depend on others."""
        self.state_dir = state_dir(self.state_dir)
        self.host = str(loopback_address(self.host, 'bind address'))
        self.api_port = _port(self.api_port, 'API port')
        self.proxy_port = _port(self.proxy_port, 'proxy port')
        self.control_port = _port(self.control_port, 'control port')
        busy = [p for p in (self.api_port, self.proxy_port, self.control_port) if p]
        if len(busy) != len(set(busy)):
            raise ClusterError('the API, proxy and control ports must differ (got {0})'.format(busy))
        if isinstance(self.nodes, str):
            self.nodes = tuple(n.strip() for n in self.nodes.split(',') if n.strip())
        self.nodes = tuple(self.nodes)
        if not self.nodes:
            raise ClusterError('a cluster needs at least one node')
        for node in self.nodes:
            if not NODE_NAME.match(node):
                raise ClusterError('node name {0!r} is not a valid host name'.format(node))
        if len(set(self.nodes)) != len(self.nodes):
            raise ClusterError('node names must be unique (got {0})'.format(', '.join(self.nodes)))
        if not 100 <= int(self.template_vmid) <= 999999999:
            raise ClusterError('template VMID {0} is outside 100-999999999'.format(self.template_vmid))
        self.template_vmid = int(self.template_vmid)
        if not POOL_NAME.match(self.pool):
            raise ClusterError('pool name {0!r} must start with a letter (letters, digits, - and _)'.format(self.pool))
        if '@' not in self.user or '!' in self.user:
            raise ClusterError('user {0!r} must look like name@realm, e.g. root@pam'.format(self.user))
        if not re.match(r'^[A-Za-z][A-Za-z0-9._-]*$', self.token_name):
            raise ClusterError('token name {0!r} must start with a letter'.format(self.token_name))
        self.time_scale = float(self.time_scale)
        self.latency = float(self.latency)
        if self.time_scale < 0 or self.latency < 0:
            raise ClusterError('time scale and latency cannot be negative')
        if self.addressing not in ('static', 'dhcp'):
            raise ClusterError("addressing must be 'static' or 'dhcp', not {0!r}".format(self.addressing))
        if self.dhcp_delay is not None:
            self.dhcp_delay = float(self.dhcp_delay)
            if self.dhcp_delay < 0:
                raise ClusterError('the DHCP delay cannot be negative')
        host = ipaddress.ip_address(self.host)
        if self.guest_range is None:
            base = str(host).rsplit('.', 1)[0]
            self.guest_range = '{0}.10-{0}.250'.format(base)
        parse_range(self.guest_range, exclude=(host,))
        self.ssh_port = guest_ssh_port(self.ssh_port)
        if self.guests not in GUEST_TIERS:
            raise ClusterError("guests must be one of {0}, not {1!r}".format(', '.join(GUEST_TIERS), self.guests))
        if self.guests == 'debian':
            # Imported here: only this tier needs it.
            from .debian import check_host  # pylint: disable=import-outside-toplevel
            check_host()
        else:
            check_sshd(self.sshd)
        return self

    @property
    def ssh_user(self):
        """The host tier's sshd runs as the current user and lets in that user only (root in CI); the debian tier's
        guests let in their root."""
        return 'root' if self.guests == 'debian' else getpass.getuser()

    @property
    def agent_user(self):
        """The user the agent runs as: on the host tier the SSH user, on the debian tier the guests' own agent."""
        return 'agent' if self.guests == 'debian' else self.ssh_user

    def as_args(self):
        """The command line of `up`/`serve` that gives these options."""
        args = ['--state-dir', self.state_dir, '--host', self.host, '--api-port', str(self.api_port),
                '--proxy-port', str(self.proxy_port), '--control-port', str(self.control_port),
                '--user', self.user, '--token-name', self.token_name, '--nodes', ','.join(self.nodes),
                '--template-vmid', str(self.template_vmid), '--pool', self.pool, '--storage', self.storage,
                '--bridge', self.bridge, '--time-scale', repr(self.time_scale), '--latency', repr(self.latency),
                '--addressing', self.addressing,
                '--dhcp-delay', 'never' if self.dhcp_delay is None else repr(self.dhcp_delay),
                '--guest-range', self.guest_range, '--ssh-port', str(self.ssh_port), '--sshd', self.sshd,
                '--guests', self.guests]
        return args + (['--fresh'] if self.fresh else []) + ([] if self.agent_clis else ['--no-agent-clis'])
