"""A PostgreSQL server for the tests: started in a temporary directory on a loopback port, stopped by its pid.

The Debian package (postgresql-15, installed by scripts/system-packages.sh) gives ``initdb`` and ``postgres``; the
packaged service is not used. PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user
(its directory is handed to that user); as anyone else it runs as that user.

    with PgServer(base_dir) as pg:            # initdb (~1.5 s) and start (~0.3 s)
        url = pg.url                          # postgresql://ephemera:<password>@127.0.0.1:<port>/ephemera
        other = pg.new_database('second')     # a fresh, empty database owned by the same role; its URL

What the server offers:

- a role ``ephemera`` (password authentication over TCP, scram-sha-256) that owns the database ``ephemera``, and
  ``new_database(name)`` for a fresh database per test; ``url_for(...)`` builds URLs with or without the password;
- ``admin_url``: the superuser ``postgres`` over the Unix socket in the server's own directory (no password), for
  set-ups a test needs (another role, another application's tables);
- ``durable=True`` (the default) keeps PostgreSQL's fsync and synchronous commit on, as a production server; the
  unit tests pass ``durable=False`` for speed.
- ``stop()`` sends SIGINT (fast shutdown) to the postmaster's pid, waits for it, then removes the directory.

From a shell: ``python -m tests.pgserver [--port N]`` starts one, prints its URL and runs until Ctrl-C or SIGTERM.

The pytest fixture :func:`pg_server` (session scope, import it into a test module) starts one server for the
session (under pytest's base temporary directory unless run as root: the postgres user cannot enter it).
"""

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

PG_BIN_DIRS = ('/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin')
ROLE = 'ephemera'
DATABASE = 'ephemera'
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


def pg_bin(name):
    """The path of a PostgreSQL server program (initdb, postgres), or an error that says how to install it."""
    for directory in PG_BIN_DIRS:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError('PostgreSQL\'s %s was not found in %s or on PATH: install the Debian package postgresql-15 '
                       '(scripts/system-packages.sh does, as root).' % (name, ', '.join(PG_BIN_DIRS)))


def free_port(host='127.0.0.1'):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _alive(pid):
    try:
        with open('/proc/%d/stat' % pid) as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


class PgServer:
    """One PostgreSQL server in its own directory; see the module's doc."""

    def __init__(self, base_dir=None, host='127.0.0.1', port=None, durable=True):
        self.host = host
        self.port = port or free_port(host)
        self.durable = durable
        self.password = secrets.token_urlsafe(18)
        self._base_dir = base_dir
        self.directory = None
        self.process = None
        self._user = None

    # ------------------------------------------------------------------ life

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _run_as(self):
        """(uid, gid) the server runs as: the ``postgres`` user for root, else this user."""
        if os.geteuid() != 0:
            return None
        try:
            entry = pwd.getpwnam('postgres')
        except KeyError:
            raise RuntimeError('PostgreSQL refuses to run as root and there is no postgres user: install the Debian '
                               'package postgresql-15, which makes it.')
        return entry.pw_uid, entry.pw_gid

    def _command(self, argv, **kwargs):
        kwargs.setdefault('stdout', subprocess.PIPE)
        kwargs.setdefault('stderr', subprocess.STDOUT)
        if self._user:
            kwargs['user'], kwargs['group'] = self._user
            kwargs['extra_groups'] = []
        env = dict(os.environ, LC_ALL='C.UTF-8', LANG='C.UTF-8')
        for name in [key for key in env if key.startswith('PG')]:
            del env[name]  # a PGDATA or PGPORT of the caller must not steer the test server
        kwargs['env'] = env
        return argv, kwargs

    def start(self):
        self._user = self._run_as()
        self.directory = tempfile.mkdtemp(prefix='pg-', dir=self._base_dir)
        os.chmod(self.directory, 0o700)
        if self._user:
            os.chown(self.directory, *self._user)
        data = os.path.join(self.directory, 'data')
        pwfile = os.path.join(self.directory, 'superuser-password')
        with open(pwfile, 'w') as out:
            out.write(secrets.token_urlsafe(18) + '\n')
        if self._user:
            os.chown(pwfile, *self._user)
        os.chmod(pwfile, 0o600)
        argv, kwargs = self._command([pg_bin('initdb'), '-D', data, '-U', 'postgres', '--pwfile', pwfile,
                                      '--auth-local=trust', '--auth-host=scram-sha-256', '-E', 'UTF8',
                                      '--no-instructions'] + (['--no-sync'] if not self.durable else []))
        done = subprocess.run(argv, check=False, **kwargs)
        if done.returncode != 0:
            self._remove()
            raise RuntimeError('initdb failed (exit %d): %s' % (done.returncode, done.stdout.decode(errors='replace')))
        settings = ['-p', str(self.port), '-k', self.directory, '-c', 'listen_addresses=%s' % self.host,
                    '-c', 'max_connections=200', '-c', 'shared_buffers=32MB']
        if not self.durable:
            settings += ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']
        self.log_path = os.path.join(self.directory, 'server.log')
        log = open(self.log_path, 'ab')
        try:
            argv, kwargs = self._command([pg_bin('postgres'), '-D', data] + settings, stdout=log, stderr=log)
            self.process = subprocess.Popen(argv, start_new_session=True, **kwargs)
        finally:
            log.close()
        self._wait_ready()
        self.admin('CREATE ROLE %s LOGIN PASSWORD %s' % (ROLE, self._literal(self.password)))
        self.admin('CREATE DATABASE %s OWNER %s' % (DATABASE, ROLE))
        return self

    def _wait_ready(self):
        deadline = time.time() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                log = self.log()
                self._remove()
                raise RuntimeError('PostgreSQL exited at start (exit %s): %s' % (self.process.returncode, log))
            try:
                with socket.create_connection((self.host, self.port), timeout=1):
                    pass
                if self._psql('SELECT 1', check=False).returncode == 0:
                    return
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError('PostgreSQL did not accept connections within %d s' % START_TIMEOUT)
            time.sleep(0.05)

    def log(self):
        try:
            with open(self.log_path, 'rb') as src:
                return src.read().decode(errors='replace')[-4000:]
        except (OSError, AttributeError):
            return ''

    def stop(self):
        """Fast shutdown by pid (SIGINT to the postmaster), then the directory goes."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        self.process = None
        self._remove()

    def _remove(self):
        if self.directory and os.path.isdir(self.directory):
            shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None

    @property
    def pid(self):
        return self.process.pid if self.process is not None else None

    # ------------------------------------------------------------------ SQL

    @staticmethod
    def _literal(text):
        return "'%s'" % text.replace("'", "''")

    def _psql(self, sql, database='postgres', check=True):
        psql = shutil.which('psql') or '/usr/bin/psql'
        argv, kwargs = self._command([psql, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', self.directory,
                                      '-p', str(self.port), '-U', 'postgres', '-d', database, '-At', '-c', sql])
        done = subprocess.run(argv, check=False, **kwargs)
        if check and done.returncode != 0:
            raise RuntimeError('psql failed on %r: %s' % (sql, done.stdout.decode(errors='replace')))
        return done

    def admin(self, sql, database='postgres'):
        """Run ``sql`` as the superuser (over the server's Unix socket); returns its rows as lines of text."""
        try:
            import psycopg
        except ImportError:
            return self._psql(sql, database).stdout.decode().splitlines()
        with psycopg.connect(host=self.directory, port=self.port, user='postgres', dbname=database,
                             autocommit=True) as conn:
            cur = conn.execute(sql)
            if not cur.description:
                return []
            return ['|'.join('' if value is None else str(value) for value in row) for row in cur.fetchall()]

    @property
    def admin_url(self):
        return 'postgresql://postgres@/postgres?host=%s&port=%d' % (quote(self.directory, safe=''), self.port)

    def url_for(self, database=DATABASE, user=ROLE, password=True, **params):
        """A URL of this server: with the role's password in it (``password=True``), another one (a string), or
        none (``False``); ``params`` become query parameters (sslmode=..., passfile=...)."""
        secret = self.password if password is True else (password or None)
        login = quote(user, safe='') + (':' + quote(secret, safe='') if secret else '')
        query = '&'.join('%s=%s' % (key, quote(str(value), safe='/')) for key, value in sorted(params.items()))
        return 'postgresql://%s@%s:%d/%s%s' % (login, self.host, self.port, quote(database, safe=''),
                                               '?' + query if query else '')

    @property
    def url(self):
        return self.url_for()

    @property
    def url_without_password(self):
        return self.url_for(password=False)

    def new_database(self, name, owner=ROLE):
        """A fresh, empty database ``name`` owned by ``owner``; returns its URL (with the password)."""
        self.admin('DROP DATABASE IF EXISTS %s WITH (FORCE)' % name)
        self.admin('CREATE DATABASE %s OWNER %s' % (name, owner))
        return self.url_for(database=name)


try:
    import pytest
except ImportError:  # outside the tests: the CLI below needs no pytest
    pytest = None

if pytest is not None:
    @pytest.fixture(scope='session')
    def pg_server(tmp_path_factory):
        """One PostgreSQL server for the test session (durable settings off, for speed)."""
        # As root the server runs as postgres, which cannot enter pytest's 0700 base directory: then /tmp.
        base = None if os.geteuid() == 0 else str(tmp_path_factory.mktemp('pgserver'))
        server = PgServer(base, durable=False)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description='Run a throwaway PostgreSQL server on a loopback port.')
    parser.add_argument('--port', type=int, default=None)
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--fast', action='store_true', help='fsync and synchronous commit off')
    args = parser.parse_args(argv)
    server = PgServer(host=args.host, port=args.port, durable=not args.fast)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    server.start()
    try:
        print('EPHEMERA_JOURNAL_URL=%s' % server.url, flush=True)
        print('pid %d, directory %s; Ctrl-C stops it' % (server.pid, server.directory), flush=True)
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
