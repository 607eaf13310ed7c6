"""A client of the control API of a stub that runs in another process (``python -m tests.modelstub serve``).

It offers the same verbs as an in-process ModelStub: add_script, set_default, remove_script, scripts, requests,
wait_for, reset, stop. ``StubClient.from_state(path)`` reads the state file the serve command wrote.
"""

import json
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.modelstub.script import Script
from tests.modelstub.server import TOKEN_HEADER, StubError


class StubClient:
    def __init__(self, url, token, timeout=10.0):
        self.url = url.rstrip('/')
        self.token = token
        self.timeout = timeout

    @classmethod
    def from_state(cls, path, timeout=10.0):
        with open(path, encoding='utf-8') as src:
            state = json.load(src)
        return cls(state['url'], state['token'], timeout)

    def _call(self, method, path, body=None, params=None):
        url = self.url + path
        if params:
            url += '?' + urllib.parse.urlencode(dict((k, v) for k, v in params.items() if v is not None))
        data = None if body is None and method in ('GET', 'DELETE') else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={TOKEN_HEADER: self.token, 'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b'null')
        except urllib.error.HTTPError as err:
            raise StubError('%s %s: %d %s' % (method, path, err.code, err.read().decode('utf-8', 'replace')))

    def health(self):
        return self._call('GET', '/_stub/health')

    def add_script(self, key, script):
        self._call('PUT', '/_stub/scripts/' + urllib.parse.quote(key, safe=''), _plain(script))

    def set_default(self, script):
        self._call('PUT', '/_stub/default', None if script is None else _plain(script))

    def remove_script(self, key):
        try:
            self._call('DELETE', '/_stub/scripts/' + urllib.parse.quote(key, safe=''))
            return True
        except StubError:
            return False

    def scripts(self):
        return self._call('GET', '/_stub/scripts')

    def requests(self, key=None, side=None, since=0, path=None):
        side = None if side is None else ('true' if side else 'false')
        params = {'key': key, 'side': side, 'since': since, 'path': path}
        return self._call('GET', '/_stub/requests', params=params)['requests']

    def wait_for(self, count=1, timeout=10.0, **filters):
        deadline = time.monotonic() + timeout
        while True:
            found = self.requests(**filters)
            if len(found) >= count or time.monotonic() > deadline:
                if len(found) >= count:
                    return found
                raise StubError('%d request(s) matching %r after %.1fs, wanted %d'
                                % (len(found), filters, timeout, count))
            time.sleep(0.1)

    def reset(self, scripts=False):
        self._call('POST', '/_stub/reset', {'scripts': scripts})

    def stop(self):
        self._call('POST', '/_stub/stop', {})


def _plain(script):
    if isinstance(script, Script):
        plain = script.as_dict()
        plain.pop('cursor', None)
        return plain
    return script
