"""`python -m tests.localcloud fault azure ...`: the ARM fake's rules and changes from a shell (cli.py adds these
parsers under `fault`)."""

import json

from .azure import ACTIONS, OUTCOMES, STYLES


def _times(text):
    return None if text == 'always' else int(text)


def _tags(values):
    out = {}
    for item in values or ():
        key, sep, value = item.partition('=')
        if not sep:
            raise SystemExit('--tag takes KEY=VALUE, not {0!r}'.format(item))
        out[key] = value
    return out


def add_parsers(kinds, common):
    azure = kinds.add_parser('azure', parents=[common], help='the ARM fake: rules, changes behind the back, foreign')
    what = azure.add_subparsers(dest='azure_what', required=True)
    for action in ACTIONS:
        rule = what.add_parser(action, parents=[common], help='a {0} rule'.format(action))
        rule.add_argument('operation', help="operation id or glob: VirtualMachines_Delete, '*_Delete', Token")
        rule.add_argument('--times', type=_times, default=1, help="requests it acts on, or 'always'")
        rule.add_argument('--skip', type=int, default=0)
        rule.add_argument('--match', help='only requests naming a resource that matches this glob')
        rule.add_argument('--seconds', type=float, help='delay; throttle: Retry-After; lro: seconds pending')
        rule.add_argument('--code')
        rule.add_argument('--message')
        rule.add_argument('--status', type=int)
        rule.add_argument('--style', choices=STYLES, help='lro: how the operation is polled')
        rule.add_argument('--outcome', choices=OUTCOMES, help='lro: how the operation ends')
        rule.add_argument('--poll', choices=('empty', 'explicit'), help='lro: empty status documents, or explicit '
                          'states on Location 200s')
        rule.add_argument('--size', type=int, help='pages: items per page')
        rule.add_argument('--fail-at', type=int, help='pages: page N fails')
        rule.set_defaults(fault=lambda c, a: c.azure(
            'rule', action=a.azure_what, operation=a.operation, times=a.times, skip=a.skip, match=a.match,
            seconds=a.seconds, code=a.code, message=a.message, status=a.status, style=a.style, outcome=a.outcome,
            poll=a.poll, size=a.size, fail_at=a.fail_at))
    what.add_parser('list', parents=[common], help='the rules with their hits').set_defaults(
        fault=lambda c, a: c.azure('rules'))
    what.add_parser('clear', parents=[common], help='every rule off').set_defaults(
        fault=lambda c, a: c.azure('clear'))
    what.add_parser('resources', parents=[common], help='every resource, VMs with their guests').set_defaults(
        fault=lambda c, a: c.azure('resources'))
    what.add_parser('operations', parents=[common], help='every long-running operation').set_defaults(
        fault=lambda c, a: c.azure('operations'))
    change = what.add_parser('change', parents=[common], help='change tags, properties or location behind the back')
    change.add_argument('resource', help='name (when unique) or ARM id')
    change.add_argument('--tag', action='append', help='KEY=VALUE to set')
    change.add_argument('--remove-tag', action='append')
    change.add_argument('--properties', type=json.loads, help='JSON merge patch of the properties')
    change.add_argument('--location')
    change.set_defaults(fault=lambda c, a: c.azure('change', resource=a.resource, tags=_tags(a.tag),
                                                   remove_tags=a.remove_tag, properties=a.properties,
                                                   location=a.location))
    for name, text in (('detach', "unbind a NIC's public IP (a VM: its NICs; a disk: managedBy)"),
                       ('replace', 'make it again under the same id with a new identity'),
                       ('remove', 'delete it at once')):
        one = what.add_parser(name, parents=[common], help=text)
        one.add_argument('resource')
        one.set_defaults(fault=lambda c, a: c.azure(a.azure_what, resource=a.resource))
    boot = what.add_parser('console-key', parents=[common], help="the serial log shows a host key no sshd serves "
                           "(--silent: none)")
    boot.add_argument('--vm', help='this VM (name when unique, or ARM id); else the next VMs made')
    boot.add_argument('--times', type=_times, default=1, help="VMs it acts on, or 'always'")
    boot.add_argument('--silent', action='store_true')
    boot.set_defaults(fault=lambda c, a: c.azure('boot_log_fault', kind='console_silent' if a.silent else 'console_key',
                                                 vm=a.vm, times=a.times))
    foreign = what.add_parser('foreign-create', parents=[common], help='a resource of the foreign principal')
    foreign.add_argument('kind', choices=('pip', 'nic', 'disk'))
    foreign.add_argument('name')
    foreign.add_argument('--tag', action='append')
    foreign.add_argument('--attach-to', help='nic: the public IP to bind')
    foreign.set_defaults(fault=lambda c, a: c.azure('foreign_create', kind=a.kind, name=a.name, tags=_tags(a.tag),
                                                    attach_to=a.attach_to))
