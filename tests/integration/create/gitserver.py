"""Git repositories for the create tests: made with real git, served over HTTP with a token by git-http-backend.

The HTTP server lets in only Basic auth with the right user and token, the way a forge does for a
private repository over HTTPS, so a checkout that works proves the token reached git, and a guest
that afterwards holds the token nowhere proves the temporary helper was removed.
"""

import base64
import http.server
import os
import subprocess
import threading

GIT_ENV = {'GIT_AUTHOR_NAME': 'test', 'GIT_AUTHOR_EMAIL': 'test@example.invalid',
           'GIT_COMMITTER_NAME': 'test', 'GIT_COMMITTER_EMAIL': 'test@example.invalid'}


def git(*args, cwd=None):
    """Run git; its stdout, stripped."""
    out = subprocess.run(['git'] + list(args), cwd=cwd, env=dict(os.environ, **GIT_ENV), capture_output=True,
                         text=True, check=True, timeout=60)
    return out.stdout.strip()


def commit(work, name, text, message):
    with open(os.path.join(work, name), 'w') as out:
        out.write(text)
    git('add', name, cwd=work)
    git('commit', '--quiet', '-m', message, cwd=work)
    return git('rev-parse', 'HEAD', cwd=work)


class Repo:
    """A bare repository (what a forge holds) with main, a feature branch and a tag, and its working copy."""

    def __init__(self, base):
        self.work = os.path.join(base, 'work')
        self.bare = os.path.join(base, 'served', 'app.git')
        git('init', '--quiet', '--initial-branch=main', self.work)
        commit(self.work, 'greet.py', 'def greet(name):\n    return "hello " + name\n', 'a greeting')
        self.tag_head = git('rev-parse', 'HEAD', cwd=self.work)
        git('tag', 'v1', cwd=self.work)
        git('checkout', '--quiet', '-b', 'feature', cwd=self.work)
        self.feature_head = commit(self.work, 'farewell.py', 'def bye():\n    return "bye"\n', 'a farewell')
        git('checkout', '--quiet', 'main', cwd=self.work)
        self.main_head = commit(self.work, 'README', 'greetings\n', 'a readme')
        git('clone', '--quiet', '--bare', self.work, self.bare)
        self.url = 'file://' + self.bare

    def push_branch(self, name):
        """Publish a new branch (at main) that did not exist before; returns its commit."""
        git('push', '--quiet', self.bare, 'main:refs/heads/' + name, cwd=self.work)
        return self.main_head

    def head(self, ref):
        return git('rev-parse', ref, cwd=self.bare)


class GitHttpServer:
    """git-http-backend behind Basic auth on a loopback port; ``url_of(repo)`` is the repository's URL."""

    def __init__(self, root, user, token, host='127.0.0.1'):
        self.root = root
        expected = 'Basic ' + base64.b64encode(('%s:%s' % (user, token)).encode()).decode()
        backend = os.path.join(git('--exec-path'), 'git-http-backend')
        self.attempts = []
        # True: a fetch (what a clone asks after it listed the refs) is answered 500, as a forge in trouble does;
        # listing the refs (git ls-remote) still works.
        self.refuse_fetch = False
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._serve()

            def do_POST(self):
                self._serve()

            def _serve(self):
                given = self.headers.get('Authorization')
                server.attempts.append(given is not None)
                if given != expected:
                    self.send_response(401)
                    self.send_header('WWW-Authenticate', 'Basic realm="git"')
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                path, dummy, query = self.path.partition('?')
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else b''
                if server.refuse_fetch and (b'command=fetch' in body or b'want ' in body):
                    self.send_response(500)
                    self.send_header('Content-Length', '0')
                    self.end_headers()
                    return
                env = dict(os.environ, GIT_PROJECT_ROOT=server.root, GIT_HTTP_EXPORT_ALL='1', PATH_INFO=path,
                           QUERY_STRING=query, REQUEST_METHOD=self.command, REMOTE_USER=user,
                           CONTENT_TYPE=self.headers.get('Content-Type', ''), CONTENT_LENGTH=str(len(body)))
                if self.headers.get('Git-Protocol'):
                    env['GIT_PROTOCOL'] = self.headers['Git-Protocol']
                out = subprocess.run([backend], input=body, env=env, capture_output=True, check=False).stdout
                head, dummy, payload = out.partition(b'\r\n\r\n')
                status = 200
                headers = []
                for line in head.split(b'\r\n'):
                    name, dummy, value = line.decode('latin-1').partition(':')
                    if name.lower() == 'status':
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header('Content-Length', str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.base = 'http://%s:%d' % (host, self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url_of(self, bare):
        return self.base + '/' + os.path.relpath(bare, self.root)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
