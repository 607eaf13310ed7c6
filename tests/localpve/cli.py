"""Command line: python -m tests.localpve up | status | fault ... | down   (see docs/localpve.md;
the fault commands: docs/internals/localpve.md)."""

import argparse
import json
import os
import sys
import time

from . import process
from .config import GUEST_TIERS, ClusterError, Options, load_info, state_dir
from .control import ControlClient

UP_DEFAULTS = Options()


def _delay(text):
    if str(text).lower() == 'never':
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds or 'never', not {0!r}".format(text)) from None
    if value < 0:
        raise argparse.ArgumentTypeError('cannot be negative')
    return value


def _times(text):
    if str(text).lower() in ('always', 'all'):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a whole number or 'always', not {0!r}".format(text)) from None
    if value < 1:
        raise argparse.ArgumentTypeError('must be at least 1')
    return value


def _cluster_options(parser):
    add = parser.add_argument
    add('--host', default=UP_DEFAULTS.host, help='loopback address the API, proxy and control listen on '
        '(default %(default)s; guests get addresses next to it)')
    add('--api-port', type=int, default=UP_DEFAULTS.api_port, help='raw API port (default %(default)s)')
    add('--proxy-port', type=int, default=UP_DEFAULTS.proxy_port, help='fault proxy port (default %(default)s)')
    add('--control-port', type=int, default=UP_DEFAULTS.control_port, help='control port (default: any free one)')
    add('--user', default=UP_DEFAULTS.user, help='API user (default %(default)s)')
    add('--token-name', default=UP_DEFAULTS.token_name, help='API token name of that user (default %(default)s)')
    add('--nodes', default=','.join(UP_DEFAULTS.nodes), help='node names, comma separated (default %(default)s)')
    add('--template-vmid', type=int, default=UP_DEFAULTS.template_vmid, help='workspace template (default %(default)s)')
    add('--pool', default=UP_DEFAULTS.pool, help='workspace pool (default %(default)s)')
    add('--storage', default=UP_DEFAULTS.storage, help='lvmthin storage of the template (default %(default)s)')
    add('--bridge', default=UP_DEFAULTS.bridge, help='bridge of the template NIC (default %(default)s)')
    add('--time-scale', type=float, default=UP_DEFAULTS.time_scale,
        help='real seconds per PVE second; 0 finishes tasks at once (default %(default)s)')
    add('--latency', type=float, default=UP_DEFAULTS.latency,
        help='PVE seconds added to every API response (acts when time scale > 0)')
    add('--addressing', choices=('static', 'dhcp'), default=UP_DEFAULTS.addressing,
        help='static: IPAM pins each new container to an address of the range; dhcp: leases after --dhcp-delay')
    add('--dhcp-delay', type=_delay, default=UP_DEFAULTS.dhcp_delay,
        help="seconds from a start to its DHCP lease, or 'never' (default %(default)s)")
    add('--guest-range', default=None, help='guest addresses, FIRST-LAST or CIDR in 127.0.0.0/8 '
        '(default: .10-.250 of the host\'s /24)')
    add('--ssh-port', type=int, default=None, help='guests\' sshd port (default 22 as root, else 2222)')
    add('--sshd', default=UP_DEFAULTS.sshd, help='sshd binary (default %(default)s)')
    add('--guests', choices=GUEST_TIERS, default=UP_DEFAULTS.guests,
        help='host: commands run on this machine, each guest\'s files in a directory of its own (fast); debian: '
        'each guest a Debian userland of its own, as root (default %(default)s)')
    add('--fresh', action='store_true',
        help='forget the saved datacenter (and the try-out journal of the state directory) and start from the seed')
    add('--no-agent-clis', dest='agent_clis', action='store_false',
        help='host tier: guests without the real agent CLIs (claude, codex, opencode), which are otherwise installed '
        'once per machine from the npm registry')


def _options(args):
    return Options(state_dir=args.state_dir, host=args.host, api_port=args.api_port, proxy_port=args.proxy_port,
                   control_port=args.control_port, user=args.user, token_name=args.token_name, nodes=args.nodes,
                   template_vmid=args.template_vmid, pool=args.pool, storage=args.storage, bridge=args.bridge,
                   time_scale=args.time_scale, latency=args.latency, addressing=args.addressing,
                   dhcp_delay=args.dhcp_delay, guest_range=args.guest_range, ssh_port=args.ssh_port,
                   sshd=args.sshd, fresh=args.fresh, guests=args.guests, agent_clis=args.agent_clis).check()


def _print(data):
    print(json.dumps(data, indent=2, sort_keys=True))


def cmd_up(args):
    options = _options(args)
    started = time.monotonic()
    info = process.up(options)
    elapsed = time.monotonic() - started
    if args.json:
        _print(info)
        return 0
    print('localpve up in {0:.2f}s (pid {1})'.format(elapsed, info['pid']))
    print('  API      {0}   fault proxy {1}'.format(info['api_url'], info['proxy_url']))
    print('  login    {0} (password in cluster.json) or token {1}'.format(info['user'], info['token_id']))
    print('  nodes    {0}; template {1} on {2}; pool {3}'.format(
        ', '.join(info['nodes']), info['template_vmid'], info['template_node'], info['pool']))
    print('  guests   {0} ({1}), SSH as {2} on port {3} with {4}'.format(
        info['address_range'], info['addressing'], info['ssh_user'], info['ssh_port'], info['ssh_private_key']))
    print('  files    {0}{1}'.format(info['guest_root'], ' (Debian {0} userlands; agent user {1})'.format(
        os.path.basename(info['debian_base'] or ''), info['agent_user']) if info.get('guests') == 'debian' else ''))
    if info.get('package_cache'):
        print('  packages {0} (apt and PyPI through {1}; npm and pip caches in the guests\' /run)'.format(
            info['package_cache']['dir'], info['package_cache']['apt_proxy']))
    print('everything a playbook needs: {0}'.format(os.path.join(info['state_dir'], 'cluster.json')))
    return 0


def running_info(name, directory, load, error, running_pid):
    """The info of the try-out place (``name`` in messages) whose state is in ``directory`` while its process runs;
    else None, after saying why it is not running."""
    try:
        info = load(directory)
    except error as exc:
        print('{0}: not running: {1}'.format(name, exc))
        return None
    if not running_pid(info):
        print('{0}: not running (pid {1} is gone; its state is in {2}; run down to clean up)'.format(
            name, info.get('pid'), info.get('state_dir')))
        return None
    return info


def cmd_status(args):
    info = running_info('localpve', args.state_dir, load_info, ClusterError, process.running_pid)
    if info is None:
        return 3
    status = ControlClient(info).status()
    if args.json:
        _print(dict(status, info=info))
        return 0
    print('localpve: running (pid {0}) for {1:.0f}s; time scale {2}'.format(status['pid'], status['uptime'],
                                                                            status['time_scale']))
    print('  API {0}   fault proxy {1}'.format(status['api_url'], status['proxy_url']))
    nodes = ', '.join('{0} ({1})'.format(n, 'online' if up else 'OFFLINE') for n, up in status['nodes'].items())
    print('  nodes {0}; quorum {1}; tasks running {2}'.format(
        nodes, 'ok' if status['quorate'] else 'LOST', status['tasks_running']))
    print('  guests:')
    for guest in status['guests']:
        kind = 'template' if guest['template'] else guest['status']
        line = '    {0:>6} {1:<24} {2:<8} {3:<8}'.format(guest['vmid'], guest['name'], guest['node'], kind)
        if guest['status'] == 'running':
            line += ' {0} sshd {1}'.format(guest['address'] or '(no address)', guest['sshd'])
            if guest.get('sshd_pid'):
                line += ' (pid {0})'.format(guest['sshd_pid'])
            if guest.get('error'):
                line += ': ' + guest['error']
        print(line)
    cache = status.get('package_cache')
    if cache:
        print('  package cache {0}: {1} files served from it ({2:.0f} MB), {3} fetched into it, {4:.0f} MB from '
              'upstream'.format(cache['dir'], cache['hits'], cache['bytes_from_cache'] / 1e6, cache['misses'],
                                cache['bytes_fetched'] / 1e6))
    faults = [('proxy rule', r) for r in status['proxy_rules'] if not r['spent']]
    faults += [('fakepve', f) for f in status['pve_failures']]
    faults += [('guest', f) for f in status['guest_faults'] if f['times'] != 0]
    faults += [('foreign ' + k[:-1], a) for k, arms in status['foreign'].items() for a in arms if a['times'] != 0]
    print('  faults: {0}'.format('none' if not faults else ''))
    for kind, fault in faults:
        print('    {0}: {1}'.format(kind, json.dumps(fault, sort_keys=True)))
    return 0


def cmd_down(args):
    return print_down('localpve', process.down(state_dir(args.state_dir)))


def print_down(name, report):
    """Say what down did (``report``: what process.down returns)."""
    if report['stopped']:
        print('{0}: stopped pid {1}; nothing of it is listening'.format(name, report['stopped']))
    else:
        print('{0}: was not running'.format(name))
    if report['killed']:
        print('  killed leftover processes: {0}'.format(', '.join(str(p) for p in report['killed'])))
    return 0


def cmd_serve(args):
    # Only the cluster process needs the server side (aiohttp, fakepve); the other commands start faster without.
    from .cluster import serve  # pylint: disable=import-outside-toplevel
    return serve(_options(args), args.ready_fd)


def cmd_fault(args):
    client = ControlClient(state_dir=args.state_dir)
    _print(args.fault(client, args))
    return 0


def _fault_parsers(sub, common):
    fault = sub.add_parser('fault', parents=[common], help='inject faults into the running cluster')
    kinds = fault.add_subparsers(dest='kind', metavar='proxy|pve|guest|dhcp|foreign|list|clear', required=True)

    proxy = kinds.add_parser('proxy', parents=[common], help='rules of the lossy proxy in front of the API')
    actions = proxy.add_subparsers(dest='action', required=True)
    for action, text in (('drop-response', 'forward the request, then cut the connection (it took effect)'),
                         ('delay', 'forward the request, hold the response back --seconds'),
                         ('reset', 'reset the connection before forwarding (nothing happened)'),
                         ('error', 'answer with --status and --message, like PVE, without forwarding')):
        rule = actions.add_parser(action, parents=[common], help=text)
        rule.add_argument('method', help='GET, POST, PUT, DELETE or *')
        rule.add_argument('path', help="API path glob, e.g. '/nodes/*/lxc/*/clone' (* matches across /)")
        rule.add_argument('--times', type=_times, default=1, help="requests it acts on, or 'always' (default 1)")
        rule.add_argument('--skip', type=int, default=0, help='matching requests to let through first')
        if action == 'delay':
            rule.add_argument('--seconds', type=float, required=True)
        if action == 'error':
            rule.add_argument('--status', type=int, required=True)
            rule.add_argument('--message', required=True)
        rule.set_defaults(fault=lambda c, a: c.proxy_add(
            a.action, a.method, a.path, times=a.times, skip=a.skip, seconds=getattr(a, 'seconds', None),
            status=getattr(a, 'status', None), message=getattr(a, 'message', None)))
    actions.add_parser('list', parents=[common]).set_defaults(fault=lambda c, a: c.proxy_rules())
    actions.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.proxy_clear())
    remove = actions.add_parser('remove', parents=[common])
    remove.add_argument('rule_id', type=int)
    remove.set_defaults(fault=lambda c, a: c.proxy_remove(a.rule_id))

    pve = kinds.add_parser('pve', parents=[common], help="fakepve's own faults")
    what = pve.add_subparsers(dest='what', required=True)
    fail = what.add_parser('fail', parents=[common], help='answer requests with a PVE error')
    fail.add_argument('method')
    fail.add_argument('path', help='path suffix, or a schema template such as /nodes/{node}/lxc/{vmid}/status/start')
    fail.add_argument('--error', help='catalogued error name (see: fault pve errors METHOD PATH)')
    fail.add_argument('--status', type=int)
    fail.add_argument('--message')
    fail.add_argument('--times', type=_times, default=None, help="default: always")
    fail.set_defaults(fault=lambda c, a: c.pve_fail(a.method, a.path, error=a.error, status=a.status,
                                                    message=a.message, times=a.times))
    errors = what.add_parser('errors', parents=[common], help='list the catalogued errors of a concrete path')
    errors.add_argument('method')
    errors.add_argument('path')
    errors.set_defaults(fault=lambda c, a: c.pve_errors(a.method, a.path))
    net = what.add_parser('network', parents=[common], help='slow or flaky network')
    for name, kind in (('--latency', float), ('--jitter', float), ('--drop-rate', float), ('--hang-rate', float),
                       ('--hang-secs', float), ('--node', str)):
        net.add_argument(name, type=kind)
    net.set_defaults(fault=lambda c, a: c.pve_network(latency=a.latency, jitter=a.jitter, node=a.node,
                                                      drop_rate=a.drop_rate, hang_rate=a.hang_rate,
                                                      hang_secs=a.hang_secs))
    quorum = what.add_parser('quorum', parents=[common], help='lose or regain quorum')
    quorum.add_argument('state', choices=('lose', 'regain'))
    quorum.set_defaults(fault=lambda c, a: c.pve_quorum(a.state == 'regain'))
    node = what.add_parser('node', parents=[common], help='take a node offline or bring it back')
    node.add_argument('node')
    node.add_argument('state', choices=('offline', 'online'))
    node.set_defaults(fault=lambda c, a: c.pve_node(a.node, a.state == 'online'))
    lock = what.add_parser('lock', parents=[common], help='leave a container locked')
    lock.add_argument('vmid', type=int)
    lock.add_argument('--lock', default='snapshot')
    lock.set_defaults(fault=lambda c, a: c.pve_lock(a.vmid, a.lock))
    unlock = what.add_parser('unlock', parents=[common])
    unlock.add_argument('vmid', type=int)
    unlock.set_defaults(fault=lambda c, a: c.pve_unlock(a.vmid))
    hold = what.add_parser('hold-lock', parents=[common], help='hold the config lock for SECONDS (PVE seconds)')
    hold.add_argument('vmid', type=int)
    hold.add_argument('seconds', type=float)
    hold.set_defaults(fault=lambda c, a: c.pve_hold_lock(a.vmid, a.seconds))
    ct = what.add_parser('ct', parents=[common], help='task durations and start errors of a container')
    ct.add_argument('vmid', type=int)
    ct.add_argument('--start-secs', type=float)
    ct.add_argument('--shutdown-secs', type=float)
    ct.add_argument('--stop-secs', type=float)
    ct.add_argument('--start-error', help="the start task's error; '' clears it")
    ct.set_defaults(fault=lambda c, a: c.pve_ct(a.vmid, start_secs=a.start_secs, shutdown_secs=a.shutdown_secs,
                                                stop_secs=a.stop_secs, start_error=a.start_error))
    what.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.pve_clear())

    guest = kinds.add_parser('guest', parents=[common], help='faults of the guests\' sshd')
    gkind = guest.add_subparsers(dest='gkind', required=True)
    refuse = gkind.add_parser('refuse', parents=[common], help='sshd refuses for SECONDS after the start')
    refuse.add_argument('seconds', type=float)
    never = gkind.add_parser('never', parents=[common], help='sshd never comes up at the start')
    drop = gkind.add_parser('drop', parents=[common], help='cut an SSH session in the middle of a command')
    drop.add_argument('--after', type=float, default=0.0, help='seconds into the command (default 0)')
    drop.add_argument('--match', help='only sessions whose command line contains this')
    for parser, kind in ((refuse, 'refuse'), (never, 'never'), (drop, 'drop')):
        parser.add_argument('--vmid', type=int, help='this guest only (default: whichever comes next)')
        parser.add_argument('--times', type=_times, default=1, help="starts or sessions it hits, or 'always'")
        parser.set_defaults(fault=lambda c, a, kind=kind: c.guest_fault(
            kind, vmid=a.vmid, seconds=getattr(a, 'seconds', None), times=a.times, match=getattr(a, 'match', None),
            after=getattr(a, 'after', 0.0)))
    gkind.add_parser('list', parents=[common]).set_defaults(fault=lambda c, a: c.guest_faults())
    gkind.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.guest_clear())

    dhcp = kinds.add_parser('dhcp', parents=[common], help='when DHCP leases come')
    dhcp.add_argument('delay', type=_delay, help="seconds after a start, or 'never'")
    dhcp.add_argument('--vmid', type=int, help='this guest only')
    dhcp.set_defaults(fault=lambda c, a: c.dhcp(a.delay, vmid=a.vmid))

    foreign = kinds.add_parser('foreign', parents=[common], help='another Proxmox VE user on the cluster')
    fkind = foreign.add_subparsers(dest='fkind', required=True)
    create = fkind.add_parser('create', parents=[common], help='create a container as the other user')
    create.add_argument('--vmid', type=int)
    create.add_argument('--node')
    create.add_argument('--pool', help='e.g. the workspace pool (default: none)')
    create.add_argument('--hostname')
    create.add_argument('--description')
    create.add_argument('--start', action='store_true')
    create.add_argument('--how', choices=('clone', 'create'), default='clone')
    create.set_defaults(fault=lambda c, a: c.foreign_create(vmid=a.vmid, node=a.node, pool=a.pool,
                                                            hostname=a.hostname, description=a.description,
                                                            start=a.start, how=a.how))
    edit = fkind.add_parser('edit', parents=[common], help="rewrite a container's description")
    edit.add_argument('vmid', type=int)
    edit.add_argument('--description', required=True)
    edit.set_defaults(fault=lambda c, a: c.foreign_edit(a.vmid, a.description))
    snipe = fkind.add_parser('snipe', parents=[common], help='take the VMID someone else is about to use')
    snipe.add_argument('--on', choices=('clone', 'nextid'), default='clone')
    snipe.add_argument('--pool')
    snipe.add_argument('--times', type=_times, default=1)
    snipe.set_defaults(fault=lambda c, a: c.foreign_snipe(on=a.on, pool=a.pool, times=a.times))
    tamper = fkind.add_parser('tamper', parents=[common], help='rewrite the description of the next clone')
    tamper.add_argument('--description', required=True)
    tamper.add_argument('--times', type=_times, default=1)
    tamper.set_defaults(fault=lambda c, a: c.foreign_tamper(a.description, times=a.times))
    fkind.add_parser('clear', parents=[common]).set_defaults(fault=lambda c, a: c.foreign_clear())

    kinds.add_parser('list', parents=[common], help='every fault in place').set_defaults(
        fault=lambda c, a: {k: v for k, v in c.status().items() if k in (
            'proxy_rules', 'pve_failures', 'guest_faults', 'foreign', 'dhcp', 'network', 'quorate', 'nodes')})
    kinds.add_parser('clear', parents=[common], help='every fault off').set_defaults(fault=lambda c, a: c.clear())
    fault.set_defaults(func=cmd_fault)


def parser():
    return command_parser(
        'python -m tests.localpve', '$LOCALPVE_STATE_DIR, else .localpve/',
        'The local try-out cluster: fakepve, real SSH guests, fault injection.', 'up|status|fault|down',
        'cluster', _cluster_options, (cmd_up, 'guests and faults', cmd_status, cmd_down, cmd_serve), _fault_parsers)


def command_parser(prog, state_default, description, metavar, noun, add_options, commands, more):
    """The command line of a try-out place: up (with ``add_options``), status, what ``more(sub, common)`` adds,
    down and serve; ``commands``: (up, what status shows, status, down, serve)."""
    cmd_up_, shows, cmd_status_, cmd_down_, cmd_serve_ = commands
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--state-dir', default=argparse.SUPPRESS,
                        help='state directory (default: {0} in the repository)'.format(state_default))
    top = argparse.ArgumentParser(prog=prog, parents=[common], description=description)
    sub = top.add_subparsers(dest='command', metavar=metavar, required=True)
    upper = sub.add_parser('up', parents=[common], help='start the {0} in the background'.format(noun))
    add_options(upper)
    upper.add_argument('--json', action='store_true', help='print {0}.json'.format(noun))
    upper.set_defaults(func=cmd_up_)
    status = sub.add_parser('status', parents=[common], help='is it running; {0}'.format(shows))
    status.add_argument('--json', action='store_true')
    status.set_defaults(func=cmd_status_)
    more(sub, common)
    sub.add_parser('down', parents=[common], help='stop it and everything it started').set_defaults(func=cmd_down_)
    serve = sub.add_parser('serve', parents=[common])
    add_options(serve)
    serve.add_argument('--ready-fd', type=int)
    serve.set_defaults(func=cmd_serve_)
    return top


def main(argv=None):
    return run_command(parser(), argv, 'localpve', ClusterError)


def run_command(top, argv, name, error):
    """Run the command ``argv`` names on the command line ``top``; 1, after saying what is wrong, on ``error``."""
    args = top.parse_args(argv)
    if not hasattr(args, 'state_dir'):
        args.state_dir = None
    try:
        return args.func(args)
    except error as exc:
        print('{0}: error: {1}'.format(name, exc), file=sys.stderr)
        return 1
