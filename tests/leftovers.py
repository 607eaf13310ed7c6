"""A test session ends with nothing it started still running.

What a session started is known by where it lives: a process whose command line, working directory or
environment names a path under the session's temporary directory (pytest's basetemp, which holds every
tmp_path, every try-out cluster's state and every guest root of the tests). At the end of the session
(once, in the controller, when pytest-xdist runs workers: their basetemps lie under the controller's),
such processes fail the run, named with their command lines, and are then killed by pid.

tests/conftest.py loads this plugin; ``pytest -p tests.leftovers`` loads it elsewhere.
"""

import os

import pytest

from tests.localpve import system

SETTLE_SECONDS = 5


def _read(path):
    try:
        with open(path, 'rb') as src:
            return src.read()
    except OSError:
        return b''


def _under(data, base):
    """True if ``data`` (bytes) names ``base`` or a path below it."""
    needle = base.encode()
    start = data.find(needle)
    while start >= 0:
        end = start + len(needle)
        if end == len(data) or data[end:end + 1] in (b'/', b'\0', b' ', b'"', b"'", b':', b'\n'):
            return True
        start = data.find(needle, start + 1)
    return False


def leftovers(bases):
    """{pid: command line} of the live processes (but this one and its ancestors) that name a path under one of
    ``bases`` in their command line, working directory or environment."""
    bases = [os.path.realpath(base) for base in bases]
    spared = set([os.getpid()])
    parent = os.getppid()
    while parent > 1:
        spared.add(parent)
        parent = _parent(parent)
    found = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) in spared:
            continue
        pid = int(entry)
        try:
            cwd = os.readlink('/proc/%d/cwd' % pid).encode()
        except OSError:
            cwd = b''
        places = (_read('/proc/%d/cmdline' % pid), cwd, _read('/proc/%d/environ' % pid))
        if any(_under(data, base) for base in bases for data in places) and system.alive(pid):
            found[pid] = system.cmdline(pid) or '(no command line)'
    return found


def _parent(pid):
    try:
        with open('/proc/%d/stat' % pid, encoding='ascii', errors='replace') as src:
            return int(src.read().rsplit(')', 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def settled_leftovers(bases, seconds=SETTLE_SECONDS):
    """leftovers(bases) once it is empty or ``seconds`` passed: a process killed a moment ago takes a moment to go."""
    found = leftovers(bases)
    if found and system.wait_gone(list(found), seconds):
        found = leftovers(bases)
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, 'workerinput'):
        return  # an xdist worker: the controller looks once all workers have ended
    factory = getattr(config, '_tmp_path_factory', None)
    if factory is None:
        return
    base = str(factory.getbasetemp())
    found = settled_leftovers([base])
    if not found:
        return
    lines = ['%d %s' % (pid, cmd) for pid, cmd in sorted(found.items())]
    reporter = config.pluginmanager.get_plugin('terminalreporter')
    message = 'processes this test run started under %s still run (now killed):\n  %s' % (base, '\n  '.join(lines))
    if reporter is not None:
        reporter.write_sep('=', 'left running', red=True)
        reporter.write_line(message)
    else:
        print(message)
    system.stop_then_kill(lambda: set(leftovers([base])))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
