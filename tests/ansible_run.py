"""Run ansible-playbook, ansible and ansible-inventory of this venv, as tests and benchmarks do, and read their output.

    run = Run.start(['ansible-playbook', '-i', inventory, book, '-e', json.dumps(values)], env={...})
    run.wait(timeout=300)                     # an overdue run is killed whole, then AssertionError
    run.ok, run.stats('localhost'), run.task('13/13 mark ready'), run.failure(), run.failed_messages()
    run.kill()                                # SIGKILL the run and everything it started
    run = run_ansible([...])                  # start and wait in one call

Every run starts in a session of its own, with ``ANSIBLE_STDOUT_CALLBACK=ansible.posix.json`` (unless
``callback=None``), its stdout and stderr in unnamed temporary files (no pipe fills up, nothing is left).

The collection ``ephemera.workspaces`` resolves to this checkout only: ``ANSIBLE_COLLECTIONS_PATH`` names a
directory that holds nothing but a link to it, and is searched before sys.path (where the other collections, the
venv's, are found). A copy under ``~/.ansible/collections`` (a release installed with ansible-galaxy, or one
Molecule put there) is never searched. ``pin=False`` leaves Ansible's own default, for the test that shows the
difference. ``python -m tests.ansible_run collections-path`` prints the directory (the Makefile uses it).
"""

import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

from tests.localpve import system

# EPHEMERA_TEST_ANSIBLE names the bin directory of another virtualenv, with another ansible-core (make test-cores):
# its programs run the playbooks and its Python the modules; the other collections (ansible.posix's callback) are
# still this venv's.
BIN = os.environ.get('EPHEMERA_TEST_ANSIBLE') or os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_CALLBACK = 'ansible.posix.json'
# Every process of a run carries this variable, with the run's own value, in its environment: the run's processes
# are found by it even after a dead parent handed them to init, or after they started a session of their own.
RUN_MARK = 'EPHEMERA_TEST_RUN'
QUIET = {'ANSIBLE_NOCOLOR': '1', 'ANSIBLE_LOCALHOST_WARNING': '0', 'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0',
         'ANSIBLE_RETRY_FILES_ENABLED': '0', 'ANSIBLE_PYTHON_INTERPRETER': os.path.join(BIN, 'python')}


# How often a run's main process looks at its workers (Ansible's internal_poll_interval, 0.001 s by default, set in
# an ansible.cfg only). The create playbook's free strategy looks up each host's next task on every look, realpath of
# its role included: at the default a create spends a sixth of its CPU there, and a run waiting on a long step
# spends a few percent of a core. The tests and the fault matrix run hundreds of playbooks side by side on two cores:
# they look every 10 ms (harness_config). Benchmarks keep Ansible's default, so their figures are what a user gets.
POLL_INTERVAL = 0.01


def harness_config():
    """Point ANSIBLE_CONFIG, unless it is set, at an ansible.cfg that sets only internal_poll_interval (made if
    missing): for the runs of a test session or of the fault matrix. Its path."""
    if os.environ.get('ANSIBLE_CONFIG'):
        return os.environ['ANSIBLE_CONFIG']
    path = os.path.join(tempfile.gettempdir(), 'ephemera-harness-%d.cfg' % os.getuid())
    text = '[defaults]\ninternal_poll_interval = %s\n' % POLL_INTERVAL
    try:
        with open(path) as src:
            current = src.read()
    except OSError:
        current = None
    if current != text:
        # Made aside and renamed into place: parallel test workers never read a half-written file.
        staged = '%s.%d' % (path, os.getpid())
        with open(staged, 'w') as out:
            out.write(text)
        os.replace(staged, path)
    os.environ['ANSIBLE_CONFIG'] = path
    return path


def collections_path():
    """A directory holding only ansible_collections/ephemera/workspaces, a link to this checkout (made if missing)."""
    tag = hashlib.sha256(ROOT.encode()).hexdigest()[:12]
    top = os.path.join(tempfile.gettempdir(), 'ephemera-collections-%d-%s' % (os.getuid(), tag))
    parent = os.path.join(top, 'ansible_collections', 'ephemera')
    link = os.path.join(parent, 'workspaces')
    if os.path.realpath(link) != ROOT:
        os.makedirs(parent, exist_ok=True)
        # Made aside and renamed into place: parallel test workers never see a half-made link.
        staged = '%s.%d' % (link, os.getpid())
        if os.path.lexists(staged):
            os.unlink(staged)
        os.symlink(ROOT, staged)
        os.replace(staged, link)
    return top


def other_collections():
    """Where the collections this venv installed are, when the runs use another venv's ansible-core (which has none
    of them): [] otherwise (its own sys.path finds them)."""
    if BIN == os.path.dirname(sys.executable):
        return []
    import ansible_collections  # pylint: disable=import-outside-toplevel
    return [os.path.dirname(path) for path in ansible_collections.__path__
            if os.path.dirname(path) != collections_path()]


def core_version():
    """The version of the ansible-core that runs the playbooks, as a tuple of ints: (2, 17, 14)."""
    found = subprocess.run([os.path.join(BIN, 'python'), '-c', 'import ansible.release as r; print(r.__version__)'],
                           capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return tuple(int(part) for part in found.split('.')[:3] if part.isdigit())


def environment(env=None, callback=JSON_CALLBACK, pin=True, unset=()):
    """The environment of a run: this process's (but for the names that start with one of ``unset``), quiet and
    plain, the callback, ``env`` on top, then the pin (True: this checkout; a directory: the collections there, as
    collections_path() lays them out)."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(tuple(unset))}
    out.update(QUIET)
    out.pop('ANSIBLE_STDOUT_CALLBACK', None)
    if callback:
        # ansible (ad hoc) uses the stdout callback only with this set.
        out.update(ANSIBLE_STDOUT_CALLBACK=callback, ANSIBLE_LOAD_CALLBACK_PLUGINS='1')
    out.update(env or {})
    if pin:
        top = collections_path() if pin is True else pin
        out.update(ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([top] + other_collections()),
                   ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='1')
    else:
        out.pop('ANSIBLE_COLLECTIONS_PATH', None)
    return out


def parse_json(text):
    """The JSON document that ``text`` is, or that starts at one of its lines (after any warnings); None if none."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    position = 0
    while True:
        position = text.find('\n{', position)
        if position < 0:
            return None
        try:
            return json.loads(text[position + 1:])
        except ValueError:
            position += 1


def plain(value):
    """``value`` (parsed JSON) with ansible-inventory's unsafe markers taken off: before ansible-core 2.19 it prints a
    string marked unsafe as {"__ansible_unsafe": text}, from 2.19 on as the text."""
    if isinstance(value, dict):
        if set(value) == {'__ansible_unsafe'}:
            return value['__ansible_unsafe']
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def said(text, out):
    """True when ``out`` holds ``text``, whatever lines it was wrapped into (ansible-core before 2.19 wraps warnings
    and errors at the terminal's width, even within a path)."""
    return ''.join(text.split()) in ''.join(out.split())


class RunTimedOut(AssertionError):
    pass


class Run:
    """One ansible-playbook, ansible or ansible-inventory process (started by :meth:`start`) and what it printed."""

    def __init__(self, argv, proc, stdout, stderr, mark):
        # seconds: from the start to the end of the process (reading its output not included).
        self.argv = argv
        self.proc = proc
        self.pid = proc.pid
        self.mark = mark
        self._files = (stdout, stderr)
        self.started = time.monotonic()
        self.seconds = None
        self.returncode = None
        self.timed_out = False
        self.stdout = ''
        self.output = ''
        self.data = None

    @classmethod
    def start(cls, argv, env=None, callback=JSON_CALLBACK, pin=True, cwd=ROOT, unset=()):
        """Start ``argv`` (its first word a program of this venv's bin, unless a path) in a session of its own."""
        argv = list(argv)
        if os.sep not in argv[0]:
            argv[0] = os.path.join(BIN, argv[0])
        environ = environment(env, callback, pin, unset)
        mark = new_mark()
        environ[RUN_MARK] = mark
        stdout, stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=environ, cwd=cwd,
                                start_new_session=True)
        return cls(argv, proc, stdout, stderr, mark)

    @property
    def running(self):
        return self.returncode is None and self.proc.poll() is None

    def wait(self, timeout=600, fail=True):
        """Wait for the run to end and read its output. An overdue run is killed whole; then, with ``fail``,
        RunTimedOut (an AssertionError) says so with the end of its output; without, ``timed_out`` is true.
        A run already waited for is returned as it is."""
        if self._files is None:
            return self
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
        self.seconds = time.monotonic() - self.started
        self.returncode = self.proc.returncode
        stdout, stderr = (self._read(f) for f in self._files)
        self._files = None
        self.stdout, self.output = stdout, stdout + stderr
        self.data = plain(parse_json(stdout))
        if self.timed_out and fail:
            raise RunTimedOut('%s did not finish within %s s:\n%s' % (
                os.path.basename(self.argv[0]), timeout, self.output[-4000:]))
        return self

    @staticmethod
    def _read(handle):
        with handle:
            handle.seek(0)
            return handle.read().decode('utf-8', 'replace')

    # ------------------------------------------------------------- killing

    def members(self):
        """Pids of the run: every process that carries its mark, and while its own process is not reaped (its pid
        cannot belong to another), that process and everything below it."""
        out = marked(self.mark)
        if self.proc.poll() is None:
            out |= set([self.pid] + system.descendants(self.pid))
        out.discard(os.getpid())
        return out

    def kill(self):
        """SIGKILL the run and everything it started, as a controller that dies does; returns the pids."""
        killed = system.stop_then_kill(self.members)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        return killed

    # ------------------------------------------------------------- reading

    @property
    def ok(self):
        return self.returncode == 0

    def stats(self, host='localhost'):
        """The play recap of ``host`` ({} when the run printed none)."""
        return (self.data or {}).get('stats', {}).get(host, {})

    @property
    def changed(self):
        return sum(s.get('changed', 0) for s in (self.data or {}).get('stats', {}).values())

    def results(self, host='localhost'):
        """(task name, result) of every task that ran for ``host``, in order; role tasks lose their "<role> : "."""
        out = []
        for play in (self.data or {}).get('plays', []):
            for task in play['tasks']:
                if host in task['hosts']:
                    out.append((task['task']['name'].split(' : ', 1)[-1], task['hosts'][host]))
        return out

    def task(self, name, host='localhost'):
        """The result of the last task named ``name`` (with or without its role) for ``host``; KeyError if none."""
        found = [result for title, result in self.results(host) if title == name]
        if not found:
            raise KeyError('no task %r for %s in:\n%s' % (name, host, self.output[-3000:]))
        return found[-1]

    def failures(self, host='localhost'):
        """(task name, result) of every task that failed for ``host`` (failures it was told to ignore left out)."""
        return [(title, result) for title, result in self.results(host)
                if result.get('failed') and not result.get('ignore_errors')]

    def failure(self, host='localhost'):
        """(task name, result) of the first task that failed for ``host``, or (None, None)."""
        return (self.failures(host) or [(None, None)])[0]

    def failed_messages(self, host='localhost'):
        return [result.get('msg') for dummy, result in self.failures(host)]

    def explain(self):
        """The exit status, every failed task of every host with its message (a long run's output tail may no
        longer hold them), then the output's tail."""
        failed = []
        for play in (self.data or {}).get('plays', []):
            for task in play.get('tasks', []):
                for host, result in sorted(task.get('hosts', {}).items()):
                    if isinstance(result, dict) and result.get('failed') and not result.get('ignore_errors'):
                        failed.append('%s: %s: %s' % (host, task['task']['name'], str(result.get('msg'))[:2000]))
        said = 'failed tasks:\n%s\n' % '\n'.join(failed) if failed else ''
        return 'rc %s\n%s%s' % (self.returncode, said, self.output[-6000:])


def run_ansible(argv, timeout=600, fail=True, **options):
    """Start ``argv`` (``options`` as Run.start takes them) and wait for it: the finished Run."""
    return Run.start(argv, **options).wait(timeout, fail=fail)


def wait_until(condition, what, timeout=120, runs=()):
    """Poll ``condition()`` until it is true and return its value. AssertionError naming ``what`` when it never is
    within ``timeout`` seconds, or (with its output) when one of ``runs`` ended first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        ended = [run for run in runs if not run.running]
        if ended:
            run = ended[0].wait()
            raise AssertionError('the run %d ended (rc %s) before %s:\n%s' % (
                run.pid, run.returncode, what, run.output[-4000:]))
        if time.monotonic() > deadline:
            raise AssertionError('never saw %s within %d s' % (what, timeout))
        time.sleep(0.05)


def new_mark():
    """A value for RUN_MARK that no other run has (all of one length: no mark is the start of another)."""
    return secrets.token_hex(12)


def marked(mark):
    """Pids of the processes (other than this one) whose environment has RUN_MARK=mark."""
    return set(system.with_environment(('%s=%s' % (RUN_MARK, mark)).encode()))


if __name__ == '__main__':
    if sys.argv[1:] != ['collections-path']:
        sys.exit('usage: python -m tests.ansible_run collections-path')
    print(collections_path())
