"""Options of a try-out cloud: defaults, checks, and where its files live."""

import dataclasses
import getpass
import os
import re

from tests.localpve.debian import check_host

from tests.localpve.config import (
    ClusterError,
    _port as pve_port,
    check_sshd,
    guest_ssh_port,
    loopback_address,
    parse_range,
    read_info,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE_ENV = 'LOCALCLOUD_STATE_DIR'
INFO_FILE = 'cloud.json'
DEFAULT_HOST = '127.0.81.1'
REGION = re.compile(r'^[a-z]{2}(-[a-z]+)+-\d$')
# The account moto gives every access key it does not know (ours and the foreign client's alike).
ACCOUNT_ID = '123456789012'


class CloudError(ClusterError):
    """Something the user can fix (an option, a busy port, a missing program); the message says what."""


def state_dir(value=None):
    """The state directory: the argument, else $LOCALCLOUD_STATE_DIR, else .localcloud/ in the repository root."""
    return os.path.abspath(value or os.environ.get(STATE_ENV) or os.path.join(ROOT, '.localcloud'))


def load_info(directory=None):
    """The cloud.json of a running cloud (a dict), or CloudError if there is none."""
    return read_info(state_dir(directory), INFO_FILE, 'cloud', 'tests.localcloud', CloudError)


def _port(value, what):
    return pve_port(value, what, CloudError)


def _seconds(value, what):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CloudError('{0} must be a number of seconds, not {1!r}'.format(what, value)) from None
    if number < 0:
        raise CloudError('{0} cannot be negative'.format(what))
    return number


@dataclasses.dataclass
class Options:
    """What `up` and LocalCloud.start take. check() validates them and fills in the derived values.

    The names the guest machinery of tests/localpve reads (sshd, ssh_port, host, guest_range, addressing,
    dhcp_delay, guests) mean what they mean there."""
    state_dir: str = None
    host: str = DEFAULT_HOST
    port: int = 4566
    moto_port: int = 0
    control_port: int = 0
    region: str = 'us-east-1'
    guest_range: str = None
    public_range: str = None
    ssh_port: int = None
    sshd: str = '/usr/sbin/sshd'
    boot_secs: float = 0.5
    stop_secs: float = 0.5
    shutdown_secs: float = 0.5
    # Fixed for the guest machinery: every address is a static one, guests run on this machine.
    addressing: str = 'static'
    dhcp_delay: float = None
    # host: the machines' commands run on this host as the current user, who is the agent too; debian: each machine is
    # a Debian userland of its own where root logs in and the agent is a user of its own (needs root here).
    guests: str = 'host'
    # The guests carry the real agent CLIs (tests/models/clis.py), installed once per machine.
    agent_clis: bool = True

    def check(self):
        """Validate every option (CloudError with the reason) and derive the defaults that depend on others."""
        self.state_dir = state_dir(self.state_dir)
        try:
            self.host = str(loopback_address(self.host, 'bind address'))
        except ClusterError as exc:
            raise CloudError(str(exc).replace('try-out cluster', 'try-out cloud')) from None
        self.port = _port(self.port, 'endpoint port')
        self.moto_port = _port(self.moto_port, 'moto port')
        self.control_port = _port(self.control_port, 'control port')
        busy = [p for p in (self.port, self.moto_port, self.control_port) if p]
        if len(busy) != len(set(busy)):
            raise CloudError('the endpoint, moto and control ports must differ (got {0})'.format(busy))
        if not REGION.match(str(self.region)):
            raise CloudError('region {0!r} is not an AWS region name such as us-east-1'.format(self.region))
        base = self.host.rsplit('.', 1)[0]
        if self.guest_range is None:
            self.guest_range = '{0}.10-{0}.129'.format(base)
        if self.public_range is None:
            self.public_range = '{0}.130-{0}.250'.format(base)
        try:
            private = parse_range(self.guest_range, exclude=(self.host,))
            public = parse_range(self.public_range, exclude=(self.host,))
        except ClusterError as exc:
            raise CloudError(str(exc)) from None
        if int(private[0]) <= int(public[1]) and int(public[0]) <= int(private[1]):
            raise CloudError('the private range {0} and the public range {1} overlap: every address belongs to one '
                             'instance field only'.format(self.guest_range, self.public_range))
        self.ssh_port = guest_ssh_port(self.ssh_port, CloudError)
        if self.guests not in ('host', 'debian'):
            raise CloudError('guests must be host or debian, not {0!r}'.format(self.guests))
        if self.guests == 'debian':
            try:
                check_host()
            except ClusterError as exc:
                raise CloudError(str(exc)) from None
        else:
            check_sshd(self.sshd, CloudError)
        self.boot_secs = _seconds(self.boot_secs, 'boot seconds')
        self.stop_secs = _seconds(self.stop_secs, 'stop seconds')
        self.shutdown_secs = _seconds(self.shutdown_secs, 'shutdown seconds')
        return self

    @property
    def ssh_user(self):
        """The host tier's sshd runs as the current user and lets in that user only; the debian tier's lets in the
        machines' root."""
        return 'root' if self.guests == 'debian' else getpass.getuser()

    @property
    def agent_user(self):
        """The user the agent runs as: on the host tier the SSH user, on the debian tier one of its own (made by the
        collection's bootstrap, as on a cloud image)."""
        return 'agent' if self.guests == 'debian' else self.ssh_user

    def as_args(self):
        """The command line of `up`/`serve` that gives these options."""
        return ['--state-dir', self.state_dir, '--host', self.host, '--port', str(self.port),
                '--moto-port', str(self.moto_port), '--control-port', str(self.control_port),
                '--region', self.region, '--guest-range', self.guest_range, '--public-range', self.public_range,
                '--ssh-port', str(self.ssh_port), '--sshd', self.sshd, '--boot-secs', repr(self.boot_secs),
                '--stop-secs', repr(self.stop_secs), '--shutdown-secs', repr(self.shutdown_secs),
                '--guests', self.guests] + (
                    [] if self.agent_clis else ['--no-agent-clis'])
