# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Building a template version: clone, provision, verify, clean, convert, then switch the pointer.

A template is never edited in place: linked clones come from a template's base volume, so a change to a
template reaches none of them, and a half-changed template would be cloned half-changed. A build clones the
source template (full clone) into a **candidate** container with our marker, provisions and checks the
candidate, converts it into a new template and only then, in one journal transaction, switches the template
name's **pointer** to the new version. Creates that name the template resolve the pointer when their request
is recorded, so they go on from the current version during the whole build.

The candidate is carried by a workspace record of its own (``tb-<template>-v<version>``, with
``params.build``): the clone, start, address and SSH steps are the create flow's, with their crash safety
(the candidate id recorded before the clone, the marker written with it, a lost answer looked at before
anything is cloned again); an abort destroys the candidate through the destroy flow's ownership-checked
steps. After the conversion the record's status is ``template``: it records the version's container.

The versions of a template are kept (``template_versions``); the pointer keeps the previous one too, so a
switch back (``version``) is the same compare-and-set. Old versions are never removed by a build; which could
go (no linked clone is recorded from them) is reported.
"""

import time

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import failpoint
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import ownership
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import pools
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import waiter
from ansible_collections.ephemera.workspaces.plugins.module_utils.core.errors import EphemeraError, JournalError
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.base import StepResult
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import (
    TEMPLATE_NAME,
    CreateFlow,
    resolve_template,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import (
    STEPS as DESTROY_STEPS,
    DestroyFlow,
)
from ansible_collections.ephemera.workspaces.plugins.module_utils.guest import template as provisioning
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import (
    InvalidRequest,
    TaskTimeout,
    UnknownOutcome,
)

STEPS = ('prepare', 'vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh', 'provision', 'verify',
         'clean', 'stop', 'convert', 'finalize')
STEP_LABELS = {
    'prepare': 'prepare', 'vmid': 'candidate vmid', 'clone': 'clone the source', 'wait_clone': 'wait for the clone',
    'configure': 'configure', 'start': 'start', 'address': 'wait for its address', 'ssh': 'wait for SSH',
    'provision': 'provision', 'verify': 'verify the tools', 'clean': 'clean', 'stop': 'stop',
    'convert': 'convert to a template', 'finalize': 'switch the pointer', 'abort': 'abort', 'switch': 'switch',
}
# The create flow's steps, run on the candidate's record.
CLONE_STEPS = ('vmid', 'clone', 'wait_clone', 'configure', 'start', 'address', 'ssh')
STEP_STATUS = {'provision': 'bootstrapping', 'verify': 'bootstrapping', 'clean': 'bootstrapping',
               'stop': 'bootstrapping', 'convert': 'bootstrapping'}
BUILD_PREFIX = 'tb-'
# Where the create flow would put a checkout and the runner's state: never in a template.
STATE_DIR = '/var/lib/ephemera'


class TemplateError(EphemeraError):
    """A build or switch step could not finish; the message says what to do."""


def candidate_name(template, version):
    """The workspace record that carries version ``version`` of ``template``."""
    return '%s%s-v%d' % (BUILD_PREFIX, template, int(version))


def build_of(ws):
    """{template, version} of a build candidate's record, or None for a workspace's."""
    return ((ws or {}).get('params') or {}).get('build')


def validate_name(name):
    if not isinstance(name, str) or not TEMPLATE_NAME.match(name):
        raise TemplateError('Invalid template name %r: use 1 to 30 lower-case letters, digits and dashes, starting and '
                            'ending with a letter or digit.' % (name,))


def failure_message(name, step, err):
    if step in STEPS:
        return 'The build of template %s failed at step %d/%d (%s): %s' % (
            name, STEPS.index(step) + 1, len(STEPS), STEP_LABELS[step], err)
    return 'Template %s, %s: %s' % (name, STEP_LABELS.get(step, step), err)


class CandidateFlow(CreateFlow):
    """The create flow's steps on a build candidate's record, and the build's own steps on the candidate."""

    STEP_STATUS = dict(CreateFlow.STEP_STATUS, **STEP_STATUS)

    def run_build_step(self, step):
        if self.ws is None:
            raise TemplateError('No build is recorded for this template: run the prepare step first.')
        if step in CLONE_STEPS:
            return self.run(step)
        failpoint.enter(self.name, 'template.' + step)
        if step in self.ws['progress']:
            return StepResult(False, '%s: already done' % STEP_LABELS[step])
        if self.check_mode:
            return StepResult(True, '%s: would run' % STEP_LABELS[step])
        if step in STEP_STATUS and self.ws['status'] != STEP_STATUS[step]:
            self.save('status', detail={'step': step, 'status': STEP_STATUS[step]}, status=STEP_STATUS[step],
                      failure=None)
        try:
            return getattr(self, 'step_' + step)()
        except EphemeraError as err:
            if not getattr(err, 'recorded', False):
                try:
                    self.fail(step, err)
                except JournalError:
                    pass
            raise

    @property
    def spec(self):
        return self.request['build']

    def _refuse_image(self, what):
        """The candidate as found, after refusing to touch anything that is not our candidate or is a template."""
        resource = self.provider.find(self.resource_id, self.location)
        if resource is None:
            raise TemplateError('The candidate %s is gone; the build cannot %s it. Build again.'
                                % (self.provider.label(self.resource_id), what))
        if self.provider.verify(resource, self.name) != ownership.VERIFIED:
            raise TemplateError('%s does not carry our marker for %s; it is not touched.'
                                % (self.provider.label(resource.id), self.name))
        if self.provider.is_image(resource):
            raise TemplateError('%s is a template: a template is never changed in place (its linked clones come '
                                'from its base volume). Build a new version instead.' % self.provider.label(resource.id))
        return resource

    def _guest_step(self, step, action):
        self._refuse_image(step)

        def checked(guest):
            # Provisioning and cleaning run as root with absolute paths: only ever in the candidate itself, never in a
            # machine that answers at its address (the try-out cluster's host-tier guests are this machine).
            name = guest.run('cat /proc/sys/kernel/hostname', what='the guest\'s host name').stdout.strip()
            expected = 'agent-%s' % self.name
            if name != expected:
                raise TemplateError('The machine answering at %s calls itself %r, not %r: it is not the candidate '
                                    'container, and nothing is provisioned or cleaned there. Build on guests that '
                                    'are containers of their own (on the try-out cluster: up --guests debian).'
                                    % (self.ws['address'], name, expected))
            return action(guest)
        return self._with_guest(checked)

    def step_provision(self):
        spec = self.spec
        started = time.monotonic()
        self._guest_step('provision', lambda g: provisioning.provision(
            g, spec['packages'], spec['npm_packages'], spec['agent_commands'], spec['agent_user'],
            self.params['provision_timeout']))
        seconds = round(time.monotonic() - started, 1)
        self.done('provision', facts=dict(self.ws['facts'], provision_seconds=seconds))
        return StepResult(True, 'provision: %d package(s) as root, %d npm package(s) and %d command(s) as %s'
                          % (len(spec['packages']), len(spec['npm_packages']), len(spec['agent_commands']),
                             spec['agent_user']), seconds=seconds)

    def step_verify(self):
        spec = self.spec
        versions = self._guest_step('verify', lambda g: provisioning.verify(
            g, spec['tools'], spec['agent_user'], self.params['provision_timeout']))
        self.done('verify', facts=dict(self.ws['facts'], tools=versions))
        return StepResult(True, 'verify: %d tool(s) answer as %s' % (len(versions), spec['agent_user']), tools=versions)

    def step_clean(self):
        spec = self.spec
        self._guest_step('clean', lambda g: provisioning.clean(
            g, spec['agent_user'], self.request['checkout_path'], STATE_DIR, self.params['provision_timeout']))
        self.done('clean')
        return StepResult(True, 'clean: no repository, credentials, histories, host keys, machine id or caches')

    def step_stop(self):
        resource = self._refuse_image('stop')
        label = self.provider.label(resource.id)
        if not self.provider.power(resource).running:
            self.done('stop')
            return StepResult(False, 'stop: %s is stopped' % label)
        self._stop(resource, self.params['shutdown_timeout'], 'to convert it into a template')

        def probe(remaining):
            return waiter.pending() if self.provider.power(resource).running else waiter.done()
        if not waiter.wait_for(probe, self.params['task_timeout'], waiter.Backoff(start=0.2, maximum=2.0),
                               what='%s to be stopped' % label).ok:
            raise TemplateError('%s is still running %d s after a forced stop; it cannot be converted. Check its '
                                'tasks (or activity log) for the stop, stop it by hand and build again.'
                                % (label, self.params['task_timeout']))
        self.done('stop')
        return StepResult(True, 'stop: %s stopped' % label)

    def step_convert(self):
        resource = self.provider.find(self.resource_id, self.location)
        if resource is None or self.provider.verify(resource, self.name) != ownership.VERIFIED:
            raise TemplateError('The candidate %s is gone or no longer carries our marker; it is not converted. Build '
                                'again.' % self.provider.label(self.resource_id))
        label = self.provider.label(resource.id)
        if self.provider.is_image(resource):
            # Converted by an earlier run whose answer was lost.
            self.done('convert')
            return StepResult(True, 'convert: %s is a template (converted by an earlier run)' % label)
        if self.provider.power(resource).running:
            raise TemplateError('%s runs again; it is not converted while it runs. Build again.' % label)
        self.save('convert', kind='dispatched', detail={'vmid': resource.id})
        try:
            upid = self.provider.make_image(resource)
            if upid:
                self.save('convert', detail={'upid': upid}, **self.with_task('convert', upid))
                self.provider.wait(upid, timeout=self.params['task_timeout'])
        except (UnknownOutcome, TaskTimeout) as err:
            self.event('observed', 'convert_unknown', {'vmid': resource.id, 'error': str(err)})

        def probe(remaining):
            found = self.provider.find(resource.id, resource.location)
            return waiter.done() if found is not None and self.provider.is_image(found) else waiter.pending()
        if not waiter.wait_for(probe, self.params['task_timeout'], waiter.Backoff(start=0.2, maximum=2.0),
                               what='%s to become a template' % label).ok:
            raise TemplateError('%s did not become a template within %d s. Check its tasks (or activity log) for the '
                                'conversion, then build again (the candidate is removed; task_timeout gives a slow '
                                'conversion more time).' % (label, self.params['task_timeout']))
        self.done('convert')
        return StepResult(True, 'convert: %s is a template' % label)


class TemplateBuild:
    """The steps of one template's build (or switch); ``params`` the module's options (``template`` the name)."""

    def __init__(self, journal, client, params, secret, claim=None, check_mode=False):
        self.journal = journal
        self.client = client
        self.params = params
        self.secret = secret
        self.claim = claim
        self.check_mode = check_mode
        self.name = params['template']
        self.candidate = None

    # ------------------------------------------------------------------ records

    def building(self):
        """The version this template's build is working on, or None."""
        versions = self.journal.template_versions(self.name, state='building') if self.journal is not None else []
        return versions[-1] if versions else None

    def candidate_flow(self, version):
        params = dict(self.params, name=version['workspace'])
        return CandidateFlow(self.journal, self.client, params, self.secret, claim=self.claim,
                             check_mode=self.check_mode)

    @property
    def provider(self):
        return registry.bind(self.client, self.secret)

    # ------------------------------------------------------------------ running

    def run(self, step):
        validate_name(self.name)
        if step == 'prepare':
            return self.prepare()
        if step == 'switch':
            return self.switch()
        version = self.building()
        if version is None:
            if self.check_mode:
                return StepResult(True, '%s: would run' % STEP_LABELS[step])
            raise TemplateError('No build of template %s is in progress: run the prepare step first.' % self.name)
        self.candidate = self.candidate_flow(version)
        if step == 'finalize':
            return self.finalize(version)
        return self.candidate.run_build_step(step)

    # ------------------------------------------------------------------ 1. prepare

    def _spec(self):
        p = self.params
        tools = [t if isinstance(t, dict) else {'name': t} for t in p['tools']]
        try:
            provisioning.check_spec(p['packages'], p['npm_packages'], p['agent_commands'], tools, p['agent_user'])
        except provisioning.ProvisionError as err:
            raise TemplateError(str(err))
        if p['agent_user'] == p['ssh_user']:
            raise TemplateError('agent_user %r is ssh_user as well: the agent of every workspace of this template '
                                'would hold the controller\'s login to it. Give an unprivileged user of its own, such '
                                'as agent (the default), and keep ssh_user root.' % (p['agent_user'],))
        return {'template': self.name, 'packages': list(p['packages']), 'npm_packages': list(p['npm_packages']),
                'agent_commands': list(p['agent_commands']), 'tools': tools, 'agent_user': p['agent_user']}

    def _source(self, provider):
        """(vmid, node, {name, version} or None) of the source, checked to be a template that can be cloned."""
        source = self.params.get('source')
        if source in (None, ''):
            pointer = self.journal.template(self.name) if self.journal is not None else None
            if not pointer or pointer['current'] is None:
                raise TemplateError('Template %s has no version yet, so there is nothing to build from: give source, '
                                    'the VMID of a prepared template (the seed) or another template\'s name.'
                                    % self.name)
            source = self.name
        vmid, node, named = resolve_template(self.journal, source)
        try:
            node = provider.check_source(vmid, self.params.get('node') or node, self.params['pool'])
        except InvalidRequest as err:
            raise TemplateError(str(err))
        storage = self.params.get('storage')
        if storage:
            try:
                provider.check_storage(node, storage)
            except InvalidRequest as err:
                raise TemplateError(str(err))
        return vmid, node, named

    def _refuse_in_place(self, provider, source_vmid):
        target = self.params.get('vmid')
        if target is None:
            return
        if int(target) == int(source_vmid):
            raise TemplateError('vmid %s is the source template: a build never changes a template in place. Leave '
                                'vmid unset (a new VMID is taken) or give a free one.' % target)
        found = provider.find(int(target), search=True)
        if found is not None:
            what = 'a template' if provider.is_image(found) else 'an existing container'
            raise TemplateError('vmid %s is %s: a build never writes into an existing guest, least of all a template '
                                '(its linked clones would not see the change). Leave vmid unset or give a free one.'
                                % (target, what))

    def prepare(self):
        spec = self._spec()
        provider = self.provider
        vmid, node, named = self._source(provider)
        self._refuse_in_place(provider, vmid)
        left = self.building()
        if self.check_mode:
            return StepResult(True, 'prepare: would build template %s from %s%s' % (
                self.name, provider.label(vmid), ' (abandoning the unfinished build v%d)' % left['version']
                if left else ''))
        finished = self.finish_built()
        aborted = []
        if left is not None:
            # An earlier build died before it finished: its candidate goes, its version is failed; the pointer never
            # moved for it.
            self.abort(left, TemplateError('abandoned: the run that built it stopped before it finished'))
            aborted.append(left['version'])
        source = {'vmid': vmid, 'node': node}
        if named:
            source.update(named)
        entry = (self.claim or {}).get('entry_id')
        version = self.journal.begin_template_version(
            self.name, source, lambda v: candidate_name(self.name, v), entry=entry, claim=self.claim)
        ws_name = version['workspace']
        if self.journal.get_workspace(ws_name) is not None:
            err = TemplateError('A workspace named %s is recorded already; the build cannot use that name for its '
                                'candidate. Destroy or rename that workspace, then build again.' % ws_name)
            self.journal.update_template_version(self.name, version['version'], state='failed',
                                                 errors=[str(err)], claim=self.claim)
            raise err
        p = self.params
        req = dict(template=vmid, node=node, pool=p['pool'], full_clone=True, storage=p.get('storage'), repo=None,
                   ref=None, purpose=None, agent=None, agents={}, cores=p['cores'], memory=p['memory'],
                   bridge=p['bridge'], address_mode=p['address_mode'], address_range=p.get('address_range'),
                   address_prefix=p['address_prefix'], gateway=p.get('gateway'),
                   checkout_path=p['checkout_path'], guest_root='/', ssh_user=p['ssh_user'], ssh_port=p['ssh_port'],
                   agent_user=spec['agent_user'], tags=['ephemera-template-build'],
                   ssh_key_path=p['ssh_private_key'], inputs={}, build=dict(spec, version=version['version']))
        self.journal.create_workspace(ws_name, status='requested', desired_state='present', params=req,
                                      purpose='build of template %s v%d' % (self.name, version['version']),
                                      progress={'request': time.time()}, provider=provider.name, location=node,
                                      candidate_id=p.get('vmid'), lease=None, cleanup={}, claim=self.claim)
        return StepResult(True, 'prepare: building template %s v%d from %s%s' % (
            self.name, version['version'], provider.label(vmid),
            '; the unfinished build v%d was abandoned' % aborted[0] if aborted else ''),
            version=version['version'], candidate=ws_name, source=source, aborted=aborted, finished=finished)

    def finish_built(self):
        """Finish the records of built versions whose run died after the pointer switch (finalize's first commit,
        the version built and current from then on), so that no later step would: the address goes back, the
        record becomes the version's template record. Returns those versions."""
        finished = []
        for version in self.journal.template_versions(self.name, state='built'):
            ws = self.journal.get_workspace(version['workspace'])
            if ws is None or ws['status'] in ('template', 'destroyed'):
                continue
            flow = self.candidate_flow(version)
            self.journal.release_address(flow.name, claim=self.claim)
            flow.save('template', status='template', failure=None,
                      progress=dict(flow.ws['progress'], finalize=flow.ws['progress'].get('finalize') or time.time()))
            finished.append(version['version'])
        return finished

    # ------------------------------------------------------------------ finalize

    def finalize(self, version):
        flow = self.candidate
        ws = flow.ws
        if self.check_mode:
            return StepResult(True, 'switch the pointer: would point %s at v%d' % (self.name, version['version']))
        missing = [s for s in STEPS[1:-1] if s not in ws['progress']]
        if missing:
            raise TemplateError('The build of %s v%d has not finished %s; the pointer is not switched.'
                                % (self.name, version['version'], ', '.join(missing)))
        self.journal.update_template_version(self.name, version['version'], resource_id=ws['resource_id'],
                                             location=ws['location'], provider=ws['provider'],
                                             tools=ws['facts'].get('tools') or {}, claim=self.claim)
        failpoint.enter(flow.name, 'template.finalize')
        pointer = self.journal.switch_template(self.name, version['version'], claim=self.claim, finish_build=True)
        drained = self._drain(pointer['current'])
        flow.ws = self.journal.get_workspace(flow.name)
        # A template has no address of its own: a static one goes back to the range.
        self.journal.release_address(flow.name, claim=self.claim)
        flow.save('template', status='template', failure=None,
                  progress=dict(flow.ws['progress'], finalize=time.time()))
        return StepResult(True, 'switch the pointer: template %s is v%d (%s) now; v%s kept for a switch back'
                          % (self.name, version['version'], flow.provider.label(ws['resource_id']),
                             pointer['previous'] if pointer['previous'] is not None else '-'),
                          version=version['version'], previous=pointer['previous'], vmid=ws['resource_id'],
                          tools=ws['facts'].get('tools') or {}, removable=self.removable(), drained=drained)

    def removable(self):
        """Versions older than the previous one that no recorded workspace was cloned from (reported, never removed
        by a build)."""
        pointer = self.journal.template(self.name) or {}
        keep = set(v for v in (pointer.get('current'), pointer.get('previous')) if v is not None)
        users = {}
        for ws in self.journal.list_workspaces():
            if ws['status'] != 'destroyed' and not build_of(ws):
                source = (ws['params'] or {}).get('template')
                users[source] = users.get(source, 0) + 1
        out = []
        for version in self.journal.template_versions(self.name, state='built'):
            if version['version'] not in keep:
                out.append({'version': version['version'], 'vmid': version['resource_id'],
                            'clones': users.get(version['resource_id'], 0)})
        return out

    # ------------------------------------------------------------------ abort

    def abort(self, version, err):
        """Remove the candidate of ``version`` through the destroy flow's ownership-checked steps and record the
        version as failed with every error met; the pointer stays where it is. Returns the errors."""
        errors = list(version.get('errors') or [])
        errors.append(str(err))
        ws = self.journal.get_workspace(version['workspace'])
        if ws is not None and ws['status'] != 'destroyed':
            params = dict(self.params, name=version['workspace'])
            flow = DestroyFlow(self.journal, self.client, params, self.secret, claim=self.claim)
            for step in DESTROY_STEPS:
                try:
                    flow.ws = self.journal.get_workspace(version['workspace'])
                    flow.run(step)
                except EphemeraError as destroy_err:
                    errors.append('removing the candidate: %s' % destroy_err)
                    break
        left = self.journal.get_workspace(version['workspace'])
        self.journal.update_template_version(self.name, version['version'], state='failed', errors=errors,
                                             resource_id=(left or {}).get('resource_id'), claim=self.claim)
        return errors

    # ------------------------------------------------------------------ switch

    def switch(self):
        """Point the template at an earlier built version (``version``), after checking its container is still our
        template; the same compare-and-set as a build's finalize."""
        wanted = self.params.get('version')
        if wanted is None:
            raise TemplateError('The switch step needs version, the built version to point %s at.' % self.name)
        pointer = self.journal.template(self.name) if self.journal is not None else None
        version = self.journal.template_version(self.name, wanted) if self.journal is not None else None
        built = [v['version'] for v in self.journal.template_versions(self.name, state='built')] if self.journal else []
        if version is None or version['state'] != 'built':
            raise TemplateError('Template %s has no built version %s (built: %s). Give one of those.'
                                % (self.name, wanted, ', '.join('v%d' % v for v in built) or 'none'))
        if pointer and pointer['current'] == version['version']:
            return StepResult(False, 'switch: template %s is v%d already' % (self.name, version['version']),
                              version=version['version'], previous=pointer['previous'], vmid=version['resource_id'])
        flow = self.candidate_flow(version)
        resource = flow.provider.find(version['resource_id'], version['location'], search=True)
        if resource is None or flow.provider.verify(resource, version['workspace']) != ownership.VERIFIED \
                or not flow.provider.is_image(resource):
            raise TemplateError('Version %d of %s (%s) is no longer our template in the cluster; the pointer stays at '
                                'v%s. Build a new version instead.' % (
                                    version['version'], self.name, flow.provider.label(version['resource_id']),
                                    pointer['current'] if pointer else '-'))
        if self.check_mode:
            return StepResult(True, 'switch: would point %s at v%d' % (self.name, version['version']))
        pointer = self.journal.switch_template(self.name, version['version'],
                                               expected=pointer['current'] if pointer else None, claim=self.claim)
        drained = self._drain(pointer['current'])
        return StepResult(True, 'switch: template %s is v%d (%s) now; v%s kept'
                          % (self.name, pointer['current'], flow.provider.label(version['resource_id']),
                             pointer['previous']), version=pointer['current'], previous=pointer['previous'],
                          vmid=version['resource_id'], drained=drained)

    def _drain(self, current):
        """Release the warm pool members made from another version of this template: they are never given out (a
        claim checks the version too, so a run that dies before this line gives none out either)."""
        return sorted(m['member'] for m in pools.drain(self.journal, self.name, current, claim=self.claim))


def handle_failure(build, step, err):
    """After a failed build step: abort the build (when one is in progress and the step is one of its own), so that
    the pointer stays and no candidate is left. The errors recorded, or None when nothing was aborted."""
    if step in ('prepare', 'switch') or build.journal is None or build.check_mode:
        return None
    version = build.building()
    if version is None:
        return None
    return build.abort(version, err)
