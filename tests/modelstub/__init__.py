"""A scripted stand-in for the model endpoints the agent CLIs talk to (Anthropic Messages, OpenAI Responses,
OpenAI-compatible chat completions), on loopback, for tests. docs/model-endpoints.md describes it.

    from tests.modelstub import ModelStub, write, shell, text

    with ModelStub() as stub:
        stub.add_script('sk-test-1', [write('hello.txt', 'hi\\n'), shell('cat hello.txt'), text('Done.')])
        ... run the agent with base URL stub.url (+ '/v1' for codex and opencode) and key sk-test-1 ...
        assert stub.requests(key='sk-test-1', side=False)
"""

from tests.modelstub.client import StubClient
from tests.modelstub.script import (Script, ScriptError, approval, call, drop, error, hang, shell, text,
                                    write)
from tests.modelstub.server import DEFAULT, ModelStub, StubError, check_loopback, key_of

__all__ = ['ModelStub', 'StubClient', 'StubError', 'Script', 'ScriptError', 'DEFAULT', 'approval', 'call', 'drop',
           'error', 'hang', 'shell', 'text', 'write', 'check_loopback', 'key_of']
