# -*- coding: utf-8 -*-
# Copyright: ephemera.workspaces contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded reading of API answers: no answer of the Proxmox VE API or of a cloud's API is read beyond its cap.

The HTTP libraries under the clients read a whole answer into memory, however large: a proxy that answers with an
endless body, or an API host that is not the one meant, filled the controller's memory. Every client reads the body
itself, up to a cap (below), and stops there: the connection is closed, nothing of the answer is used, and the call
fails with :class:`AnswerTooLarge`, which each client turns into its error (a refusal for a read, an unknown outcome
for a call that acts: it may have been carried out).

The caps are far above any answer the APIs give: Proxmox VE answers whole-cluster listings (``/cluster/resources``
of 10,000 guests is a few MiB), the clouds page their lists (at most 500 items a page).
"""

MIB = 1024 * 1024
PVE_ANSWER_MAX = 32 * MIB
CLOUD_ANSWER_MAX = 16 * MIB
CHUNK = 64 * 1024


class AnswerTooLarge(Exception):
    """An API answer longer than the most the client reads of one answer; nothing of it was used."""

    def __init__(self, url, limit, declared=None):
        self.url = url
        self.limit = limit
        self.declared = declared
        said = ' (it announced %d bytes)' % declared if declared is not None else ''
        super().__init__(
            'the answer of %s is larger than %s%s, the most this collection reads of one API answer; the rest was not '
            'read and nothing of it was used. An API answers far less: check that the endpoint is the API itself '
            '(not a proxy or another server answering in its place)' % (_short(url), size_text(limit), said))


def size_text(size):
    return '%d MiB' % (size // MIB) if size % MIB == 0 else '%d bytes' % size


def _short(url):
    url = str(url or 'the API').split('?', 1)[0]
    return url if len(url) <= 200 else url[:200] + '...'


def _declared(headers):
    try:
        value = (headers or {}).get('Content-Length')
        return int(value) if value is not None and str(value).strip().isdigit() else None
    except (TypeError, ValueError):
        return None


def read_bounded(chunks, limit, url=None, headers=None, close=None):
    """The bytes of ``chunks`` (an iterator of the decoded body), at most ``limit`` of them; AnswerTooLarge (after
    ``close()``) as soon as the answer announces or delivers more."""
    declared = _declared(headers)
    if declared is not None and declared > limit:
        if close is not None:
            close()
        raise AnswerTooLarge(url, limit, declared)
    parts = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            if close is not None:
                close()
            raise AnswerTooLarge(url, limit, declared)
        parts.append(chunk)
    return b''.join(parts)


def bounded_hook(limit):
    """A ``requests`` response hook that reads the body of every answer of its session up to ``limit`` bytes (the
    body is still unread when the hooks run), so that the library finds it read; AnswerTooLarge beyond."""

    def hook(response, *args, **kwargs):
        if getattr(response, '_content_consumed', False) or response.raw is None:
            return response
        body = read_bounded(response.iter_content(CHUNK), limit, response.url, response.headers, response.close)
        # What requests keeps of a body it has read itself: its content, taken from here instead.
        response._content = body  # pylint: disable=protected-access
        response._content_consumed = True  # pylint: disable=protected-access
        return response
    hook.ephemera_limit = limit
    return hook


def bound_session(session, limit):
    """Give a ``requests`` session the bounded reading of its answers (once)."""
    hooks = session.hooks.setdefault('response', [])
    if not any(getattr(hook, 'ephemera_limit', None) is not None for hook in hooks):
        hooks.insert(0, bounded_hook(limit))
    return session
