"""An HTTP(S) server that answers every request with a JSON answer far larger than any API gives: what a proxy gone
wrong, or a host that is not the API, may send. It counts what it managed to send and whether the client hung up
before the end, so that a test sees whether the client read it all.

    with FloodServer(size=80 * MIB) as server:                       # plain HTTP on a loopback port
        ... call an API client at server.url ...
    server.hung_up       # answers the client stopped reading (it closed the connection before the end)
    server.completed     # answers sent in full

``declare=True`` sends a Content-Length; otherwise the body is delimited by closing the connection. ``tls_dir``
makes it HTTPS with a certificate of its own (``server.ca_file`` verifies it). The body is ``{"data": "xxx...x"}``
(``key`` replaces ``data``), valid JSON, so a client that reads it all gets an answer it can parse.
"""

import http.server
import ssl
import threading
import time

from fakepve.certs import make_cert

MIB = 1024 * 1024
CHUNK = 256 * 1024


class FloodServer:

    def __init__(self, size, declare=False, tls_dir=None, key='data', status=200):
        self.size = size
        self.declare = declare
        self.key = key
        self.status = status
        self.hung_up = 0
        self.completed = 0
        self.requests = []
        self.ca_file = None
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.0'

            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get('Content-Length') or 0)
                if length:
                    self.rfile.read(length)
                server.requests.append((self.command, self.path))
                head = ('{"%s": "' % server.key).encode()
                tail = b'"}'
                filler = server.size - len(head) - len(tail)
                self.send_response(server.status)
                self.send_header('Content-Type', 'application/json')
                if server.declare:
                    self.send_header('Content-Length', str(server.size))
                self.end_headers()
                try:
                    self.wfile.write(head)
                    block = b'x' * CHUNK
                    while filler > 0:
                        self.wfile.write(block[:min(CHUNK, filler)])
                        filler -= CHUNK
                    self.wfile.write(tail)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    server.hung_up += 1
                    return
                server.completed += 1

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.httpd.daemon_threads = True
        scheme = 'http'
        if tls_dir:
            cert, keyfile = make_cert(str(tls_dir), name='flood', hosts=('127.0.0.1',))[:2]
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, keyfile)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.ca_file = cert
            scheme = 'https'
        self.port = self.httpd.server_address[1]
        self.url = '%s://127.0.0.1:%d' % (scheme, self.port)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=30)

    def settled(self, answers, timeout=30.0):
        """Wait until ``answers`` answers have ended (hung up or completed): the server's side of a finished call."""
        end = time.monotonic() + timeout
        while self.hung_up + self.completed < answers and time.monotonic() < end:
            time.sleep(0.02)
        return self.hung_up + self.completed >= answers
