"""Command line: python -m tests.localcloud up | status | env | fault ... | down   (see docs/localcloud.md;
the fault commands: docs/internals/localcloud.md)."""

import argparse
import json
import shlex
import time

from tests.localpve.cli import _times, command_parser, print_down, run_command, running_info

from . import azure_cli, process
from .config import CloudError, Options, load_info, state_dir
from .control import CloudClient

UP_DEFAULTS = Options()


def _tag(text):
    key, sep, value = str(text).partition('=')
    if not sep or not key:
        raise argparse.ArgumentTypeError('a tag is KEY=VALUE, not {0!r}'.format(text))
    return key, value


def _cloud_options(parser):
    add = parser.add_argument
    add('--host', default=UP_DEFAULTS.host, help='loopback address the endpoint, moto and control listen on '
        '(default %(default)s; guests get addresses next to it)')
    add('--port', type=int, default=UP_DEFAULTS.port, help='the endpoint (fault proxy) port (default %(default)s)')
    add('--moto-port', type=int, default=UP_DEFAULTS.moto_port, help="moto's own port (default: any free one)")
    add('--control-port', type=int, default=UP_DEFAULTS.control_port, help='control port (default: any free one)')
    add('--region', default=UP_DEFAULTS.region, help='the region that is seeded (default %(default)s)')
    add('--guest-range', default=None, help="private addresses, FIRST-LAST or CIDR in 127.0.0.0/8 (default: .10-.129 "
        "of the host's /24)")
    add('--public-range', default=None, help="public addresses (default: .130-.250 of the host's /24)")
    add('--ssh-port', type=int, default=None, help="guests' sshd port (default 22 as root, else 2222)")
    add('--sshd', default=UP_DEFAULTS.sshd, help='sshd binary (default %(default)s)')
    add('--boot-secs', type=float, default=UP_DEFAULTS.boot_secs, help='seconds a new or started instance is '
        'pending (default %(default)s)')
    add('--stop-secs', type=float, default=UP_DEFAULTS.stop_secs, help='seconds a stopping instance is stopping')
    add('--shutdown-secs', type=float, default=UP_DEFAULTS.shutdown_secs, help='seconds a terminated instance is '
        'shutting-down')
    add('--scope', default=None, help='the ephemera:scope tag of the seeded tag-copy instance (default '
        'disposable-workspaces)')
    add('--guests', choices=('host', 'debian'), default=UP_DEFAULTS.guests,
        help='host: the machines run on this host as the current user, who is the agent too (default); debian: each '
        'machine is a Debian userland of its own where root logs in and the agent is a user of its own (needs root)')
    add('--show', choices=('all', 'aws', 'hetzner', 'gcp', 'azure'), default='all',
        help='which provider\'s fake `up` describes (default: all of them)')
    add('--no-agent-clis', dest='agent_clis', action='store_false',
        help='guests without the real agent CLIs (claude, codex, opencode), which are otherwise installed once per '
        'machine from the npm registry')


def _options(args):
    return Options(state_dir=args.state_dir, host=args.host, port=args.port, moto_port=args.moto_port,
                   control_port=args.control_port, region=args.region, guest_range=args.guest_range,
                   public_range=args.public_range, ssh_port=args.ssh_port, sshd=args.sshd, boot_secs=args.boot_secs,
                   stop_secs=args.stop_secs, shutdown_secs=args.shutdown_secs, agent_clis=args.agent_clis,
                   guests=args.guests).check()


def _print(data):
    print(json.dumps(data, indent=2, sort_keys=True))


def cmd_up(args):
    options = _options(args)
    started = time.monotonic()
    info = process.up(options, scope=args.scope)
    if args.json:
        _print(info)
        return 0
    seed = info['seed']
    show = getattr(args, 'show', 'all')
    print('localcloud up in {0:.2f}s (pid {1})'.format(time.monotonic() - started, info['pid']))
    if show in ('all', 'aws'):
        print('  aws      {0} (fault proxy; moto itself at {1}), region {2}'.format(
            info['endpoint_url'], info['moto_url'], info['region']))
        print('  seeded   {0} {1} {2} key {3} image {4} ({5})'.format(
            seed['vpc_id'], seed['subnet_id'], seed['security_group_id'], seed['key_name'], seed['image_id'],
            seed['image_parameter']))
        print('  foreign  {0}'.format(', '.join('{0} {1}'.format(k, v) for k, v in sorted(
            seed['foreign_instances'].items()))))
    hetzner, gcp, azure = info.get('hetzner') or {}, info.get('gcp') or {}, info.get('azure') or {}
    if show in ('all', 'hetzner') and hetzner:
        print('  hetzner  {0}, location {1}, image {2}, network {3}'.format(
            hetzner['endpoint'], hetzner['location'], hetzner['image'], hetzner['network']))
    if show in ('all', 'gcp') and gcp:
        print('  gcp      {0}, project {1}, zone {2}, image {3}'.format(
            gcp['endpoint'], gcp['project'], gcp['zone'], gcp['image']))
    if show in ('all', 'azure') and azure:
        print('  azure    {0}, subscription {1}'.format(azure['resource_manager_url'], azure['subscription_id']))
    print('  guests   {0} private, {1} public; SSH as {2} on port {3} with {4}'.format(
        info['address_range'], info['public_range'], info['ssh_user'], info['ssh_port'], info['ssh_private_key']))
    print('  files    {0}'.format(info['guest_root']))
    print('credentials for our side: python -m tests.localcloud env; everything: {0}/cloud.json'.format(
        info['state_dir']))
    return 0


def cmd_status(args):
    info = running_info('localcloud', args.state_dir, load_info, CloudError, process.running_pid)
    if info is None:
        return 3
    status = CloudClient(info).status()
    if args.json:
        _print(dict(status, info=info))
        return 0
    print('localcloud: running (pid {0}) for {1:.0f}s; region {2}; {3} requests'.format(
        status['pid'], status['uptime'], status['region'], status['requests']))
    print('  endpoint {0}   moto {1}'.format(status['endpoint_url'], status['moto_url']))
    print('  instances:')
    for item in status['instances']:
        line = '    {0:<20} {1:<14} {2:<15} {3:<15}'.format(
            item['instance_id'], item['state'], item['private_ip'] or '-', item['public_ip'] or '-')
        if item['state'] == 'running':
            line += ' sshd {0}'.format(item['sshd'])
            if item.get('sshd_pid'):
                line += ' (pid {0})'.format(item['sshd_pid'])
        name = item['tags'].get('Name')
        if name:
            line += '  ' + name
        print(line)
    faults = [('proxy rule', r) for r in status['proxy_rules'] if not r['spent']]
    faults += [('instance', f) for f in status['instance_faults'] if f['times'] != 0]
    faults += [('guest', f) for f in status['guest_faults'] if f['times'] != 0]
    print('  faults: {0}'.format('none' if not faults else ''))
    for kind, fault in faults:
        print('    {0}: {1}'.format(kind, json.dumps(fault, sort_keys=True)))
    return 0


def cmd_env(args):
    from .clients import aws_env  # pylint: disable=import-outside-toplevel
    for key, value in sorted(aws_env(load_info(args.state_dir)).items()):
        print('export {0}={1}'.format(key, shlex.quote(value)))
    return 0


def cmd_down(args):
    return print_down('localcloud', process.down(state_dir(args.state_dir)))


def cmd_serve(args):
    from .cloud import serve  # pylint: disable=import-outside-toplevel
    return serve(_options(args), args.ready_fd, scope=args.scope)


def cmd_fault(args):
    _print(args.fault(CloudClient(state_dir=args.state_dir), args))
    return 0


def _fault_parsers(sub, common):
    fault = sub.add_parser('fault', parents=[common], help='inject faults into the running cloud')
    kinds = fault.add_subparsers(dest='kind', metavar='proxy|instance|guest|foreign|list|clear', required=True)

    proxy = kinds.add_parser('proxy', parents=[common], help='rules of the fault proxy in front of moto')
    actions = proxy.add_subparsers(dest='action', required=True)
    for action, text in (('drop-response', 'forward the request, then cut the connection (it took effect)'),
                         ('reset', 'cut the connection before forwarding (nothing happened)'),
                         ('delay', 'forward the request, hold the answer back --seconds'),
                         ('error', 'answer an EC2 error (--code, --message, --status) without forwarding'),
                         ('throttle', 'answer RequestLimitExceeded (HTTP 503) without forwarding'),
                         ('pages', 'serve DescribeInstances in pages of --size reservations'),
                         ('log', 'record the requests and let the other rules act')):
        rule = actions.add_parser(action, parents=[common], help=text)
        if action != 'pages':
            rule.add_argument('operation', help="EC2 Action or glob, e.g. RunInstances, 'Describe*'")
        rule.add_argument('--times', type=_times, default=1, help="requests (pages: listings) it acts on, or 'always'")
        rule.add_argument('--skip', type=int, default=0, help='matching requests to let through first')
        rule.add_argument('--match', help="only requests with a field value matching this glob (an instance id, a "
                          "ClientToken: 'ephemera-w1-*')")
        if action == 'delay':
            rule.add_argument('--seconds', type=float, required=True)
        if action in ('error', 'throttle', 'pages'):
            rule.add_argument('--code', required=action == 'error', help='EC2 error code')
            rule.add_argument('--message', required=action == 'error')
            rule.add_argument('--status', type=int, help='HTTP status (error 400, throttle 503, pages 500)')
        if action == 'pages':
            rule.add_argument('--size', type=int, default=1, help='reservations per page (default 1)')
            rule.add_argument('--repeat-at', type=int, help='page N answers the token it was asked with again')
            rule.add_argument('--fail-at', type=int, help='page N fails with --code/--status (default InternalError '
                              '500)')
            rule.add_argument('--endless', action='store_true', help='the pages never end')
        rule.set_defaults(fault=lambda c, a: c.proxy_add(
            a.action, getattr(a, 'operation', 'DescribeInstances'), times=a.times, skip=a.skip,
            seconds=getattr(a, 'seconds', None), code=getattr(a, 'code', None), message=getattr(a, 'message', None),
            status=getattr(a, 'status', None), size=getattr(a, 'size', None), repeat_at=getattr(a, 'repeat_at', None),
            fail_at=getattr(a, 'fail_at', None), endless=getattr(a, 'endless', False), match=a.match))
    actions.add_parser('list', parents=[common]).set_defaults(fault=lambda c, a: c.proxy_rules())
    actions.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.proxy_clear())
    remove = actions.add_parser('remove', parents=[common])
    remove.add_argument('rule_id', type=int)
    remove.set_defaults(fault=lambda c, a: c.proxy_remove(a.rule_id))

    inst = kinds.add_parser('instance', parents=[common], help='how new instances appear and change state')
    ikind = inst.add_subparsers(dest='ikind', required=True)
    invisible = ikind.add_parser('invisible', parents=[common], help='a new instance id answers '
                                 'InvalidInstanceID.NotFound for SECONDS')
    invisible.add_argument('seconds', type=float)
    timing = ikind.add_parser('timing', parents=[common], help='seconds pending, stopping, shutting-down')
    for name in ('--boot-secs', '--stop-secs', '--shutdown-secs'):
        timing.add_argument(name, type=float)
    console = ikind.add_parser('console-key', parents=[common], help='the console shows a host key no sshd of the '
                               'instance serves (--silent: none at all)')
    console.add_argument('--silent', action='store_true')
    for parser in (invisible, timing, console):
        parser.add_argument('--instance-id', help='this instance (default: the next ones launched)')
        parser.add_argument('--times', type=_times, default=1, help="new instances it hits, or 'always'")
    invisible.set_defaults(fault=lambda c, a: c.invisible(a.seconds, instance_id=a.instance_id, times=a.times))
    timing.set_defaults(fault=lambda c, a: c.timing(instance_id=a.instance_id, times=a.times,
                                                    boot_secs=a.boot_secs, stop_secs=a.stop_secs,
                                                    shutdown_secs=a.shutdown_secs))
    console.set_defaults(fault=lambda c, a: c.console_key(instance_id=a.instance_id, times=a.times, silent=a.silent))
    ikind.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.instance_clear())

    guest = kinds.add_parser('guest', parents=[common], help="faults of the guests' sshd")
    gkind = guest.add_subparsers(dest='gkind', required=True)
    refuse = gkind.add_parser('refuse', parents=[common], help='sshd refuses for SECONDS after the start')
    refuse.add_argument('seconds', type=float)
    never = gkind.add_parser('never', parents=[common], help='sshd never comes up at the start')
    drop = gkind.add_parser('drop', parents=[common], help='cut an SSH session in the middle of a command')
    drop.add_argument('--after', type=float, default=0.0)
    drop.add_argument('--match')
    for parser, kind in ((refuse, 'refuse'), (never, 'never'), (drop, 'drop')):
        parser.add_argument('--instance-id', help='this instance only (default: whichever comes next)')
        parser.add_argument('--times', type=_times, default=1)
        parser.set_defaults(fault=lambda c, a, kind=kind: c.guest_fault(
            kind, instance_id=a.instance_id, seconds=getattr(a, 'seconds', None), times=a.times,
            match=getattr(a, 'match', None), after=getattr(a, 'after', 0.0)))
    gkind.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.guest_clear())

    foreign = kinds.add_parser('foreign', parents=[common], help='another principal in the same account')
    fkind = foreign.add_subparsers(dest='fkind', required=True)
    create = fkind.add_parser('create', parents=[common], help='launch instances as the foreign client')
    create.add_argument('--tag', type=_tag, action='append', default=[], help='KEY=VALUE (repeatable)')
    create.add_argument('--copy-tags-of', metavar='INSTANCE_ID', help="copy that instance's tags (the marker is "
                        "replaced by one no controller made)")
    create.add_argument('--count', type=int, default=1)
    create.add_argument('--stopped', action='store_true')
    create.set_defaults(fault=lambda c, a: c.foreign_create(tags=dict(a.tag) or None, copy_tags_of=a.copy_tags_of,
                                                            count=a.count, running=not a.stopped))
    term = fkind.add_parser('terminate', parents=[common], help='terminate instances as the foreign client')
    term.add_argument('instance_ids', nargs='+')
    term.set_defaults(fault=lambda c, a: c.foreign_terminate(a.instance_ids))

    azure_cli.add_parsers(kinds, common)

    kinds.add_parser('list', parents=[common], help='every fault in place').set_defaults(
        fault=lambda c, a: {k: v for k, v in c.status().items() if k in (
            'proxy_rules', 'instance_faults', 'guest_faults')})
    kinds.add_parser('clear', parents=[common], help='every fault off').set_defaults(
        fault=lambda c, a: c.clear() and {'cleared': True})
    fault.set_defaults(func=cmd_fault)


def _more_parsers(sub, common):
    sub.add_parser('env', parents=[common], help="print the AWS_* variables of our side (eval \"$(...)\")") \
        .set_defaults(func=cmd_env)
    _fault_parsers(sub, common)


def parser():
    return command_parser(
        'python -m tests.localcloud', '$LOCALCLOUD_STATE_DIR, else .localcloud/',
        'The local try-out cloud: moto, a fault proxy, real SSH guests.', 'up|status|env|fault|down', 'cloud',
        _cloud_options, (cmd_up, 'instances and faults', cmd_status, cmd_down, cmd_serve), _more_parsers)


def main(argv=None):
    return run_command(parser(), argv, 'localcloud', CloudError)
