"""The three wire protocols: what a request asks for, and a turn's actions as that protocol's answer.

Each protocol turns a turn (a list of actions, see script.py) into either a JSON body or a list of server-sent
events, and an error into the protocol's own error body. Which tool carries an action is chosen from the tools the
request itself sent (``plan``): claude's Write/Bash, codex's apply_patch and shell tools, opencode's write/bash.
docs/model-endpoints.md says which published references these shapes follow.
"""

import itertools
import json
import posixpath
import re
import time

_ids = itertools.count(1)

WRITE_TOOLS = ('Write', 'write', 'write_file')
PATCH_TOOLS = ('apply_patch',)
SHELL_TOOLS = ('Bash', 'bash', 'shell_command', 'shell', 'exec_command', 'local_shell', 'run_shell_command')
CWD_PATTERNS = (
    re.compile(r'<cwd>([^<\n]+)</cwd>'),
    re.compile(r'(?:Primary working directory|Working directory|Current working directory|cwd)\s*:\s*(/[^\s<"]*)'),
)


def new_id(prefix):
    return '%s_stub%06d' % (prefix, next(_ids))


def strings(value):
    """Every string inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def find_cwd(body):
    """The agent's working directory as its request tells it (system prompt or environment context), or None."""
    for pattern in CWD_PATTERNS:
        for text in strings(body):
            match = pattern.search(text)
            if match:
                return match.group(1).rstrip('.,;:')
    return None


def chunks(text, size=24):
    """A text in a few pieces, as a model streams it."""
    return [text[i:i + size] for i in range(0, len(text), size)] or ['']


def estimate_tokens(body):
    return max(1, len(json.dumps(body)) // 4) if body is not None else 1


class Tool:
    """One tool a request offered: its name, its form (function, custom, local_shell) and input schema."""

    def __init__(self, name, form='function', schema=None):
        self.name = name
        self.form = form
        self.schema = schema or {}

    @property
    def properties(self):
        return self.schema.get('properties') or {}

    def param(self, *names):
        for name in names:
            if name in self.properties:
                return name
        return None

    def __repr__(self):
        return 'Tool(%r, %r)' % (self.name, self.form)


class Call:
    """A tool call to answer: the tool's name and form, and its input (a dict, or a string for a custom tool)."""

    def __init__(self, tool, arguments):
        self.name = tool.name
        self.form = tool.form
        self.arguments = arguments
        self.id = new_id('call')

    @property
    def argument_text(self):
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class PlanError(Exception):
    """An action no tool of the request can carry."""


def _pick(tools, names):
    by_name = dict((t.name, t) for t in tools)
    for name in names:
        if name in by_name:
            return by_name[name]
    return None


def _absolute(path, cwd):
    if posixpath.isabs(path) or not cwd:
        return path
    return posixpath.normpath(posixpath.join(cwd, path))


def _shell_call(tool, command, cwd, escalate=False):
    if tool.form == 'local_shell':
        return Call(tool, {'type': 'exec', 'command': ['bash', '-lc', command]})
    name = tool.param('command', 'cmd') or 'command'
    schema = tool.properties.get(name) or {}
    arguments = {name: ['bash', '-lc', command] if schema.get('type') == 'array' else command}
    if tool.param('description'):
        arguments['description'] = 'Run: %s' % command[:60]
    if tool.param('workdir') and cwd:
        arguments['workdir'] = cwd
    if escalate and tool.param('sandbox_permissions'):
        arguments['sandbox_permissions'] = 'require_escalated'
        if tool.param('justification'):
            arguments['justification'] = 'The scripted test asks for an approval.'
    return Call(tool, arguments)


def _patch_text(path, content):
    lines = content.split('\n')
    if lines and lines[-1] == '':
        lines = lines[:-1]
    return '*** Begin Patch\n*** Add File: %s\n%s\n*** End Patch\n' % (path, '\n'.join('+' + l for l in lines))


def plan(actions, tools, cwd):
    """A turn's actions as (texts, calls) for a request that offered ``tools``; raises PlanError."""
    texts, calls = [], []
    for action in actions:
        if 'text' in action:
            texts.append(action['text'])
        elif 'call' in action:
            tool = _pick(tools, [action['call']])
            if tool is None:
                raise PlanError('no tool %r among %s' % (action['call'], [t.name for t in tools]))
            calls.append(Call(tool, action.get('input', {})))
        elif 'write' in action:
            path, content = action['write'], action['content']
            tool = _pick(tools, WRITE_TOOLS)
            if tool is not None:
                key = tool.param('file_path', 'filePath', 'path') or 'file_path'
                calls.append(Call(tool, {key: _absolute(path, cwd), 'content': content}))
                continue
            tool = _pick(tools, PATCH_TOOLS)
            if tool is not None:
                patch = _patch_text(path, content)
                calls.append(Call(tool, patch if tool.form == 'custom' else {tool.param('input', 'patch') or 'input': patch}))
                continue
            tool = _pick(tools, SHELL_TOOLS)
            if tool is None:
                raise PlanError('no tool to write a file among %s' % [t.name for t in tools])
            marker = 'STUB_EOF_%d' % next(_ids)
            calls.append(_shell_call(tool, "cat > %s <<'%s'\n%s\n%s" % (path, marker, content.rstrip('\n'), marker), cwd))
        elif 'shell' in action or 'approval' in action:
            tool = _pick(tools, SHELL_TOOLS)
            if tool is None:
                raise PlanError('no shell tool among %s' % [t.name for t in tools])
            command = action.get('shell') or action.get('approval')
            calls.append(_shell_call(tool, command, cwd, escalate='approval' in action))
    return texts, calls


def sse(event, data):
    """One server-sent event; ``event`` None for a data-only event (chat completions)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))
    head = 'event: %s\n' % event if event else ''
    return ('%sdata: %s\n\n' % (head, payload)).encode()


class Protocol:
    name = None

    def tools(self, body):
        raise NotImplementedError

    def is_stream(self, body):
        return bool((body or {}).get('stream'))

    def model(self, body):
        return (body or {}).get('model') or 'stub-model'


class Anthropic(Protocol):
    """POST /v1/messages (also ?beta=true)."""
    name = 'anthropic'
    ERROR_TYPES = {400: 'invalid_request_error', 401: 'authentication_error', 403: 'permission_error',
                   404: 'not_found_error', 413: 'request_too_large', 429: 'rate_limit_error', 500: 'api_error',
                   529: 'overloaded_error'}
    MESSAGES = {401: 'invalid x-api-key', 429: 'Number of requests has exceeded your rate limit.',
                500: 'Internal server error', 529: 'Overloaded'}

    def tools(self, body):
        out = []
        for tool in (body or {}).get('tools') or []:
            if isinstance(tool, dict) and tool.get('name'):
                form = 'function' if tool.get('type') in (None, 'custom') else tool['type']
                out.append(Tool(tool['name'], form, tool.get('input_schema')))
        return out

    def message(self, body, texts, calls):
        content = [{'type': 'text', 'text': t} for t in texts]
        content += [{'type': 'tool_use', 'id': c.id.replace('call_', 'toolu_'), 'name': c.name,
                     'input': c.arguments} for c in calls]
        for block, c in zip(content[len(texts):], calls):
            c.id = block['id']
        return {'id': new_id('msg'), 'type': 'message', 'role': 'assistant', 'model': self.model(body),
                'content': content, 'stop_reason': 'tool_use' if calls else 'end_turn', 'stop_sequence': None,
                'usage': {'input_tokens': estimate_tokens(body), 'output_tokens': 8 + 4 * len(content),
                          'cache_creation_input_tokens': 0, 'cache_read_input_tokens': 0}}

    def json_body(self, body, texts, calls):
        return self.message(body, texts, calls)

    def events(self, body, texts, calls):
        message = self.message(body, texts, calls)
        start = dict(message, content=[], stop_reason=None, usage=dict(message['usage'], output_tokens=1))
        out = [sse('message_start', {'type': 'message_start', 'message': start}), sse('ping', {'type': 'ping'})]
        for index, block in enumerate(message['content']):
            if block['type'] == 'text':
                out.append(sse('content_block_start', {'type': 'content_block_start', 'index': index,
                                                       'content_block': {'type': 'text', 'text': ''}}))
                for piece in chunks(block['text']):
                    out.append(sse('content_block_delta', {'type': 'content_block_delta', 'index': index,
                                                           'delta': {'type': 'text_delta', 'text': piece}}))
            else:
                out.append(sse('content_block_start', {
                    'type': 'content_block_start', 'index': index,
                    'content_block': {'type': 'tool_use', 'id': block['id'], 'name': block['name'], 'input': {}}}))
                for piece in chunks(json.dumps(block['input']), 64):
                    out.append(sse('content_block_delta', {'type': 'content_block_delta', 'index': index,
                                                           'delta': {'type': 'input_json_delta', 'partial_json': piece}}))
            out.append(sse('content_block_stop', {'type': 'content_block_stop', 'index': index}))
        out.append(sse('message_delta', {'type': 'message_delta',
                                         'delta': {'stop_reason': message['stop_reason'], 'stop_sequence': None},
                                         'usage': {'output_tokens': message['usage']['output_tokens']}}))
        out.append(sse('message_stop', {'type': 'message_stop'}))
        return out

    def error(self, status, message=None, kind=None):
        kind = kind or self.ERROR_TYPES.get(status, 'api_error' if status >= 500 else 'invalid_request_error')
        return {'type': 'error', 'error': {'type': kind, 'message': message or self.MESSAGES.get(status, kind)},
                'request_id': new_id('req')}

    def models(self, names):
        data = [{'type': 'model', 'id': n, 'display_name': n, 'created_at': '2025-01-01T00:00:00Z'} for n in names]
        return {'data': data, 'has_more': False, 'first_id': names[0] if names else None,
                'last_id': names[-1] if names else None}


class OpenAIErrors:
    ERRORS = {
        400: ('invalid_request_error', None, 'Invalid request.'),
        401: ('invalid_request_error', 'invalid_api_key', 'Incorrect API key provided.'),
        403: ('invalid_request_error', 'unsupported_country_region_territory', 'Forbidden.'),
        404: ('invalid_request_error', 'model_not_found', 'The model does not exist or you do not have access to it.'),
        429: ('requests', 'rate_limit_exceeded', 'Rate limit reached for requests. Please try again in 1s.'),
        500: ('server_error', None, 'The server had an error while processing your request.'),
        503: ('server_error', 'server_is_overloaded', 'The server is overloaded, please try again later.'),
        529: ('server_error', 'server_is_overloaded', 'The server is overloaded, please try again later.'),
    }

    def error(self, status, message=None, kind=None):
        default = self.ERRORS.get(status, ('server_error' if status >= 500 else 'invalid_request_error', None,
                                           'Error %d.' % status))
        return {'error': {'message': message or default[2], 'type': kind or default[0], 'param': None,
                          'code': default[1]}}

    def models(self, names):
        return {'object': 'list', 'data': [{'id': n, 'object': 'model', 'created': 1735689600, 'owned_by': 'stub'}
                                           for n in names]}


class Responses(OpenAIErrors, Protocol):
    """POST /v1/responses (the OpenAI Responses API, as codex uses it)."""
    name = 'responses'

    def tools(self, body):
        out = []
        for tool in (body or {}).get('tools') or []:
            if not isinstance(tool, dict):
                continue
            kind = tool.get('type')
            if kind == 'function' and tool.get('name'):
                out.append(Tool(tool['name'], 'function', tool.get('parameters')))
            elif kind == 'custom' and tool.get('name'):
                out.append(Tool(tool['name'], 'custom', {}))
            elif kind == 'local_shell':
                out.append(Tool('local_shell', 'local_shell', {}))
        return out

    def items(self, texts, calls):
        items = []
        if texts:
            items.append({'id': new_id('msg'), 'type': 'message', 'status': 'completed', 'role': 'assistant',
                          'content': [{'type': 'output_text', 'text': '\n\n'.join(texts), 'annotations': []}]})
        for c in calls:
            if c.form == 'custom':
                items.append({'id': new_id('ctc'), 'type': 'custom_tool_call', 'status': 'completed',
                              'call_id': c.id, 'name': c.name, 'input': c.arguments})
            elif c.form == 'local_shell':
                items.append({'id': new_id('lsh'), 'type': 'local_shell_call', 'status': 'completed',
                              'call_id': c.id, 'action': c.arguments})
            else:
                items.append({'id': new_id('fc'), 'type': 'function_call', 'status': 'completed',
                              'call_id': c.id, 'name': c.name, 'arguments': c.argument_text})
        return items

    def response(self, body, items, status='completed', response_id=None):
        usage = {'input_tokens': estimate_tokens(body), 'input_tokens_details': {'cached_tokens': 0},
                 'output_tokens': 8 + 4 * len(items), 'output_tokens_details': {'reasoning_tokens': 0}}
        usage['total_tokens'] = usage['input_tokens'] + usage['output_tokens']
        return {'id': response_id or new_id('resp'), 'object': 'response', 'created_at': int(time.time()),
                'status': status, 'error': None, 'incomplete_details': None, 'model': self.model(body),
                'output': items, 'parallel_tool_calls': bool((body or {}).get('parallel_tool_calls')),
                'previous_response_id': (body or {}).get('previous_response_id'), 'store': False,
                'tool_choice': (body or {}).get('tool_choice', 'auto'), 'tools': [],
                'usage': usage if status == 'completed' else None}

    def json_body(self, body, texts, calls):
        return self.response(body, self.items(texts, calls))

    def events(self, body, texts, calls):
        items = self.items(texts, calls)
        rid = new_id('resp')
        seq = itertools.count(0)
        out = []

        def event(kind, **fields):
            out.append(sse(kind, dict({'type': kind, 'sequence_number': next(seq)}, **fields)))

        event('response.created', response=self.response(body, [], 'in_progress', rid))
        event('response.in_progress', response=self.response(body, [], 'in_progress', rid))
        for index, item in enumerate(items):
            if item['type'] == 'message':
                text = item['content'][0]['text']
                event('response.output_item.added', output_index=index,
                      item=dict(item, status='in_progress', content=[]))
                part = {'type': 'output_text', 'text': '', 'annotations': []}
                event('response.content_part.added', item_id=item['id'], output_index=index, content_index=0,
                      part=part)
                for piece in chunks(text):
                    event('response.output_text.delta', item_id=item['id'], output_index=index, content_index=0,
                          delta=piece)
                event('response.output_text.done', item_id=item['id'], output_index=index, content_index=0,
                      text=text)
                event('response.content_part.done', item_id=item['id'], output_index=index, content_index=0,
                      part=dict(part, text=text))
            elif item['type'] == 'function_call':
                event('response.output_item.added', output_index=index,
                      item=dict(item, status='in_progress', arguments=''))
                for piece in chunks(item['arguments'], 64):
                    event('response.function_call_arguments.delta', item_id=item['id'], output_index=index,
                          delta=piece)
                event('response.function_call_arguments.done', item_id=item['id'], output_index=index,
                      arguments=item['arguments'])
            elif item['type'] == 'custom_tool_call':
                event('response.output_item.added', output_index=index,
                      item=dict(item, status='in_progress', input=''))
                for piece in chunks(item['input'], 64):
                    event('response.custom_tool_call_input.delta', item_id=item['id'], output_index=index,
                          delta=piece)
                event('response.custom_tool_call_input.done', item_id=item['id'], output_index=index,
                      input=item['input'])
            else:
                event('response.output_item.added', output_index=index, item=dict(item, status='in_progress'))
            event('response.output_item.done', output_index=index, item=item)
        event('response.completed', response=self.response(body, items, 'completed', rid))
        return out


class Chat(OpenAIErrors, Protocol):
    """POST /v1/chat/completions (OpenAI-compatible chat completions, as opencode's provider uses them)."""
    name = 'chat'

    def tools(self, body):
        out = []
        for tool in (body or {}).get('tools') or []:
            function = (tool or {}).get('function') if isinstance(tool, dict) else None
            if function and function.get('name'):
                out.append(Tool(function['name'], 'function', function.get('parameters')))
        return out

    def _base(self, body, cid, created):
        return {'id': cid, 'object': 'chat.completion.chunk', 'created': created, 'model': self.model(body),
                'system_fingerprint': None}

    def _usage(self, body, calls):
        usage = {'prompt_tokens': estimate_tokens(body), 'completion_tokens': 8 + 4 * len(calls)}
        usage['total_tokens'] = usage['prompt_tokens'] + usage['completion_tokens']
        return usage

    def json_body(self, body, texts, calls):
        message = {'role': 'assistant', 'content': '\n\n'.join(texts) if texts else None, 'refusal': None}
        if calls:
            message['tool_calls'] = [{'id': c.id, 'type': 'function',
                                      'function': {'name': c.name, 'arguments': c.argument_text}} for c in calls]
        return {'id': new_id('chatcmpl'), 'object': 'chat.completion', 'created': int(time.time()),
                'model': self.model(body), 'system_fingerprint': None,
                'choices': [{'index': 0, 'message': message, 'logprobs': None,
                             'finish_reason': 'tool_calls' if calls else 'stop'}],
                'usage': self._usage(body, calls)}

    def events(self, body, texts, calls):
        cid, created = new_id('chatcmpl'), int(time.time())
        out = []

        def chunk(delta, finish=None):
            out.append(sse(None, dict(self._base(body, cid, created), choices=[
                {'index': 0, 'delta': delta, 'logprobs': None, 'finish_reason': finish}])))

        chunk({'role': 'assistant', 'content': ''})
        for piece in chunks('\n\n'.join(texts)) if texts else []:
            chunk({'content': piece})
        for index, c in enumerate(calls):
            chunk({'tool_calls': [{'index': index, 'id': c.id, 'type': 'function',
                                   'function': {'name': c.name, 'arguments': ''}}]})
            for piece in chunks(c.argument_text, 64):
                chunk({'tool_calls': [{'index': index, 'function': {'arguments': piece}}]})
        chunk({}, 'tool_calls' if calls else 'stop')
        if ((body or {}).get('stream_options') or {}).get('include_usage'):
            out.append(sse(None, dict(self._base(body, cid, created), choices=[], usage=self._usage(body, calls))))
        out.append(sse(None, '[DONE]'))
        return out


PROTOCOLS = {'anthropic': Anthropic(), 'responses': Responses(), 'chat': Chat()}
ROUTES = {'/v1/messages': 'anthropic', '/v1/responses': 'responses', '/v1/chat/completions': 'chat'}
