"""Runtime control of a cloud: the operations (faults, status) and the client of a cloud process.

CloudApi is the one list of operations; CloudClient sends them to a cloud process over HTTP on loopback (the
`fault` and `status` commands use it, and so do tests). The server side is site.CloudSite with the try-out
cluster's ControlServer.
"""

from tests.localpve.control import OpClient

from .config import CloudError, load_info


class CloudApi:
    """The operations on a running cloud. Subclasses define _op(name, **arguments)."""

    def _op(self, name, **arguments):
        raise NotImplementedError

    def status(self):
        """Instances (state as shown, addresses, sshd), proxy rules, instance and guest faults."""
        return self._op('status')

    def instances(self):
        """Every instance as the cloud shows it: instance_id, state, moto_state, private_ip, public_ip, tags, root,
        sshd, sshd_pid, invisible_for, timing."""
        return self._op('instances')

    # The fault proxy in front of moto.
    def proxy_add(self, action, operation, times=1, skip=0, seconds=None, code=None, message=None, status=None,
                  size=None, repeat_at=None, fail_at=None, endless=False, match=None):
        """Add a rule: action drop-response, reset, delay (seconds), error (code, message, status), throttle, or
        pages (size, repeat_at, fail_at with code/message/status, endless). operation: an EC2 Action or a glob.
        match: only requests with a field value matching this glob (an instance id, a ClientToken).
        times: requests it acts on (None: all); skip: matching requests let through first. Returns the rule."""
        return self._op('proxy_add', action=action, operation=operation, times=times, skip=skip, seconds=seconds,
                        code=code, message=message, status=status, size=size, repeat_at=repeat_at, fail_at=fail_at,
                        endless=endless, match=match)

    def drop_response(self, operation, times=1, skip=0, match=None):
        """The request takes effect in moto; the client's connection is cut before it hears the answer."""
        return self.proxy_add('drop-response', operation, times=times, skip=skip, match=match)

    def throttle(self, operation, times=1, skip=0, match=None):
        """RequestLimitExceeded (HTTP 503) without forwarding."""
        return self.proxy_add('throttle', operation, times=times, skip=skip, match=match)

    def pages(self, size=1, times=1, repeat_at=None, fail_at=None, endless=False, code=None, message=None,
              status=None):
        """The next `times` DescribeInstances listings come in pages of `size` reservations."""
        return self.proxy_add('pages', 'DescribeInstances', times=times, size=size, repeat_at=repeat_at,
                              fail_at=fail_at, endless=endless, code=code, message=message, status=status)

    def proxy_rules(self):
        return self._op('proxy_rules')

    def proxy_remove(self, rule_id):
        return self._op('proxy_remove', rule_id=rule_id)

    def proxy_clear(self):
        return self._op('proxy_clear')

    # Instances.
    def invisible(self, seconds, instance_id=None, times=1):
        """The next `times` new instances (or instance_id) answer InvalidInstanceID.NotFound and are left out of
        listings for `seconds` after they appear."""
        return self._op('instance_fault', kind='invisible', instance_id=instance_id, times=times, seconds=seconds)

    def timing(self, instance_id=None, times=1, boot_secs=None, stop_secs=None, shutdown_secs=None):
        """How long the next `times` new instances (or instance_id) stay pending, stopping, shutting-down."""
        return self._op('instance_fault', kind='timing', instance_id=instance_id, times=times, boot_secs=boot_secs,
                        stop_secs=stop_secs, shutdown_secs=shutdown_secs)

    def console_key(self, instance_id=None, times=1, silent=False):
        """The console of the next `times` new instances (or instance_id) shows a host key that is not the one their
        guest's sshd serves (silent: no host key at all)."""
        return self._op('instance_fault', kind='console_silent' if silent else 'console_key', instance_id=instance_id,
                        times=times)

    def instance_clear(self):
        return self._op('instance_clear')

    # Guests (the try-out cluster's guest faults).
    def guest_fault(self, kind, instance_id=None, seconds=None, times=1, match=None, after=0.0):
        """refuse (seconds), never, or drop (after, match) for one instance or the next guest(s)."""
        return self._op('guest_fault', kind=kind, instance_id=instance_id, seconds=seconds, times=times,
                        match=match, after=after)

    def guest_clear(self):
        return self._op('guest_clear')

    # The foreign client.
    def foreign_create(self, tags=None, copy_tags_of=None, count=1, running=True):
        """The foreign client launches `count` instances (seeded image and subnet) with tags, or with a copy of
        another instance's tags whose marker no controller made. Returns {'instance_ids', 'tags'}."""
        return self._op('foreign_create', tags=tags, copy_tags_of=copy_tags_of, count=count, running=running)

    def foreign_terminate(self, instance_ids):
        return self._op('foreign_terminate', instance_ids=list(instance_ids))

    def clear(self):
        """Every fault off: proxy rules, instance faults (new invisibility windows end now), guest faults."""
        return self._op('clear')

    # The ARM fake (tests/localcloud/azure_site.py's op_* with their keyword arguments).
    def azure(self, what, /, **arguments):
        """An operation of the ARM fake: resources, operations, rule, rules, remove_rule, clear, change, detach,
        remove, foreign_create, settings, boot_log_fault, boot."""
        return self._op('azure', action=what, arguments=arguments)

    def azure_console_key(self, vm=None, times=1, silent=False):
        """The serial log of the next `times` new Azure VMs (or VM `vm`) shows a host key that is not the one their
        guest's sshd serves (silent: no host key at all)."""
        return self.azure('boot_log_fault', kind='console_silent' if silent else 'console_key', vm=vm, times=times)

    # The Hetzner Cloud fake (tests/localcloud/hetzner_site.py's op_* with their keyword arguments).
    def hetzner(self, what, /, **arguments):
        """An operation of the Hetzner Cloud fake: servers, view, requests, rule, clear, foreign_create."""
        return self._op('hetzner', action=what, arguments=arguments)

    # The Compute Engine fake (tests/localcloud/gcp_site.py's op_* with their keyword arguments).
    def gcp(self, what, /, **arguments):
        """An operation of the Compute Engine fake: instances, inserts, calls, violations, fault, op_seconds, deny,
        metadata, host_keys, guest_attributes, clear."""
        return self._op('gcp', action=what, arguments=arguments)

    def folder(self, what, /, **arguments):
        """An operation of the folder provider's part (tests/localcloud/folder_site.py): machines."""
        return self._op('folder', action=what, arguments=arguments)

    def gcp_host_keys(self, times=1, silent=False):
        """The guest attributes of the next `times` new Compute Engine instances hold a host key that is not the one
        their guest's sshd serves (silent: no host key at all)."""
        return self.gcp('host_keys', kind='silent' if silent else 'other', times=times)


class CloudClient(OpClient, CloudApi):
    """The operations of a cloud that runs as its own process (started with `up`), sent as the try-out cluster's
    ControlClient sends its own.

    CloudClient(info) with the dict of cloud.json, or CloudClient(state_dir=...) to read it.
    """

    noun = 'cloud'
    module = 'tests.localcloud'
    error = CloudError
    read_info = staticmethod(load_info)

    # Clients of this cloud (boto3 is imported when one is made).
    def ec2(self, **options):
        from .clients import ec2_client  # pylint: disable=import-outside-toplevel
        return ec2_client(self.info, **options)

    def foreign_ec2(self, **options):
        from .clients import foreign_client  # pylint: disable=import-outside-toplevel
        return foreign_client(self.info, **options)

    def env(self):
        from .clients import aws_env  # pylint: disable=import-outside-toplevel
        return aws_env(self.info)
