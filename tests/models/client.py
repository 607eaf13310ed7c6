"""The control API of a model stand-in that runs in another process (a try-out cluster's or cloud's)."""

import json
import urllib.request


class StubClient:
    def __init__(self, url, token):
        self.url = url.rstrip('/')
        self.token = token

    @classmethod
    def of_site(cls, info):
        """The stand-in of a try-out site, from its info file (cluster.json, cloud.json)."""
        return cls(info['agents']['model_url'], info['control']['token'])

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + '/_stub/' + path, data=data, method=method,
                                         headers={'X-Stub-Token': self.token, 'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())

    def add_script(self, key, turns):
        return self._call('POST', 'scripts', {'key': key, 'turns': turns})

    def requests(self, key=None, agent_only=False):
        out = self._call('GET', 'requests' + ('?key=%s' % key if key else ''))
        return [r for r in out if r['tools']] if agent_only else out

    def reset(self):
        return self._call('POST', 'reset', {})
