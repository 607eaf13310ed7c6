# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module of this collection inside Ansible's worker process instead of a new interpreter.

Every module of the collection runs on the controller. Started as a module, each task pays for a new
Python interpreter, the module's packaging and our imports again (about 0.3 s before any work); a
create is a dozen such tasks. The action plugin of the same name instead validates the task's
arguments against the module's own argument spec (defaults, environment fallbacks, choices,
``no_log``, required and exclusive options: the module's ``module_args()``, declared once) and runs
the module's ``run(module)`` with a stand-in for ``AnsibleModule`` in the worker that Ansible forked
for the task anyway. The module file stays the one place that documents and declares the options,
and it still runs on its own (``python -m`` or any other way Ansible can start a module).

An option the task does not give is taken from the variable ``ephemera_<option>`` when the host has one
(``ephemera_api_host``, ``ephemera_journal_path``, ``ephemera_cores``, ...): inventories and AWX set the
collection up in one place, and the roles pass on only what is theirs. Options that say what one task does
(PER_TASK) are never taken from variables, and neither are the options of the providers a task does not use.
"""

import contextlib
import gc
import importlib
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.basic import remove_values
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.module_utils.common.arg_spec import ModuleArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import registry
from ansible_collections.ephemera.workspaces.plugins.module_utils.providers.base import DEFAULT_PROVIDER, PROVIDER_ENV
from ansible_collections.ephemera.workspaces.plugins.module_utils.core import journal, waiter

display = Display()

MODULES = 'ansible_collections.ephemera.workspaces.plugins.modules.'
VARIABLE_PREFIX = 'ephemera_'
# What one task acts on or decides: never from an inventory variable.
PER_TASK = frozenset(['name', 'step', 'claim', 'state', 'mode', 'resume', 'vmid', 'confirm_orphan',
                      'discard_unsaved_work', 'idempotency_key', 'target', 'entry_id', 'apply', 'requested_by',
                      'job_id', 'rebrief_others'])
# Variable names kept from before the rule, for the option they set.
OLD_NAMES = {'template': 'ephemera_template_vmid'}


def module_file(name):
    return importlib.import_module(MODULES + name)


def from_variables(name, args, variables, template, environ=None):
    """``args`` with every option they lack taken from its ``ephemera_<option>`` variable, templated; but for the
    options of the providers the task does not use (unused_provider_options), which are neither templated nor
    validated."""
    out = dict(args)
    spec = module_file(name).module_args()['argument_spec']
    unused = unused_provider_options(spec, args, variables, template, environ)
    for option in spec:
        if option in out or option in PER_TASK or option in unused:
            continue
        for variable in (VARIABLE_PREFIX + option, OLD_NAMES.get(option)):
            if variable and variable in variables:
                out[option] = template(variables[variable])
                break
    return out


def unused_provider_options(spec, args, variables, template, environ=None):
    """The options of ``spec`` that only providers the task does not use declare. A task uses the provider its
    ``provider`` option names (the task's, else ``ephemera_provider``, else EPHEMERA_PROVIDER in ``environ``, the
    task's environment, or this process's, else the default one); a sweep of the whole fleet (``fleet``) uses every
    provider. An inventory that serves several providers may so hold one provider's variables that another one's
    tasks could not take (a template of variables only its hosts have, a value of the wrong type)."""
    if 'provider' not in spec:
        return frozenset()
    fleet = args.get('fleet', variables.get(VARIABLE_PREFIX + 'fleet')) if 'fleet' in spec else None
    if fleet is not None and boolean(template(fleet), strict=False):
        return frozenset()
    chosen = args.get('provider')
    if chosen is None and VARIABLE_PREFIX + 'provider' in variables:
        chosen = template(variables[VARIABLE_PREFIX + 'provider'])
    if chosen is None:
        chosen = (environ or {}).get(PROVIDER_ENV) or os.environ.get(PROVIDER_ENV) or DEFAULT_PROVIDER
    if chosen not in registry.PROVIDERS:
        # The module refuses it, naming the providers there are.
        return frozenset()
    used, declared = set(), set()
    for provider in registry.PROVIDERS:
        options = set(registry.provider_options(provider).argument_spec())
        declared |= options
        if provider == chosen:
            used |= options
    return frozenset(declared - used)


def sharing_templar(templar, variables):
    """A copy of ``templar`` over ``variables`` in which a variable is rendered once for all the templates of the task.

    An inventory's variables are often made of others: the try-out inventory's two dozen ``ephemera_<option>``
    variables each read a key of ``localpve``, which is a file lookup parsed as JSON. ansible-core 2.19 renders a
    variable a template refers to anew for each template (each gets a lazy copy of the variables of its own), so a
    task of the collection compiled about 50 templates and read and parsed the file once per option, in every worker:
    0.06 to 0.27 s of a step's task on the try-out cluster under load. Over one lazy container shared by the templates,
    ``localpve`` is rendered at its first use and kept. Where ansible-core has no such container (before 2.19),
    ``templar`` as it is."""
    try:
        # pylint: disable=import-outside-toplevel
        from ansible._internal._templating._engine import TemplateOptions
        from ansible._internal._templating._lazy_containers import _AnsibleLazyTemplateMixin
        from ansible._internal._templating._utils import TemplateContext
        shared = templar.copy_with_new_env()
        engine = shared._engine  # pylint: disable=protected-access
        with TemplateContext(template_value=None, templar=engine, options=TemplateOptions.DEFAULT):
            engine.available_variables = _AnsibleLazyTemplateMixin._try_create(dict(variables))  # pylint: disable=protected-access
        return shared
    except (ImportError, AttributeError, TypeError):
        return templar


class ModuleExit(Exception):
    """How ``exit_json`` and ``fail_json`` end a module body run in-process (a module would exit its process)."""

    def __init__(self, result):
        super().__init__(result.get('msg', ''))
        self.result = result


class InProcessModule:
    """The part of ``AnsibleModule`` the collection's module bodies use: params, check and diff mode, warnings,
    ``no_log`` values, and the two ways to end."""

    def __init__(self, name, params, no_log_values, check_mode=False, diff=False, verbosity=0):
        self._name = name
        self.params = params
        self.no_log_values = set(no_log_values)
        self.check_mode = check_mode
        self._diff = diff
        self._verbosity = verbosity
        self._warnings = []

    def warn(self, warning):
        self._warnings.append(warning)

    def exit_json(self, **result):
        raise ModuleExit(self._finish(result))

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        raise ModuleExit(self._finish(result))

    def _finish(self, result):
        result.setdefault('changed', False)
        result.setdefault('invocation', {'module_args': self.params})
        if self._warnings:
            result['warnings'] = list(result.get('warnings') or []) + self._warnings
        return remove_values(result, self.no_log_values)


def run_in_process(name, args, check_mode=False, diff=False, verbosity=0):
    """The result of module ``name`` run with ``args``, as its ``AnsibleModule`` would have returned it
    (``verbosity``: the run's ``-v`` count, as a module gets it)."""
    module = module_file(name)
    spec = module.module_args()
    spec.pop('supports_check_mode', None)
    argument_spec = spec.pop('argument_spec')
    validation = ModuleArgumentSpecValidator(argument_spec, **spec).validate(args)
    params = dict(args)
    params.update(validation.validated_parameters)
    stand_in = InProcessModule(name, params, validation._no_log_values, check_mode=check_mode, diff=diff,
                               verbosity=verbosity)
    if validation.error_messages:
        msg = validation.errors.msg
        if isinstance(validation.errors[0], UnsupportedError):
            msg = 'Unsupported parameters for (%s) module: %s' % (name, msg)
        stand_in.params = dict(args)
        try:
            stand_in.fail_json(msg=msg)
        except ModuleExit as ended:
            return ended.result
    for warning in validation._warnings:
        stand_in.warn('Both option %s and its alias %s are set.' % (warning['option'], warning['alias']))
    try:
        # A long wait of the step says what it waits for, as the task runs (display reaches the controller's output
        # from the task's worker).
        who = params.get('name') or params.get('target') or name
        with waiter.reporting(lambda text: display.display('  %s: %s' % (who, text), stderr=True)):
            module.run(stand_in)
    except ModuleExit as ended:
        return ended.result
    raise AnsibleActionFail('Module %s ended without a result.' % name)


@contextlib.contextmanager
def environment(values):
    """The task's ``environment:`` applied to this (forked) worker for the length of the step."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: str(v) for k, v in values.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class InProcessAction(ActionBase):
    """The action plugin of one of the collection's modules; ``MODULE`` names it."""

    MODULE = None
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def __init_subclass__(cls, **kwargs):
        """Import the module's code where its action plugin is defined. Ansible's strategy loads the action plugin's
        class in ``ansible-playbook``'s own process before it forks a worker for the task, so the module and the
        collection's code it imports are loaded once per run and every worker inherits them: Ansible's collection
        loader compiles a collection's Python from source (no bytecode cache), which in each worker took about a
        third of a task's CPU time."""
        super().__init_subclass__(**kwargs)
        # EPHEMERA_NO_PRELOAD=1 leaves the import to each worker: what bench/step_cost.py compares against.
        if cls.MODULE and not os.environ.get('EPHEMERA_NO_PRELOAD'):
            module_file(cls.MODULE)
            registry.preload()
            journal.preload()
        # What the process holds now (Ansible, the playbook, the inventory, the collection's code) lives as long as
        # the run: out of the cyclic garbage collector's sight, a worker's collections no longer write into every
        # object it inherited, which copied most of the parent's memory page by page into each forked worker (the
        # practice the gc module's documentation gives for a process that forks without exec).
        # EPHEMERA_NO_FREEZE=1 leaves it in sight: what bench/step_cost.py compares against.
        if not os.environ.get('EPHEMERA_NO_FREEZE'):
            gc.freeze()

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        env = {}
        for entry in self._task.environment or []:
            env.update(self._templar.template(entry) or {})
        variables = task_vars or {}
        template = sharing_templar(self._templar, variables).template
        args = from_variables(self.MODULE, self._task.args, variables, template, env)
        with environment(env):
            return run_in_process(self.MODULE, args, check_mode=bool(self._task.check_mode), diff=bool(self._task.diff),
                                  verbosity=display.verbosity)
