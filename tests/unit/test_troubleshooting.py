"""docs/troubleshooting.md quotes the collection's own messages: every quoted part of its first column is in the
code (the string literals of plugins/, joined as Python joins adjacent ones), so a message reworded in the code
makes this test fail until the page follows."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Rows about what other programs print, not the collection.
FOREIGN = ('Host key verification failed',)


def source_text():
    parts = []
    for path in glob.glob(os.path.join(ROOT, 'plugins', '**', '*.py'), recursive=True):
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
        # 'a ' 'b' on two lines is one literal to Python.
        parts.append(re.sub(r"""(['"])\s*\n\s*\1""", '', text))
    # The playbooks' and roles' own messages (folded YAML: one space where a line breaks).
    for pattern in ('playbooks/**/*.yml', 'roles/**/*.yml'):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, encoding='utf-8') as handle:
                parts.append(re.sub(r'\s*\n\s*', ' ', handle.read()))
    return '\n'.join(parts)


def quoted_messages():
    with open(os.path.join(ROOT, 'docs', 'troubleshooting.md'), encoding='utf-8') as handle:
        rows = [line for line in handle if line.startswith('| ') and not line.startswith('| the message')]
    out = []
    for row in rows:
        first = row.split(' | ')[0]
        if first.startswith('| status shows'):
            continue
        out.extend(fragment for fragment in re.findall(r'`([^`]+)`', first) if fragment not in FOREIGN)
    return out


def test_every_quoted_message_is_in_the_code():
    quoted = quoted_messages()
    assert len(quoted) >= 25, quoted
    code = source_text()
    missing = [fragment for fragment in quoted if fragment not in code]
    assert missing == [], missing


def test_the_page_is_linked_from_the_readme():
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as handle:
        assert '(docs/troubleshooting.md)' in handle.read()
