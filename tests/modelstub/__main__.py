"""python -m tests.modelstub serve --host 127.0.0.1 --port N [--scripts FILE.json] [--state FILE] [--token T]

Serves the stand-in model endpoint until SIGTERM/SIGINT or POST /_stub/stop. The scripts file is
{"scripts": {"<api key>": <script>, ...}, "default": <script or null>, "models": ["name", ...]}, a script being a
list of turns or {"turns": [...], "then": ...} (tests/modelstub/script.py). Once listening it writes the state
file (mode 0600): {"url", "host", "port", "pid", "token"}; the token guards the control API (X-Stub-Token), and
comes from --token, else $MODELSTUB_TOKEN, else is made up.
"""

import argparse
import json
import os
import signal
import sys
import threading

from tests.modelstub.server import ModelStub, StubError


def _write_state(path, state):
    tmp = '%s.%d.tmp' % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w', encoding='utf-8') as out:
        json.dump(state, out, indent=2)
        out.write('\n')
    os.replace(tmp, path)


def serve(args):
    config = {}
    if args.scripts:
        with open(args.scripts, encoding='utf-8') as src:
            config = json.load(src)
    stub = ModelStub(args.host, args.port, token=args.token or os.environ.get('MODELSTUB_TOKEN'),
                     models=config.get('models') or ('stub-model',))
    for key, script in (config.get('scripts') or {}).items():
        stub.add_script(key, script)
    if config.get('default') is not None:
        stub.set_default(config['default'])
    stub.start()
    done = threading.Event()

    def _stop(*_):
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.state:
        _write_state(args.state, {'url': stub.url, 'host': stub.host, 'port': stub.port, 'pid': os.getpid(),
                                  'token': stub.token})
    print('modelstub listening on %s' % stub.url, flush=True)
    while not done.wait(0.2):
        if not stub.running:
            break
    stub.stop()
    if args.state:
        try:
            os.unlink(args.state)
        except OSError:
            pass
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tests.modelstub')
    sub = parser.add_subparsers(dest='command', required=True)
    run = sub.add_parser('serve', help='serve the stand-in model endpoint')
    run.add_argument('--host', default='127.0.0.1', help='an address in 127.0.0.0/8')
    run.add_argument('--port', type=int, default=0, help='0 picks a free port (the state file names it)')
    run.add_argument('--scripts', help='JSON file: {"scripts": {key: script}, "default": script, "models": [...]}')
    run.add_argument('--state', help='where to write {"url", "port", "pid", "token"} once listening')
    run.add_argument('--token', help='the control API token (default: $MODELSTUB_TOKEN or a random one)')
    args = parser.parse_args(argv)
    try:
        return serve(args)
    except (StubError, OSError, ValueError) as err:
        print('modelstub: %s' % err, file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
