"""Scripts: what the stand-in model does, turn by turn.

A script is a list of turns and what to answer once they are used up (``then``). A turn is one action, or a list
of actions answered together in one response (text and tool calls; an error, ``drop`` or ``hang`` stands alone).
Actions are plain dicts, so a script can be JSON:

    {"text": "Done."}                          final answer: the response ends the turn (no tool call)
    {"write": "hello.py", "content": "..."}    write a file (path relative to the agent's working directory)
    {"shell": "python3 hello.py"}              run a command through the CLI's shell tool
    {"approval": "curl -sS http://127.0.0.1:9/"}  a tool call the headless CLI has to ask approval for
    {"call": "Read", "input": {...}}           any tool of the request, by its exact name, with this input
    {"error": 429, "message": "...", "retry_after": 1}   the protocol's error body with that HTTP status
    {"drop": true}                             start a streamed answer and cut the connection in the middle
    {"hang": 5}  /  {"hang": null}             answer nothing for 5 s (then close) / until the server stops

Options on a turn (its first action): ``"delay": seconds`` before the answer starts, ``"pace": seconds`` between
streamed events, ``"times": n`` serves that turn n times before the cursor moves on.

How a turn is chosen: each script has a cursor. Every request that carries the agent's tools takes the turn
under the cursor and moves it on, whatever that turn is, so an error answered to a request is followed by the
next turn when the CLI retries ("error then recover" is two turns; "always fail" is ``then`` an error, or
``times``). Side requests (no tools: title generation, summaries) get a short text and leave the cursor alone.
"""

import copy
import threading

ACTION_KINDS = ('text', 'write', 'shell', 'approval', 'call', 'error', 'drop', 'hang')
TOOL_KINDS = ('write', 'shell', 'approval', 'call')
ALONE_KINDS = ('error', 'drop', 'hang')
DEFAULT_THEN = {'text': 'Done.'}


class ScriptError(ValueError):
    """A script that cannot be served."""


def text(words, **options):
    return dict({'text': words}, **options)


def write(path, content, **options):
    return dict({'write': path, 'content': content}, **options)


def shell(command, **options):
    return dict({'shell': command}, **options)


def approval(command, **options):
    return dict({'approval': command}, **options)


def call(name, tool_input, **options):
    return dict({'call': name, 'input': tool_input}, **options)


def error(status, message=None, **options):
    action = {'error': int(status)}
    if message is not None:
        action['message'] = message
    action.update(options)
    return action


def drop(**options):
    return dict({'drop': True}, **options)


def hang(seconds=None, **options):
    return dict({'hang': seconds}, **options)


def kind_of(action):
    """The kind of an action dict (its one key out of ACTION_KINDS)."""
    if not isinstance(action, dict):
        raise ScriptError('an action is a dict, not %r' % (action,))
    kinds = [k for k in ACTION_KINDS if k in action]
    if len(kinds) != 1:
        raise ScriptError('an action names exactly one of %s: %r' % (', '.join(ACTION_KINDS), action))
    return kinds[0]


def normal_turn(turn):
    """A turn as a list of checked actions."""
    actions = list(turn) if isinstance(turn, (list, tuple)) else [turn]
    if not actions:
        raise ScriptError('a turn has at least one action')
    kinds = [kind_of(a) for a in actions]
    for action, kind in zip(actions, kinds):
        if kind in ALONE_KINDS and len(actions) > 1:
            raise ScriptError('%s stands alone in its turn: %r' % (kind, actions))
        if kind == 'write' and not isinstance(action.get('content'), str):
            raise ScriptError('write needs "content" (a string): %r' % (action,))
        if kind == 'error' and not (isinstance(action['error'], int) and 400 <= action['error'] <= 599):
            raise ScriptError('error is an HTTP status 400-599: %r' % (action,))
        if kind == 'call' and not isinstance(action.get('input', {}), (dict, str)):
            raise ScriptError('call needs "input" (a dict, or a string for a freeform tool): %r' % (action,))
        if kind == 'hang' and action['hang'] is not None and not isinstance(action['hang'], (int, float)):
            raise ScriptError('hang is seconds or null (until the server stops): %r' % (action,))
    return [dict(a) for a in actions]


class Script:
    """Turns served in order under a cursor, then ``then`` for every further request."""

    def __init__(self, turns=(), then=None, name=None, cwd=None):
        self.turns = [normal_turn(t) for t in turns]
        self.then = normal_turn(then if then is not None else DEFAULT_THEN)
        self.name = name
        self.cwd = cwd  # the agent's working directory when a request does not tell it
        self._lock = threading.Lock()
        self._cursor = 0
        self._served = 0  # how often the turn under the cursor has been served

    @classmethod
    def of(cls, value):
        """A Script from a Script, a list of turns, or a dict {"turns": [...], "then": ..., "name", "cwd"}."""
        if isinstance(value, Script):
            return value
        if isinstance(value, (list, tuple)):
            return cls(turns=value)
        if isinstance(value, dict):
            unknown = set(value) - {'turns', 'then', 'name', 'cwd'}
            if unknown:
                raise ScriptError('unknown script key(s): %s' % ', '.join(sorted(unknown)))
            return cls(turns=value.get('turns') or (), then=value.get('then'), name=value.get('name'),
                       cwd=value.get('cwd'))
        raise ScriptError('a script is a list of turns or a dict with "turns": %r' % (value,))

    def next_turn(self):
        """(index, actions) of the turn to serve now, and move the cursor; index is None for ``then``."""
        with self._lock:
            if self._cursor >= len(self.turns):
                return None, copy.deepcopy(self.then)
            index = self._cursor
            actions = self.turns[index]
            times = int(actions[0].get('times', 1) or 1)
            self._served += 1
            if self._served >= times:
                self._cursor += 1
                self._served = 0
            return index, copy.deepcopy(actions)

    def reset(self):
        with self._lock:
            self._cursor = 0
            self._served = 0

    @property
    def cursor(self):
        return self._cursor

    def as_dict(self):
        out = {'turns': copy.deepcopy(self.turns), 'then': copy.deepcopy(self.then), 'cursor': self._cursor}
        if self.name:
            out['name'] = self.name
        if self.cwd:
            out['cwd'] = self.cwd
        return out
