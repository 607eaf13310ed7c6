# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The provider seam: what a workspace needs from the place its machine lives, in the place's own terms.

A provider turns "a workspace needs a machine" into calls of one API (Proxmox VE today; clouds later)
and answers in the seam's terms, so that the flows above it (create, destroy, reconcile, the
inventory) never see a REST path, an id scheme or a task format:

- **allocate** a resource from a source (a template, an image) with the ownership marker written by
  the allocating call itself, after the caller recorded the candidate id (the idempotency token:
  a rerun looks at that id before it allocates again);
- **find** a resource by id, **verify** its ownership (one verdict of :mod:`core.ownership`:
  verified, absent, foreign, forged or mismatch), and look at its power state;
- **start** it, read its **addresses**, **stop** it (graceful, then by force) and **delete** it,
  where a delete is done once the resource is observed absent;
- **list** what sits in our scope (pool, labels), and look at and wait for **tasks**: the opaque
  handles a provider returns for work that goes on after the call answered.

Every failure is one of a few kinds, whatever the provider calls them; the kind says what the caller
may do next:

============== ================================================================================
kind           what the caller does
============== ================================================================================
refused        the request was refused on purpose (bad input, no permission, a state that
               forbids it): nothing says a retry would help
not_found      the resource (or task) does not exist there: for a delete, absent is done
conflict       the id or name is taken: pick another, and prove ownership before using one
locked         another operation holds the resource: retry with backoff
transient      the request was surely not carried out: retrying later is safe
unknown_outcome the request may or may not have been carried out: look before repeating it
============== ================================================================================

An unknown outcome that the provider will not repeat at all (:class:`KeptAsDebt`) ends the step with the
provider's sentence.

A task that ended with an error is a refusal (:class:`TaskFailed`); one still running at the
caller's deadline has an unknown outcome (:class:`TaskTimeout`): it goes on in the provider.
"""

import importlib
import re

from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError

REFUSED = 'refused'
NOT_FOUND = 'not_found'
CONFLICT = 'conflict'
LOCKED = 'locked'
TRANSIENT = 'transient'
UNKNOWN_OUTCOME = 'unknown_outcome'
ERROR_KINDS = (REFUSED, NOT_FOUND, CONFLICT, LOCKED, TRANSIENT, UNKNOWN_OUTCOME)

# Power states a provider reports.
RUNNING = 'running'
STOPPED = 'stopped'

# Without the controller secret a marker can only be read, not checked: ours by its words, unproven.
UNVERIFIED = ownership.UNVERIFIED

# The provider of a workspace record, or of a module's options, that names none: every record written before there
# were others is Proxmox VE's.
DEFAULT_PROVIDER = 'proxmox'
# The environment variable that selects a module's provider (the provider option's fallback).
PROVIDER_ENV = 'EPHEMERA_PROVIDER'


def provider_of(values):
    """The provider a workspace record, or a module's options, name (DEFAULT_PROVIDER when they name none)."""
    return (values or {}).get('provider') or DEFAULT_PROVIDER


def location_option(name):
    """The option that binds a connection of provider ``name`` to one location (``aws_region``: an EC2 client serves
    one region), as its package declares it: LOCATION_OPTION in providers/<name>/options.py, which holds neither the
    provider's code nor its SDK, so that a reader of the journal alone (the lease audit) names places without loading
    either. None when one connection reaches every location of the provider, or there is no provider ``name``."""
    return _declared(name, 'LOCATION_OPTION')


def _declared(name, attribute):
    """``attribute`` of providers/<name>/options.py (None: not declared, or no provider ``name``)."""
    if not re.match(r'^[a-z][a-z0-9_]*$', str(name or '')):
        return None
    try:
        declared = importlib.import_module('%s.%s.options' % (__name__.rsplit('.', 1)[0], name))
    except ImportError:
        return None
    return getattr(declared, attribute, None)


# How messages name a resource of a provider that declares no RESOURCE_LABEL.
RESOURCE_LABEL = ('resource {id}', ' in {location}')


def resource_label(name, resource_id, location=None):
    """How messages name a resource of provider ``name`` ('CT 105 on pve1', 'instance i-0abc in eu-west-1'): its
    RESOURCE_LABEL (what, where) in providers/<name>/options.py, read as location_option() reads, without the
    provider's code or its SDK. Provider.label() answers the same."""
    what, where = _declared(name, 'RESOURCE_LABEL') or RESOURCE_LABEL
    return what.format(id=resource_id) + (where.format(location=location) if location else '')


# ---------------------------------------------------------------------------------------- errors

class ProviderError(EphemeraError):
    """Base of everything a provider raises. ``error_kind`` is one of ERROR_KINDS.

    An error that says nothing more specific is a definite refusal. ``transport`` tells how a
    connection failed when no answer came (None when the provider answered), ``provider_message``
    is the provider's own text.
    """

    error_kind = REFUSED
    transport = None

    @property
    def provider_message(self):
        return None


class Refused(ProviderError):
    """The provider refused the request on purpose; the message says why."""
    error_kind = REFUSED


class InvalidRequest(Refused):
    """The request cannot work here (a source that cannot be allocated from, a scope that does not exist); the
    message says what to change. Raised before anything was changed."""


class NotFound(ProviderError):
    """The resource or task does not exist (there)."""
    error_kind = NOT_FOUND


def missing_sdk(provider, packages, requirements, err):
    """The refusal of a provider whose SDK is not installed where Ansible runs: which packages, and the requirement
    file of the collection that installs them (``requirements``, e.g. requirements-aws.txt)."""
    return InvalidRequest('The %s provider needs %s in the Python that runs Ansible (%s): pip install -r %s (a file '
                          'of the collection: ~/.ansible/collections/ansible_collections/ephemera/workspaces/%s when it '
                          'is installed there), or pip install %s. Nothing was done.'
                          % (provider, ', '.join(p.split('>')[0] for p in packages), err, requirements, requirements,
                             ' '.join('"%s"' % p for p in packages)))


class Conflict(ProviderError):
    """The id or name is taken."""
    error_kind = CONFLICT


class Locked(ProviderError):
    """Another operation holds the resource; retry with backoff."""
    error_kind = LOCKED


class Transient(ProviderError):
    """A temporary failure in which the request was surely not carried out."""
    error_kind = TRANSIENT


class IncompleteInventory(Transient):
    """A paginated listing that could not be read to its end (a repeated page token or link, too many pages, a later
    page that failed): it confirms nothing, absence least of all."""


class UnknownOutcome(ProviderError):
    """The request went out and no usable answer came back: it may or may not have been carried out."""
    error_kind = UNKNOWN_OUTCOME


class KeptAsDebt(UnknownOutcome):
    """An earlier request of unknown outcome that the provider does not send again (what it may have made is kept as
    cleanup debt): the step fails with this message, and nothing is sent in its place."""


class TaskFailed(Refused):
    """A task ended with an error. ``task_id`` is its handle, ``log_tail`` the last lines of its log."""
    task_id = None
    log_tail = ()


class TaskTimeout(UnknownOutcome):
    """A task was still running (or could not be looked at) at the deadline; it may still finish."""
    task_id = None


# ------------------------------------------------------------------------------------- resources

class Resource:
    """One resource as a provider found it.

    ``id`` is its id in the provider (a VMID, an instance id), ``location`` where it lives (a node,
    a region), ``lock`` the name of an operation that holds it (None when free), ``deleting`` True
    while a delete of it is under way, ``native`` the provider's own description of it (for the
    provider's eyes only).
    """

    __slots__ = ('id', 'location', 'lock', 'deleting', 'marker_text', 'native')

    def __init__(self, id, location, lock=None, deleting=False, marker_text=None, native=None):
        self.id = id
        self.location = location
        self.lock = lock
        self.deleting = deleting
        self.marker_text = marker_text
        self.native = native if native is not None else {}

    def __repr__(self):
        return 'Resource({0!r}, {1!r}, lock={2!r})'.format(self.id, self.location, self.lock)


class Power:
    """A resource's power state (RUNNING, STOPPED, or None when it is gone) and, when something outside our
    reach keeps it running, what (a sentence that says what to do)."""

    __slots__ = ('state', 'held_by')

    def __init__(self, state, held_by=None):
        self.state = state
        self.held_by = held_by

    @property
    def running(self):
        return self.state == RUNNING


class Allocation:
    """What to allocate: ``candidate`` (the id recorded before the call), ``workspace`` (whose marker it
    carries), ``source`` (template, image) at ``location``, ``hostname``, ``scope`` (pool, label set),
    ``full`` (an independent copy rather than a linked one), ``storage`` (where a full copy goes) and ``labels``
    (the lease's labels, core.lease.lease_labels, written with the marker in the same call) and ``nonce`` (the
    marker nonce the journal recorded for this life of the workspace; None writes a fresh one, for callers that
    keep no record) and ``options`` (what the provider's own launch settings were when the request was recorded:
    an instance type, a subnet; None for a provider that has none) and ``snapshot`` (the source's snapshot to copy,
    for a fork's child; None copies the source as it is)."""

    __slots__ = ('candidate', 'workspace', 'source', 'location', 'hostname', 'scope', 'full', 'storage', 'labels',
                 'nonce', 'options', 'snapshot')

    def __init__(self, candidate, workspace, source, location, hostname, scope, full=False, storage=None,
                 labels=None, nonce=None, options=None, snapshot=None):
        self.candidate = candidate
        self.workspace = workspace
        self.source = source
        self.location = location
        self.hostname = hostname
        self.scope = scope
        self.full = full
        self.storage = storage
        self.labels = labels
        self.nonce = nonce
        self.options = options
        self.snapshot = snapshot


class Settings:
    """The settings of a workspace's machine: ``cores``, ``memory`` (MiB), the network (``bridge``, ``ip``:
    'dhcp' or an address with its prefix, ``gateway``) and ``tags``."""

    __slots__ = ('cores', 'memory', 'bridge', 'ip', 'gateway', 'tags')

    def __init__(self, cores, memory, bridge, ip='dhcp', gateway=None, tags=()):
        self.cores = cores
        self.memory = memory
        self.bridge = bridge
        self.ip = ip
        self.gateway = gateway
        self.tags = list(tags)


_WARNINGS = re.compile(r'^WARNINGS: (\d+)$')


class TaskResult:
    """What a provider's task came to, as :meth:`Provider.wait` and :meth:`Provider.task_status` give it.

    ``upid`` is the task's handle; ``status`` is 'running' or 'stopped'; ``exitstatus`` None while it runs, then OK,
    'WARNINGS: n' or the error; ``succeeded`` None while it runs, then True for OK or 'WARNINGS: n' (``warnings``
    holds n, ``warning_lines`` the log's warning lines); ``log_tail`` has the last lines of the log of a task that
    failed or warned; ``elapsed`` is the seconds a wait took. A provider may add what its task ids carry (Proxmox VE's
    node, type and user).
    """

    def __init__(self, handle, status='stopped', exitstatus='OK', elapsed=0.0, log_tail=(), warning_lines=()):
        self.upid = handle
        self.status = status
        self.exitstatus = exitstatus
        self.elapsed = round(elapsed, 3)
        self.log_tail = list(log_tail)
        self.warning_lines = list(warning_lines)
        warned = _WARNINGS.match(exitstatus or '')
        self.warnings = int(warned.group(1)) if warned else 0
        if status == 'running':
            self.succeeded = None
        else:
            self.succeeded = exitstatus == 'OK' or warned is not None


# -------------------------------------------------------------------------------------- protocol

class Provider:
    """The seam every provider implements. ``secret`` is the controller secret that signs ownership
    markers (None: markers can be read but not checked, see :meth:`verify`).

    Methods that act return a task handle (an opaque string the flows record and hand back to
    :meth:`wait` or :meth:`task_status`), or None when there was nothing to do. Failures raise a
    :class:`ProviderError` of the right kind.
    """

    name = None
    # What one workspace's resource is called in reports, and what its id is called.
    noun = 'resource'
    id_noun = 'id'
    # Seconds after a dispatched allocation whose answer was lost during which a complete, empty inventory does not
    # yet prove it made nothing (a cloud may show a new resource late). 0: absence is proven at once.
    absence_window = 0
    # True when a workspace is a set of resources judged together: the provider's set sweep (set_sweep) judges what
    # the journal does not account for, one complete inventory a pass, and cleanup takes a set as its listing read it.
    sweeps_sets = False
    # True when templates are built by this collection and recorded in the journal (template_build): a request's
    # template name resolves to its current version there. Else the provider resolves its own images.
    journal_templates = False
    # The option that binds a connection to one location (aws_region: an EC2 client serves one region), or None when
    # one connection reaches every location of the provider. A sweep of the whole fleet connects once per location,
    # and its report names the location of such a provider's places ("aws eu-west-1").
    location_option = None
    # True when an id is never given to a second resource (an EC2 instance id): a resource found at a destroyed
    # record's id (or launched with its recorded candidate id) can only be that record's, never a newcomer.
    unique_ids = False
    # True when a deletion is complete only once its recorded task ends well (a Hetzner action): absence alone does
    # not complete a deletion whose task the journal holds, since the provider may hide a resource it still deletes.
    confirms_delete_by_task = False
    # (option, launch option key) of each user the provider makes on a machine for the controller's login (an admin
    # user, the user of an SSH key in metadata): the agent is never one of them.
    login_options = ()
    # Why a workspace on this provider cannot be forked yet (flows/fork.py refuses with it); None: it can, through
    # snapshot(), snapshot_exists(), delete_snapshot() and allocations from a snapshot (Allocation.snapshot).
    fork_refusal = ('forking needs a copy of a running machine that the children can be made from, and this '
                    'provider\'s copy (its image or snapshot, and launches from it) is not built yet')
    # Why warm pools cannot be kept on this provider yet (the pool fill and a create refuse a pool declared for it,
    # naming the provider, with this); None: they can, through remark(), which gives a waiting member's resource to
    # the workspace that claims it.
    pool_refusal = ('a claim re-signs a waiting member\'s resource for the workspace that takes it (its marker, its '
                    'name and its lease labels), and this provider\'s re-signing is not built yet')
    # True when a copy made from a snapshot locks its source until it is done (a Proxmox VE clone: ``lock: disk``): a
    # fork's children then clone one at a time, and go on side by side after.
    snapshot_copies_take_turns = False

    def __init__(self, secret=None):
        self.secret = secret
        self.controller = ownership.controller_id(secret) if secret is not None else None

    def with_secret(self, secret):
        """This provider, signing with ``secret``."""
        raise NotImplementedError

    def use_journal(self, journal, claim=None, workspace=None):
        """The journal a run works with in this thread, and the queue claim its writes for ``workspace`` carry: for a
        provider that keeps state of its own in the journal (Azure's sets). Others keep none. Threads that share one
        provider each give their own connection (a connection serves one thread at a time)."""
        return None

    def set_sweep(self, journal, params, counting=False, now=None):
        """For a provider that ``sweeps_sets``: the sweep of a reconcile or cleanup pass that judges every set in its
        scope from one complete inventory, with the quarantine a left-behind set passes before it is deleted (for
        Azure, providers/azure/orphans.py); None for a provider whose resources the passes judge one by one.
        ``params`` the module's options (the sweep's own settings among them); ``counting`` True when the pass may
        count the inventory in the quarantine (never in a report or check mode).

        The sweep answers ``run(records)`` (the groups judged, each with ``base``, ``id``, ``location``, ``verdict``,
        ``why``, ``marker``, ``named``, ``holder``, ``live``, ``deletable`` and ``quarantined``), ``by_id()``,
        ``unchanged(group)`` (read afresh right before a deletion), ``deleted(group)`` and ``sentence(group)``."""
        return None

    @staticmethod
    def serves(api):
        """True when ``api`` is a client of this provider's API (so that it can be wrapped in the provider)."""
        return False

    @classmethod
    def guest_setup(cls, run, layout, address, launch):
        """What the provider puts into a machine of its besides the bootstrap, from the launch settings a request
        recorded (``launch``): a guest step has no provider connection, so this is a class method. ``run(action)``
        calls ``action`` with a connected guest (and returns what it returns); ``layout`` is the guest's layout,
        ``address`` the one SSH reaches. Returns (a sentence for the step's message, or '', [warnings]); raises to
        refuse. Most providers put nothing there: no connection is made."""
        return '', []

    # --- identity and wording

    # How a provider names things needs no connection: these are class methods, usable on the class alone.

    # What a create's candidate and allocation steps are called on this provider: {step: (the short label of its
    # messages, its failures and the queue's current step, the role's task name)}. The steps keep their own names
    # (``step: clone``, the journal's progress, the failpoints); only what is shown changes. step_words() adds the
    # configure and start steps, which name the noun.
    allocation_words = {
        'vmid': ('candidate id', 'candidate id'),
        'clone': ('allocate', 'allocate the resource'),
        'wait_clone': ('wait allocation', 'wait for the allocation'),
    }

    @classmethod
    def step_words(cls):
        """{step: (label, task name)} of the create's steps whose words are this provider's."""
        words = dict(cls.allocation_words)
        words.setdefault('configure', ('configure', 'configure the %s' % cls.noun))
        words.setdefault('start', ('start', 'start the %s' % cls.noun))
        return words

    # What a create waits for after the start, and what to check when it did not come.
    address_source = 'an address'
    address_advice = 'Check the network it is attached to'

    @classmethod
    def start_advice(cls, resource_id):
        """What to look at when a resource did not start, twice."""
        return 'Look at its console or system log'

    @classmethod
    def label(cls, resource_id, location=None):
        """How messages name a resource ('CT 105', 'CT 105 on pve1'): its package's RESOURCE_LABEL
        (resource_label)."""
        return resource_label(cls.name, resource_id, location)

    @classmethod
    def resource_key(cls, resource_id, location=None):
        """The resource's id in cleanup debt: one string that names it and where it lives."""
        raise NotImplementedError

    @classmethod
    def parse_resource_key(cls, key):
        """(resource id, location) of a resource_key; (None, None) for a key that names no resource of ours."""
        raise NotImplementedError

    # --- ownership

    def marker(self, workspace, resource_id, nonce=None):
        """The ownership marker a resource of ``workspace`` with id ``resource_id`` carries (``nonce``: the one the
        journal recorded for this life of the workspace; None makes a fresh one)."""
        return ownership.render(self.secret, self.controller, workspace, resource_id, nonce or ownership.new_nonce())

    def marker_fields(self, resource):
        """The fields of the marker the resource carries (workspace, controller, ...); {} without one."""
        return ownership.parse(resource.marker_text if resource is not None else None) or {}

    def verify(self, resource, workspace=None, nonce=ownership.ANY):
        """The one ownership verdict: VERIFIED, ABSENT, FOREIGN, FORGED, MISMATCH or REPLAYED (core.ownership) for
        ``resource`` as a resource of ``workspace`` (None: whatever workspace a genuine marker names).

        ``nonce`` is the marker nonce of the workspace's record (core.ownership.record_nonce): a marker of another
        life of the workspace is REPLAYED. The default, ANY, is for callers without a record (orphans, sweeps).

        Without the controller secret, only what the marker says: ABSENT, FOREIGN (when the controller id
        is known) or UNVERIFIED.
        """
        if resource is None:
            return ownership.ABSENT
        return ownership.verdict(resource.marker_text, self.secret, self.controller, workspace, resource.id, nonce)

    # --- the lease on the resource

    def labels(self, resource):
        """The lease labels the resource carries (state, expires_at, keep, created_at); {} without any."""
        raise NotImplementedError

    def write_labels(self, resource, labels):
        """Replace the lease labels on the resource (its marker untouched), so that a sweep that has no journal
        still reads the lease; Conflict when the resource changed since it was read."""
        raise NotImplementedError

    def remark(self, resource, workspace, nonce, hostname, labels=None, created_by=None):
        """Give ``resource`` (a warm pool member's) to ``workspace``: its marker signed for it with ``nonce``, its
        host name ``hostname`` (or its name in the provider, where that is what the provider can change), its
        lease ``labels`` and, where the provider tags who asked for a machine, ``created_by`` (the workspace's
        requester, in place of whoever filled the pool); Conflict when the resource changed since it was read.
        Only for a provider without a ``pool_refusal``."""
        raise NotImplementedError

    # --- allocation

    def check_source(self, source, location, scope):
        """The location the source lives at, after checking that ``source`` can be allocated from and ``scope``
        exists; Refused with what to change otherwise."""
        raise NotImplementedError

    def check_storage(self, location, storage):
        """Refused, saying what there is, unless ``storage`` can hold new resources at ``location``."""
        raise NotImplementedError

    def candidate(self, avoid=(), sleep=None):
        """A free id to allocate at (reserving nothing), none of ``avoid``; Conflict when the provider keeps
        offering ids of ``avoid`` (``sleep`` pauses between asking again)."""
        raise NotImplementedError

    def candidate_for(self, workspace, stamp, avoid=(), sleep=None):
        """The candidate id of ``workspace``'s record made at ``stamp`` (a provider whose ids come from the answer
        derives its idempotency token from them); the others take :meth:`candidate`."""
        return self.candidate(avoid, sleep=sleep)

    def resolve_source(self, source):
        """The id to allocate from for what a request names as its source (an image name resolved once, to be
        recorded); ``source`` itself where the provider resolves nothing."""
        return source

    def launch_options(self):
        """The provider's own settings of an allocation, for the request's record (None: it has none)."""
        return None

    def login_users(self):
        """{option: user} of the users the provider makes on a machine for the controller's login."""
        launch = self.launch_options() or {}
        return {option: launch[key] for option, key in self.login_options if launch.get(key)}

    def resource_of(self, candidate, task, location=None):
        """The id of the resource the allocation of ``candidate`` made (``task``: its handle, or None): the
        candidate itself where the candidate id is the resource's id."""
        return candidate

    def allocate(self, allocation):
        """Allocate ``allocation.candidate`` with the marker of ``allocation.workspace``; a task handle.

        Conflict when the id is taken (by anyone, also by our own earlier call), UnknownOutcome when the
        answer was lost: look at the candidate (:meth:`find`, :meth:`verify`) before anything else.
        """
        raise NotImplementedError

    def allocation_task(self, allocation, since):
        """The handle of the task that allocated ``allocation.candidate`` at or after ``since`` (seconds since
        the epoch) when exactly one task of ours fits; else None."""
        raise NotImplementedError

    # --- looking

    def ref(self, resource_id, location):
        """A resource to act on without looking at it first (its id and location as recorded)."""
        return Resource(resource_id, location)

    def find(self, resource_id, location=None, search=False):
        """The resource, or None when it does not exist at ``location``; with ``search``, also when it is
        elsewhere in the provider (moved)."""
        raise NotImplementedError

    def find_listed(self, entry):
        """The resource of a :meth:`list` entry (of any kind), or None when it is gone."""
        return self.find(entry['id'], entry['location'])

    def power(self, resource, absent_ok=True):
        """The resource's :class:`Power` (state None when it does not exist; NotFound instead unless ``absent_ok``)."""
        raise NotImplementedError

    def addresses(self, resource):
        """The resource's addresses as (interface, family, address) tuples (family ``inet`` or ``inet6``), loopback
        left out; [] when it has none (or is not running)."""
        raise NotImplementedError

    # Where the provider publishes a new machine's SSH host keys out of band, through its API (None: nowhere, and the
    # first SSH connection trusts the key it is shown).
    host_key_source = None
    # What makes the machine publish its keys there, said when it published none (a sentence).
    host_key_advice = ''

    def published_host_keys(self, resource):
        """The SSH host keys ("type base64") the machine published through the provider's API, read now: [] while
        none are published yet. Only for a provider with a ``host_key_source``."""
        raise NotImplementedError

    def lift_deadline(self, resource):
        """Take the provider's own deletion time off a retained resource (a sentence of what was done), or None when
        the provider sets no such time."""
        return None

    def unlock_hint(self, resource_id):
        """What to do about a resource that stays locked (a sentence), or ''."""
        return ''

    def list(self, every_kind=False):
        """Every resource the provider shows us that is not a source (a template, an image), as dicts: ``id``,
        ``location``, ``kind``, ``name``, ``status``, ``lock``, ``pool`` (the scope it sits in), ``tags`` (a list).
        Only resources of the kind workspaces are, unless ``every_kind``."""
        raise NotImplementedError

    def in_scope(self, entry, scope, tag=None):
        """True when a :meth:`list` entry sits in ``scope`` (pool) or carries ``tag``."""
        raise NotImplementedError

    # --- acting

    def plan_settings(self, resource, settings):
        """{name: (before, after)} of the settings that differ from ``settings``; the names are the provider's
        own (what a diff shows)."""
        raise NotImplementedError

    def apply_settings(self, resource, changes):
        """Write ``changes`` ({name: (before, after)}), refusing if the resource changed since it was found."""
        raise NotImplementedError

    def start(self, resource):
        """Start it; a task handle, or None when it runs already."""
        raise NotImplementedError

    def shutdown(self, resource, timeout):
        """Ask it to shut down within ``timeout`` seconds; a task handle, or None when it is not running."""
        raise NotImplementedError

    def stop(self, resource):
        """Stop it by force; a task handle, or None when it is not running."""
        raise NotImplementedError

    # --- images (what allocations are made from)

    def is_image(self, resource):
        """True when ``resource`` (as found) is an image allocations are made from, never to be changed: a
        template, which is never started, configured or provisioned in place."""
        raise NotImplementedError

    def make_image(self, resource):
        """Turn ``resource`` (stopped, ours, just provisioned) into an image new allocations are made from; a task
        handle. It cannot be undone: the image is only ever cloned or deleted from then on."""
        raise NotImplementedError

    def snapshot(self, resource, name, description):
        """Take snapshot ``name`` of ``resource`` (running) with ``description`` (the fork's marker); a task
        handle. Conflict when a snapshot of that name exists."""
        raise NotImplementedError

    def snapshot_exists(self, resource, name):
        """Whether ``resource`` has a finished snapshot ``name``."""
        raise NotImplementedError

    def snapshot_pending(self, resource, name):
        """Whether snapshot ``name`` of ``resource`` is on its way (asked for, not finished): by default while the
        resource holds a lock."""
        found = self.find(resource.id, resource.location)
        return found is not None and bool(found.lock)

    def delete_snapshot(self, resource, name):
        """Delete snapshot ``name`` of ``resource``; a task handle, or None when there is none (or no resource)."""
        raise NotImplementedError

    def delete_blocker(self, resource, source=None):
        """A sentence saying what a person must do before ``resource`` can be deleted (no retry cures it), or
        None. ``source``: what it was allocated from (its tasks may legitimately hold it)."""
        raise NotImplementedError

    def delete(self, resource):
        """Delete it with everything it owns; a task handle. NotFound when it is gone already."""
        raise NotImplementedError

    def delete_options(self):
        """What a delete sends besides the resource's id, for the record of what was dispatched."""
        return {}

    def deleted_since(self, resource_id, location, since):
        """True when a delete of ``resource_id`` by us, started at or after ``since``, finished successfully
        (so a resource found at that id now is a newcomer)."""
        raise NotImplementedError

    # --- tasks

    def wait(self, handle, timeout):
        """Wait for a task; its result (``succeeded``, ``warnings``, ``warning_lines``, ``log_tail``) if it
        succeeded. TaskFailed when it failed, TaskTimeout when it runs on at the deadline, NotFound when the
        provider does not know it."""
        raise NotImplementedError

    def task_status(self, handle):
        """One look at a task: its result, whatever the outcome (``status``: running or stopped,
        ``exitstatus``)."""
        raise NotImplementedError

    def close(self):
        """Let go of connections."""


# --------------------------------------------------------------------------------------- helpers

def first_address(addresses, family='inet', expected=None):
    """The first address of ``family`` in :meth:`Provider.addresses` (``expected`` only), or None."""
    for dummy, fam, address in addresses or ():
        if fam == family and (expected is None or address == expected):
            return address
    return None


def reachable_address(addresses):
    """The address to reach a machine at: its first IPv4 address, else its first global IPv6 one, else None."""
    inet6 = [a for n, f, a in addresses or () if f == 'inet6' and not a.lower().startswith('fe80:')]
    return first_address(addresses) or (inet6[0] if inet6 else None)


# ------------------------------------------------------------------------------------- inventory

class InventoryConfigError(EphemeraError):
    """The inventory's options do not make a connection to a provider; the message is the whole advice."""


class InventoryHook:
    """What the inventory plugin (plugins/inventory/workspaces.py) needs of one provider besides the seam: how its
    workspaces are listed (``listing``), which inventory option names more places to read (``scope_option``), what
    one such place is called in a warning (``scope_word``), how to connect from the inventory's options, and the
    advice for a refusal. Each provider package declares one as HOOK in its inventory.py; the registry finds it
    (registry.inventory_hook), so the inventory names no provider.

    ``listing`` is one of:

    - ``cluster``: one connection lists every guest of the default provider (the Proxmox VE cluster), with a few
      reads of their own (addresses, markers); see ClusterHook.
    - ``instances``: one listing per location (``scope``), each instance's marker read through the provider.
    - ``sets``: one connection reads each scope (a resource group) once, whole sets of resources with their markers
      and addresses (read_sets).
    """

    name = None
    listing = 'instances'
    # None: the inventory has no option of this provider's places, and reads it where the journal's workspaces are.
    scope_option = None
    scope_word = 'region'
    # The workspace (and orphan) key that names its scope, for a ``sets`` provider.
    scope_key = None
    # What connecting needs installed on the controller, and what the inventory needs to be allowed to read.
    sdk = None
    needs = ''

    def record_scope(self, record):
        """The scope a workspace record of this provider was made in (None: none recorded)."""
        return record.get('location')

    def provider_class(self):
        """The provider's class (importing it may raise ImportError: its SDK is missing)."""
        raise NotImplementedError

    def params(self, option, scope):
        """The provider's params (as a module's options) from the inventory's options: ``option(name)`` gives one."""
        raise NotImplementedError

    def where(self, option, scope):
        """The options (and the scope) an error of the connection to ``scope`` is about."""
        raise NotImplementedError

    def connect(self, option, scope, secret):
        """The provider to read ``scope`` with (None: one connection reads every scope), signing with ``secret``;
        InventoryConfigError says what to fix when the options (or the SDK) do not make one."""
        try:
            return self.provider_class().from_params(self.params(option, scope), secret)
        except ImportError as err:
            raise InventoryConfigError('the %s workspaces need %s: %s' % (self.name, self.sdk, err))
        except ProviderError as err:
            raise InventoryConfigError('%s: %s' % (self.where(option, scope), err))

    def refused(self, option, scope, err):
        """The inventory's error text for a refusal (Refused) ``err`` met while reading ``scope``."""
        return '%s: %s%s' % (self.where(option, scope), err, self.needs)

    def read_sets(self, provider, scope):
        """For a ``sets`` provider: the sets of ``scope``, each a listing entry (``id``, ``location``, ``status``,
        ``marker_text``, ``native``, ``address``, ``set``, ``members``, ``problem``)."""
        raise NotImplementedError


class ClusterHook(InventoryHook):
    """What the inventory needs of the default provider, whose one connection lists every guest."""

    listing = 'cluster'
    # The inventory options of the connection, and the environment variable each falls back to.
    connection_options = ()
    env_vars = {}
    # The option that names the cluster (an unreachable cluster's warning names it), and what the verbose message
    # says when the options name none (the inventory is then the journal alone).
    endpoint_option = None
    unconfigured = None

    def connect_cluster(self, params):
        """The provider from the connection options ``params`` (each None when the file does not set it), or None when
        they name no cluster; InventoryConfigError when they are wrong."""
        raise NotImplementedError

    def misconfigured(self, err, provider, where):
        """The inventory's error text when ``err`` means a wrong configuration (credentials, TLS, privileges), None
        when the cluster could not be reached; ``where(*options)`` names options and where their values came from."""
        raise NotImplementedError

    def addresses(self, answer):
        """Provider.addresses() of a guest from the provider's own answer of its interfaces."""
        raise NotImplementedError
