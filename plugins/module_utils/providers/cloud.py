# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cloud providers (EC2, Hetzner Cloud, Compute Engine) do alike, written once.

A cloud provider's machine is made from an image (never a template built in place), its candidate id is derived from
the workspace's record (a client token, a server or instance name) and bound by the ownership marker as it is (a
version 3 marker; core/ownership.py), a resource key is ``<kind>/<id>@<location>``, its settings are fixed at
creation, and its tasks are handles the provider reads again until they are done. A provider says what differs as
data (``kind``, ``noun``, ``candidate_noun``, ``image_hint``) and small methods: how to read a machine
(:meth:`CloudProvider.native`), whether it runs, what id the marker binds, how to act (``act_start``,
``act_shutdown``, ``act_stop``) and how to look at a task (:meth:`CloudProvider.task_look`).
"""

import hashlib
import os

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership, waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import base

DONE = 'done'
RUNNING = 'running'


def option(params, name, env=(), environ=None):
    """``params[name]``, else the first environment variable of ``env`` (a name, or names) that is set, else None."""
    environ = os.environ if environ is None else environ
    value = params.get(name)
    if value in (None, ''):
        for var in (env,) if isinstance(env, str) else env or ():
            if environ.get(var):
                return environ[var]
        return None
    return value


# The number a version 2 marker bound for a derived id (markers written before version 3 verify against it).
bound_number = ownership.legacy_number


def derived_candidate(workspace, stamp, avoid, prefix, digits, what):
    """The id ``prefix`` + a digest of ``workspace``'s record made at ``stamp``: the same for every rerun, another one
    for every id in ``avoid``; Conflict (naming ``what``) when a hundred in a row are taken."""
    for n in range(len(avoid), len(avoid) + 100):
        digest = hashlib.sha256(('%s\n%s\n%d' % (workspace, stamp, n)).encode('utf-8')).hexdigest()[:digits]
        name = prefix + digest
        if name not in avoid:
            return name
    raise base.Conflict('No free %s for %s.' % (what, workspace))


def listed(resource_id, location, kind, name, status, scope, tags, resource):
    """One entry of :meth:`base.Provider.list` for a machine read in a listing (``resource``: as read)."""
    return {'id': resource_id, 'location': location, 'kind': kind, 'name': name, 'status': status, 'lock': None,
            'pool': scope, 'tags': tags, 'resource': resource}


class CloudProvider(base.Provider):
    """The part of the seam every cloud provider answers the same way."""

    # The first part of a resource key and of a task handle ('ec2').
    kind = None
    # How messages name a machine ('instance', 'server').
    noun = 'instance'
    id_noun = 'id'
    # What a candidate id is, for the refusal of candidate() ('An EC2 client token').
    candidate_noun = None
    # What to give instead of a template build ('on AWS give an AMI').
    image_hint = None
    address_advice = 'Check that its subnet gives it an address, and a public one where the options ask for it'

    # ------------------------------------------------------------------- identity and wording

    @classmethod
    def resource_key(cls, resource_id, location=None):
        key = '%s/%s' % (cls.kind, resource_id)
        return key if location is None else '%s@%s' % (key, location)

    @classmethod
    def parse_resource_key(cls, key):
        try:
            kind, rest = key.split('/', 1)
            resource_id, location = rest.split('@', 1)
        except (AttributeError, ValueError):
            return None, None
        return (resource_id, location) if kind == cls.kind else (None, None)

    @property
    def here(self):
        """Where this connection works, for messages about its machines (None: messages name no place)."""
        return None

    # ------------------------------------------------------------------- ownership

    def marker(self, workspace, resource_id, nonce=None):
        """The marker of the machine whose candidate id is ``resource_id``, which it binds."""
        return ownership.render_resource(self.secret, self.controller, workspace, resource_id,
                                         nonce or ownership.new_nonce())

    def bound_id(self, resource):
        """The candidate id a found machine's marker must bind (None: it shows none)."""
        return resource.id

    def verify(self, resource, workspace=None, nonce=ownership.ANY):
        if resource is None:
            return ownership.ABSENT
        bound = self.bound_id(resource)
        return ownership.verdict(resource.marker_text, self.secret, self.controller, workspace, bound or -1, nonce)

    # ------------------------------------------------------------------- warm pools

    # A cloud provider keeps warm pools once it says how a claim is written (write_remark); until then a pool declared
    # for it is refused with this.
    pool_refusal = base.Provider.pool_refusal

    def remark_bound(self, resource):
        """The id the marker of a claimed member's machine binds: the one its own marker binds, since the machine
        and its candidate id stay what they are (a provider that binds more than one id says which)."""
        bound = self.bound_id(resource)
        if not bound:
            raise base.Refused('%s shows nothing a marker of ours can bind; it is not given to a workspace.'
                               % self.label(resource.id, self.here))
        return bound

    def write_remark(self, resource, workspace, marker, hostname, labels, created_by=None):
        """Write the claimed machine's new ``marker`` (signed for ``workspace``), its name ``hostname`` (where the provider can rename it),
        its lease ``labels`` and ``created_by`` (where the provider tags it) in as few calls as the API allows;
        ``resource`` was read just before."""
        raise NotImplementedError

    def remark(self, resource, workspace, nonce, hostname, labels=None, created_by=None):
        """Give the machine of a warm pool member to ``workspace``: read again, it must still carry the marker it
        carried when it was read (``resource``), else Conflict and nothing is written; then its marker is signed for
        ``workspace`` with ``nonce`` over the same number, and its name and lease labels are written
        (:meth:`write_remark`). A cloud has no compare-and-set of tags or labels: the journal's claim of the member
        (one workspace alone) is what keeps two writers apart, and this look only keeps a stale read from being
        written over."""
        if self.secret is None:
            raise base.Refused('A machine is given to a workspace only with the controller secret, which signs its '
                               'marker.')
        current = self.find(resource.id, resource.location)
        if current is None:
            raise base.NotFound('%s does not exist.' % self.label(resource.id, self.here))
        if current.marker_text != resource.marker_text:
            raise base.Conflict('%s changed since it was read: it carries another marker now. Nothing was written; '
                                'look at it again.' % self.label(resource.id, self.here))
        marker = ownership.render_resource(self.secret, self.controller, workspace, self.remark_bound(current), nonce)
        self.write_remark(current, workspace, marker, hostname, dict(labels or {}), created_by)

    # ------------------------------------------------------------------- allocation

    def launch_options(self):
        """The launch settings a request records (no credentials among them)."""
        return dict(self.launch)

    def check_storage(self, location, storage):
        return None

    def candidate(self, avoid=(), sleep=None):
        raise base.InvalidRequest('%s is derived from its workspace: use candidate_for.' % self.candidate_noun)

    # ------------------------------------------------------------------------------- looking

    def native(self, resource_id):
        """The provider's description of the machine read now, or None when it is gone."""
        raise NotImplementedError

    def native_running(self, native):
        """True when the description says the machine runs (or is on its way to running)."""
        raise NotImplementedError

    def find_listed(self, entry):
        """The machine as :meth:`list` read it (no request of its own), else as :meth:`find` reads it now."""
        found = entry.get('resource')
        return found if found is not None else self.find(entry['id'], entry['location'])

    def power(self, resource, absent_ok=True):
        native = self.native(resource.id)
        if native is None:
            if not absent_ok:
                raise base.NotFound('%s does not exist.' % self.label(resource.id, self.here))
            return base.Power(None)
        return base.Power(base.RUNNING if self.native_running(native) else base.STOPPED)

    def in_scope(self, entry, scope, tag=None):
        return entry.get('pool') == scope or (tag is not None and tag in entry.get('tags', ()))

    # -------------------------------------------------------------------------------- acting

    def plan_settings(self, resource, settings):
        return {}

    def apply_settings(self, resource, changes):
        return None

    def act_start(self, resource):
        """Ask the cloud to start the machine; a task handle."""
        raise NotImplementedError

    def act_shutdown(self, resource):
        """Ask the cloud to shut the machine down gracefully; a task handle."""
        raise NotImplementedError

    def act_stop(self, resource):
        """Ask the cloud to stop the machine by force; a task handle."""
        raise NotImplementedError

    def start(self, resource):
        if self.power(resource, absent_ok=False).running:
            return None
        return self.act_start(resource)

    def shutdown(self, resource, timeout):
        if not self.power(resource).running:
            return None
        return self.act_shutdown(resource)

    def stop(self, resource):
        if not self.power(resource).running:
            return None
        return self.act_stop(resource)

    def is_image(self, resource):
        return False

    def make_image(self, resource):
        raise base.InvalidRequest('Template builds are for Proxmox VE; %s.' % self.image_hint)

    def deleted_since(self, resource_id, location, since):
        # An id of ours is never given to another machine: nothing can stand at it after its deletion.
        return False

    # --------------------------------------------------------------------------------- tasks

    def task_look(self, handle):
        """(verdict, detail) of a handle read now: the verdict is DONE, RUNNING or a failure message; the detail is
        what :meth:`task_failure` and :meth:`task_timeout` may say more (None for nothing)."""
        raise NotImplementedError

    def task_failure(self, handle, verdict, detail):
        """(message, log tail) of a task that failed with ``verdict``."""
        return verdict, [verdict]

    def task_timeout(self, handle, seconds, detail):
        """The message of a task not finished after ``seconds``."""
        raise NotImplementedError

    def task_seconds(self, timeout):
        """How long :meth:`wait` waits for a task given ``timeout``."""
        return timeout

    def task_what(self, handle):
        """What a wait for ``handle`` waits for, in words ("the start of instance i-0ab in eu-west-1")."""
        return 'task %s' % handle

    def wait(self, handle, timeout):
        seconds = self.task_seconds(timeout)

        def probe(remaining):
            verdict, detail = self.task_look(handle)
            if verdict == DONE:
                return waiter.done()
            if verdict != RUNNING:
                return waiter.failed((verdict, detail))
            return waiter.pending(detail)

        result = waiter.wait_for(probe, seconds, waiter.Backoff(start=0.3, maximum=3.0), sleep=self.sleep,
                                 what=self.task_what(handle))
        if result.ok:
            return base.TaskResult(handle)
        if result.outcome == waiter.FAILED:
            message, tail = self.task_failure(handle, *result.value)
            err = base.TaskFailed(message)
            err.log_tail = tail
        else:
            err = base.TaskTimeout(self.task_timeout(handle, seconds, result.value))
        err.task_id = handle
        raise err

    def task_status(self, handle):
        verdict = self.task_look(handle)[0]
        if verdict == RUNNING:
            return base.TaskResult(handle, status='running', exitstatus=None)
        return base.TaskResult(handle, exitstatus='OK' if verdict == DONE else verdict)

    def close(self):
        pass
