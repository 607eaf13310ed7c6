"""The real agent CLIs, installed once per machine from the npm registry into a cache outside the checkout.

    python -m tests.models clis      # prints the bin directory (claude, codex, opencode)

Pinned to the versions the tests were written against (docs/model-endpoints.md): a newer CLI may change its event
stream or its wire protocol, and a test should say so by failing on purpose, when the pin is raised. Each set of
pins is installed into a directory of its own, named by a hash of the pins, under $EPHEMERA_AGENT_CACHE (default
/var/cache/ephemera-agents as root, ~/.cache/ephemera-agents otherwise): built in a temporary directory under a
lock and renamed into place once every CLI answered --version, so test workers that start together install once
and an install that died leaves nothing that looks finished. npm's own cache lives beside it.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

# claude-code's package asks for node >= 22 but runs a native binary that needs no node; npm 11 on Node 20 would
# otherwise pick an older release whose engines match. Its postinstall (and opencode's) puts the native binary of
# the optional dependency in place: npm 11 runs both, warning that allowScripts does not cover them
# (docs/internals/agent-cli-facts.md).
PINS = {'@anthropic-ai/claude-code': '2.1.332', '@openai/codex': '0.171.0', 'opencode-ai': '1.18.33'}
COMMANDS = ('claude', 'codex', 'opencode')
CACHE_ENV = 'EPHEMERA_AGENT_CACHE'


class CliError(Exception):
    """The CLIs could not be installed; the message says why and what to do."""


def cache_dir():
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.environ[CACHE_ENV])
    if os.geteuid() == 0:
        return '/var/cache/ephemera-agents'
    return os.path.join(os.path.expanduser('~'), '.cache', 'ephemera-agents')


def install_path(cache=None):
    key = hashlib.sha256(json.dumps(sorted(PINS.items())).encode()).hexdigest()[:12]
    return os.path.join(cache or cache_dir(), 'clis-%s' % key)


def bin_dir(cache=None):
    return os.path.join(install_path(cache), 'bin')


def versions(directory):
    """{command: its --version answer} of the CLIs in ``directory``."""
    out = {}
    for command in COMMANDS:
        done = subprocess.run([os.path.join(directory, command), '--version'], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ, HOME=tempfile.gettempdir()))
        if done.returncode != 0:
            raise CliError('%s --version failed (%d): %s' % (command, done.returncode, done.stderr.strip()[-500:]))
        out[command] = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ''
    return out


def ensure_clis(announce=None):
    """The bin directory of the pinned CLIs, installed first if they are not there."""
    path = install_path()
    if os.path.isdir(path):
        return os.path.join(path, 'bin')
    if shutil.which('npm') is None:
        raise CliError('the agent CLIs come from the npm registry, and npm is not installed (Node.js 20 with npm)')
    cache = os.path.dirname(path)
    os.makedirs(cache, mode=0o755, exist_ok=True)
    with open(os.path.join(cache, '.lock'), 'w', encoding='ascii') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isdir(path):
            return os.path.join(path, 'bin')
        for name in os.listdir(cache):
            if name.startswith('.install-'):
                shutil.rmtree(os.path.join(cache, name), ignore_errors=True)
        if announce:
            announce('installing %s into %s (once; about half a minute)'
                     % (', '.join('%s@%s' % p for p in sorted(PINS.items())), path))
        tmp = tempfile.mkdtemp(prefix='.install-', dir=cache)
        try:
            done = subprocess.run(
                ['npm', 'install', '--global', '--prefix', tmp, '--no-audit', '--no-fund', '--loglevel=error',
                 '--cache', os.path.join(cache, 'npm')] + ['%s@%s' % p for p in sorted(PINS.items())],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, check=False)
            if done.returncode != 0:
                raise CliError('npm install of the agent CLIs failed (%d): %s' % (
                    done.returncode, done.stderr.strip()[-1500:]))
            found = versions(os.path.join(tmp, 'bin'))
            with open(os.path.join(tmp, 'versions.json'), 'w', encoding='utf-8') as out:
                json.dump({'pins': PINS, 'versions': found}, out, indent=2, sort_keys=True)
            os.chmod(tmp, 0o755)
            os.rename(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(path, 'bin')
