"""What the real-CLI tests check, once for each CLI (test_claude.py, test_codex.py, test_opencode.py call these):
a scripted file is written and a scripted command run, the requests carry the brief and the key, an unknown key
fails the run quickly with an error in the event stream, a follow-up in the same session sends the history
again, and a tool call that needs an approval is refused without a hang."""

import json
import os
import uuid

from tests.modelstub import approval, shell, text, write
from tests.modelstub.agents import run_agent

# How each CLI sends its key, and what its event stream says of a refused key (docs/agent-cli-facts.md).
KEY_HEADER = {'claude': ('x-api-key', '%s'), 'codex': ('authorization', 'Bearer %s'),
              'opencode': ('authorization', 'Bearer %s')}
# claude retries a 401 ten times with backoff (minutes) unless told otherwise; codex retries it 5 times in ~6 s;
# opencode does not retry it.
FAIL_FAST_ENV = {'claude': {'CLAUDE_CODE_MAX_RETRIES': '0'}}
SECONDS = 40  # the most one run may take before it is killed (each run here takes 1-10 s)


def new_key():
    return 'sk-test-%s' % uuid.uuid4().hex[:12]


def _main_requests(stub, key):
    return [r for r in stub.requests(key=key) if r['protocol'] and not r['side']]


def _files_under(*roots):
    for root in roots:
        for base, _dirs, names in os.walk(root):
            for name in names:
                yield os.path.join(base, name)


def writes_file_and_runs_command(kind, agent_bin, stub, workspace):
    key, marker = new_key(), 'ran-%s' % uuid.uuid4().hex[:8]
    brief = 'Create hello.txt and show it (%s)' % marker
    stub.add_script(key, [write('hello.txt', 'hello from the stub\n'), shell('cat hello.txt && echo %s' % marker),
                          text('All done: %s' % marker)])
    run = run_agent(kind, agent_bin, stub, key, workspace.repo, workspace.home, brief, timeout=SECONDS)
    assert run.returncode == 0 and not run.timed_out, run.explain()
    assert workspace.read('hello.txt') == 'hello from the stub\n'
    assert run.session, run.explain()
    main = _main_requests(stub, key)
    assert len(main) == 3, [(r['path'], r['turn'], r['status']) for r in main]
    assert brief in json.dumps(main[0]['body'])
    header, form = KEY_HEADER[kind]
    assert all(r['headers'].get(header) == form % key for r in main)
    # The command's output went back to the model with the third request, and shows in the event stream.
    assert '%s' % marker in json.dumps(main[2]['body']).replace('\\n', '\n').split('All done')[0]
    assert 'hello from the stub' in json.dumps(main[2]['body'])
    assert marker in run.stdout
    # The key is in no argument, not in the event stream or stderr, and in no file the CLI wrote.
    assert not any(key in part for part in run.argv)
    assert key not in run.stdout and key not in run.stderr
    tmpdir = run.env['TMPDIR']
    for path in _files_under(workspace.home, tmpdir):
        with open(path, 'rb') as src:
            assert key.encode() not in src.read(), path
    return run


def unknown_key_fails_fast(kind, agent_bin, stub, workspace):
    stub.add_script(new_key(), [text('never')])
    key = new_key()  # registered nowhere: the stub answers 401
    run = run_agent(kind, agent_bin, stub, key, workspace.repo, workspace.home, 'Say hello', timeout=SECONDS,
                    extra_env=FAIL_FAST_ENV.get(kind))
    assert run.returncode not in (0, None) and not run.timed_out, run.explain()
    assert run.seconds < 30, run.explain()  # a retrying CLI takes minutes (docs/agent-cli-facts.md)
    assert key not in run.stdout, run.explain()
    assert [r['status'] for r in stub.requests(key=key) if r['protocol']] and \
        all(r['status'] == 401 for r in stub.requests(key=key) if r['protocol'] and r['protocol'] != 'models')
    return run


def follow_up_sends_history(kind, agent_bin, stub, workspace):
    key = new_key()
    stub.add_script(key, [text('First answer ALPHA-1.'), text('Second answer BETA-2.')])
    first = run_agent(kind, agent_bin, stub, key, workspace.repo, workspace.home, 'First brief ALPHA',
                      timeout=SECONDS)
    assert first.returncode == 0 and first.session, first.explain()
    seen = len(stub.requests())
    second = run_agent(kind, agent_bin, stub, key, workspace.repo, workspace.home, 'Follow-up BETA',
                       session=first.session, timeout=SECONDS)
    assert second.returncode == 0, second.explain()
    assert second.session == first.session, second.explain()
    later = [r for r in _main_requests(stub, key) if r['id'] > seen]
    assert len(later) == 1
    sent = json.dumps(later[0]['body'])
    assert 'First brief ALPHA' in sent and 'First answer ALPHA-1.' in sent and 'Follow-up BETA' in sent
    assert sent.index('First brief ALPHA') < sent.index('First answer ALPHA-1.') < sent.index('Follow-up BETA')
    assert 'Second answer BETA-2.' in second.stdout
    return first, second


def approval_is_refused(kind, agent_bin, stub, workspace, config=None, extra_args=()):
    key = new_key()
    command = 'python3 -c "open(\'approved.txt\', \'w\').write(\'x\')"'
    stub.add_script(key, [approval(command), text('Went on without it.')])
    run = run_agent(kind, agent_bin, stub, key, workspace.repo, workspace.home, 'Do something that needs approval',
                    timeout=SECONDS, config=config, extra_args=extra_args)
    assert not run.timed_out and run.returncode == 0, run.explain()
    assert not os.path.exists(workspace.path('approved.txt'))
    return run, _main_requests(stub, key)
