"""python -m tests.models clis          install the pinned agent CLIs once (tests/models/clis.py); print their bin directory
python -m tests.models serve --host 127.0.0.1 --port N [--default notes|FILE.json] [--token T] [--info FILE]

Serves the stand-in until it is stopped (SIGTERM or Ctrl-C); ``--info`` writes {"url", "pid", "token"} there once it
listens. Tests and try-out sites drive it through its control API (/_stub/scripts, /_stub/requests, /_stub/reset,
with the X-Stub-Token header).
"""

import argparse
import json
import os
import signal
import sys
import threading

from .server import NOTES, ModelServer, StubError


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.models')
    sub = parser.add_subparsers(dest='command', required=True)
    serve = sub.add_parser('serve')
    serve.add_argument('--host', default='127.0.0.1')
    serve.add_argument('--port', type=int, default=0)
    serve.add_argument('--default', help='the script of keys with none: "notes", or a JSON file of turns')
    serve.add_argument('--token')
    serve.add_argument('--info')
    sub.add_parser('clis')
    args = parser.parse_args(argv)
    if args.command == 'clis':
        from .clis import CliError, ensure_clis
        try:
            print(ensure_clis(announce=lambda text: sys.stderr.write(text + '\n')))
        except CliError as err:
            sys.stderr.write('cannot install the agent CLIs: %s\n' % err)
            return 2
        return 0
    default = None
    if args.default == NOTES:
        default = NOTES
    elif args.default:
        with open(args.default, encoding='utf-8') as src:
            default = json.load(src)
    try:
        stub = ModelServer(args.host, args.port, default=default, token=args.token).start()
    except (StubError, OSError) as err:
        sys.stderr.write('cannot serve: %s\n' % err)
        return 2
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stopped.set())
    if args.info:
        tmp = args.info + '.tmp'
        with open(tmp, 'w', encoding='utf-8') as out:
            json.dump({'url': stub.url, 'pid': os.getpid(), 'token': args.token}, out)
        os.rename(tmp, args.info)
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    stub.stop()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
