"""A controller run without ansible-playbook: the create, destroy and reconcile playbooks' task sequences, each
task a module process, as fast as the modules themselves allow.

    python -m tests.faults.driver PLAN.json RESULT.json

PLAN: {"common": {module options every task gets}, "connection": {API options}, "ops": [
          {"op": "create", "workspace": "w1", "request": {create options}, "secrets": {...}},
          {"op": "destroy", "workspace": "w1"}, {"op": "reconcile"} ]}
RESULT (written when the run ends, never when it is killed): {"ops": [{"op", "workspace", "ok", "msg", "tasks"}]}

Each task is a fork of this process running the module's own ``main()`` with its arguments, exactly
as Ansible hands them over: argument parsing, check mode, ``exit_json`` and ``fail_json`` are the
module's. The task order, the ``when`` conditions and the rescue of the roles are mirrored here step
for step (roles/workspace_create, roles/workspace_destroy, playbooks/reconcile.yml). The process
detaches from its starter (double fork, own session), so that it is the run the modules' queue
claims name as their owner, just as ``ansible-playbook`` is in a real run; a fault that kills "the
run" kills this process and its module process.
"""

import importlib
import json
import os
import sys
import traceback

from ansible.module_utils import basic

from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.create import STEPS as CREATE_STEPS
from ansible_collections.ephemera.workspaces.plugins.module_utils.flows.destroy import STEPS as DESTROY_STEPS

MODULES = ('workspace_create', 'workspace_destroy', 'workspace_reconcile', 'workspace_archive', 'workspace_info',
           'queue')
PACKAGE = 'ansible_collections.ephemera.workspaces.plugins.modules.'
# Loaded once, before any fork: every task starts with its module already imported.
LOADED = dict((name, importlib.import_module(PACKAGE + name)) for name in MODULES)
WITH_CONNECTION = ('workspace_create', 'workspace_destroy', 'workspace_reconcile')


class TaskFailed(Exception):
    def __init__(self, name, result):
        Exception.__init__(self, '%s: %s' % (name, result.get('msg')))
        self.result = result


class Run:
    def __init__(self, plan):
        self.plan = plan
        self.tasks = []

    def call(self, module, args, check=False, may_fail=False):
        """One task: fork, run the module with ``args``, read its JSON answer."""
        args = dict(args)
        args.update(journal_path=self.plan['common']['journal_path'])
        if module in WITH_CONNECTION:
            args.update(self.plan['connection'])
        args.update(_ansible_check_mode=check, _ansible_no_log=False, _ansible_module_name=module)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            code = 1
            try:
                os.dup2(write, 1)
                basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()
                basic._ANSIBLE_PROFILE = 'legacy'
                LOADED[module].main()
                code = 0
            except SystemExit as exc:
                code = exc.code or 0
            except BaseException:
                sys.stdout.write(json.dumps({'failed': True, 'msg': traceback.format_exc()}))
            sys.stdout.flush()
            os._exit(code)
        os.close(write)
        chunks = []
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read)
        os.waitpid(pid, 0)
        text = b''.join(chunks).decode('utf-8', 'replace')
        try:
            result = json.loads(text[text.index('{'):])
        except ValueError:
            result = {'failed': True, 'msg': 'no answer from %s: %s' % (module, text[-500:])}
        self.tasks.append({'module': module, 'step': args.get('step') or args.get('state') or args.get('mode'),
                           'failed': bool(result.get('failed')), 'changed': bool(result.get('changed')),
                           'msg': result.get('msg')})
        if result.get('failed') and not may_fail:
            raise TaskFailed('%s %s' % (module, args.get('step') or args.get('state') or ''), result)
        return result

    # ----------------------------------------------------------- the roles

    def create(self, name, request, secrets):
        """roles/workspace_create."""
        request_args = dict(request, name=name, step='request')
        request_args.update((k, secrets[k]) for k in ('agent_credentials', 'git_token') if secrets.get(k))
        self.call('workspace_create', request_args, check=True)
        op = self.call('queue', {'kind': 'create', 'target': name, 'timeout': 600,
                                 'params': dict((k, request.get(k)) for k in ('repo', 'ref', 'purpose', 'template'))})
        if not op.get('claimed'):
            return 'not claimed: %s' % op.get('msg')
        claim = op['claim']
        try:
            first = self.call('workspace_create', dict(request_args, claim=claim))
            if not (first.get('details') or {}).get('replayed'):
                for step in CREATE_STEPS[1:]:
                    args = {'name': name, 'step': step, 'claim': claim}
                    if step == 'bootstrap' and secrets.get('agent_credentials'):
                        args['agent_credentials'] = secrets['agent_credentials']
                    if step == 'checkout' and secrets.get('git_token'):
                        args.update(git_token=secrets['git_token'], git_username=secrets.get('git_username', 'git'))
                    args.update(self.plan['common'].get('create_timeouts') or {})
                    self.call('workspace_create', args)
            self.call('queue', {'state': 'finished', 'claim': claim, 'result': {'workspace': name, 'status': 'ready'}})
        except TaskFailed as failed:
            self.call('queue', {'state': 'failed', 'claim': claim, 'msg': failed.result.get('msg') or 'create failed'})
            raise
        return 'ready'

    def destroy(self, name, secrets, ssh_private_key):
        """roles/workspace_destroy (archive on, push on, unsaved work never discarded)."""
        known = self.call('workspace_info', {'name': name}).get('workspaces') or []
        if not known:
            return 'not recorded: nothing to destroy'
        decided = known[0]['desired_state'] == 'destroyed'
        op = self.call('queue', {'kind': 'destroy', 'target': name, 'timeout': 600})
        if not op.get('claimed'):
            return 'not claimed: %s' % op.get('msg')
        claim = op['claim']
        common = {'name': name, 'claim': claim, 'shutdown_timeout': 60, 'lock_timeout': 120}
        try:
            seen = self.call('workspace_destroy', dict(common, step='inspect'))
            if not decided and seen['details'].get('present'):
                archive = {'name': name, 'mode': 'archive', 'claim': claim, 'push': True, 'include_untracked': [],
                           'ssh_private_key': ssh_private_key}
                if secrets.get('git_token'):
                    archive['git_token'] = secrets['git_token']
                self.call('workspace_archive', archive)
            for step in DESTROY_STEPS:
                self.call('workspace_destroy', dict(common, step=step))
            self.call('queue', {'state': 'finished', 'claim': claim,
                                'result': {'workspace': name, 'status': 'destroyed'}})
        except TaskFailed as failed:
            self.call('queue', {'state': 'failed', 'claim': claim, 'msg': failed.result.get('msg') or 'destroy failed'})
            raise
        return 'destroyed'

    def reconcile(self, secrets, ssh_private_key, agents):
        """playbooks/reconcile.yml: compare, then resume every unfinished create through the create role."""
        found = self.call('workspace_reconcile', {'pool': self.plan['common']['pool']})
        resumed = []
        for name in found.get('resume_create') or []:
            record = self.call('workspace_info', {'name': name})['workspaces'][0]
            params = record['params']
            request = dict(self.plan['common']['create_defaults'], template=params['template'], node=params['node'],
                           pool=params['pool'], full_clone=params['full_clone'], address_mode=params['address_mode'],
                           agents=params['agents'] or agents, repo=record['repo'], ref=record['ref'],
                           purpose=record['purpose'], agent=params['agent'], ssh_private_key=ssh_private_key)
            try:
                resumed.append([name, self.create(name, request, secrets)])
            except TaskFailed as failed:
                # One resume's failure does not keep the others from running; the play fails after all were tried.
                resumed.append([name, 'failed: %s' % failed])
        said = json.dumps({'report': found.get('report'), 'resumed': resumed})
        if any(outcome.startswith('failed') for dummy, outcome in resumed):
            raise TaskFailed('reconcile: could not resume', {'msg': said})
        return 'reconciled: %s' % said

    def execute(self):
        outcomes = []
        for op in self.plan['ops']:
            mark = len(self.tasks)
            outcome = {'op': op['op'], 'workspace': op.get('workspace')}
            secrets = op.get('secrets') or {}
            try:
                if op['op'] == 'create':
                    msg = self.create(op['workspace'], op['request'], secrets)
                elif op['op'] == 'destroy':
                    msg = self.destroy(op['workspace'], secrets, self.plan['common']['ssh_private_key'])
                else:
                    msg = self.reconcile(secrets, self.plan['common']['ssh_private_key'],
                                         self.plan['common']['create_defaults'].get('agents'))
                outcome.update(ok=not msg.startswith('not claimed'), msg=msg)
            except TaskFailed as failed:
                outcome.update(ok=False, msg=str(failed))
            outcome['tasks'] = self.tasks[mark:]
            outcomes.append(outcome)
        return {'ops': outcomes}


def detach():
    """Double fork into a session of its own, re-parented away from the starter; the starter returns."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)


def main(argv):
    plan_path, result_path = argv[1], argv[2]
    with open(plan_path) as src:
        plan = json.load(src)
    # It carries the run's secrets, as an extra-vars file from a vault would: read once, then gone.
    os.unlink(plan_path)
    detach()
    with open(result_path + '.pid', 'w') as out:
        out.write(str(os.getpid()))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    result = Run(plan).execute()
    with open(result_path + '.tmp', 'w') as out:
        json.dump(result, out)
    os.rename(result_path + '.tmp', result_path)


if __name__ == '__main__':
    main(sys.argv)
