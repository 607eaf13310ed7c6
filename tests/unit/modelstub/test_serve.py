"""The stub as a process of its own: ``python -m tests.modelstub serve`` with a scripts file and a state file,
driven through its token-guarded control API (StubClient)."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.modelstub import StubClient, StubError, text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _serve(tmp_path, *args):
    state = str(tmp_path / 'stub.json')
    proc = subprocess.Popen([sys.executable, '-m', 'tests.modelstub', 'serve', '--state', state] + list(args),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not os.path.exists(state):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError('serve did not start: %s' % (proc.communicate(),))
        time.sleep(0.05)
    return proc, state


def _model_request(url, key, prompt='hi'):
    body = json.dumps({'model': 'm', 'stream': False, 'messages': [{'role': 'user', 'content': prompt}],
                       'tools': [{'type': 'function', 'function': {'name': 'bash', 'parameters': {}}}]}).encode()
    request = urllib.request.Request(url + '/v1/chat/completions', data=body, method='POST',
                                     headers={'Authorization': 'Bearer %s' % key, 'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_with_scripts_file_state_file_and_control_api(tmp_path):
    scripts = tmp_path / 'scripts.json'
    scripts.write_text(json.dumps({'scripts': {'sk-file': [{'text': 'from the file'}]},
                                   'default': {'turns': [{'text': 'default answer'}]}, 'models': ['m1', 'm2']}))
    proc, state_path = _serve(tmp_path, '--scripts', str(scripts), '--token', 'tok-123')
    try:
        state = json.loads(open(state_path, encoding='utf-8').read())
        assert state['pid'] == proc.pid and state['token'] == 'tok-123'
        assert state['url'] == 'http://127.0.0.1:%d' % state['port']
        assert oct(os.stat(state_path).st_mode & 0o777) == '0o600'
        client = StubClient.from_state(state_path)
        assert client.health()['ok'] is True
        assert _model_request(state['url'], 'sk-file')[1]['choices'][0]['message']['content'] == 'from the file'
        assert _model_request(state['url'], 'sk-other')[1]['choices'][0]['message']['content'] == 'default answer'
        client.add_script('sk-added', [text('added over HTTP')])
        assert _model_request(state['url'], 'sk-added', 'the brief')[1]['choices'][0]['message']['content'] == \
            'added over HTTP'
        recorded = client.requests(key='sk-added')
        assert len(recorded) == 1 and recorded[0]['body']['messages'][0]['content'] == 'the brief'
        assert [r['script'] for r in client.requests()] == ['sk-file', '*default*', 'sk-added']
        assert client.wait_for(3, timeout=2)
        assert set(client.scripts()) == {'sk-file', '*default*', 'sk-added'}
        assert client.remove_script('sk-added') and not client.remove_script('sk-added')
        client.set_default(None)
        assert _model_request(state['url'], 'sk-added')[0] == 401
        client.reset()
        assert client.requests() == []
        with pytest.raises(StubError):
            StubClient(state['url'], 'wrong-token').requests()
        client.stop()
        assert proc.wait(10) == 0
        assert not os.path.exists(state_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_refuses_an_address_outside_loopback(tmp_path):
    done = subprocess.run([sys.executable, '-m', 'tests.modelstub', 'serve', '--host', '0.0.0.0', '--port', '0'],
                          cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and '127.0.0.0/8' in done.stderr


def test_serve_stops_on_sigterm(tmp_path):
    proc, state_path = _serve(tmp_path)
    proc.terminate()
    assert proc.wait(10) == 0
    assert not os.path.exists(state_path)
