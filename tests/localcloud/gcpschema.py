"""The Compute v1 discovery document, and a check of a JSON answer against one of its schemas.

The document ships inside the google-api-python-client wheel (googleapiclient/discovery_cache/documents/
compute.v1.json); ``load`` downloads the wheel with pip into a cache directory (never into the repository) the first
time, and reads the document from it. docs/internals/gcp.md names the version and the document's revision.
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile

WHEEL = 'google-api-python-client==2.202.0'
MEMBER = 'googleapiclient/discovery_cache/documents/compute.v1.json'
CACHE = os.environ.get('EPHEMERA_GCP_DISCOVERY_CACHE') or os.path.join(tempfile.gettempdir(), 'ephemera-gcp-discovery')
INT_FORMATS = ('int32', 'uint32')
STRING_INT_FORMATS = ('int64', 'uint64')


class Schema:
    """The discovery document's schemas; ``validate(name, value)`` lists what does not fit (empty: valid)."""

    def __init__(self, document):
        self.document = document
        self.schemas = document['schemas']
        self.revision = document.get('revision')

    def validate(self, name, value):
        problems = []
        self._check({'$ref': name}, value, name, problems)
        return problems

    def _check(self, schema, value, where, problems):
        if '$ref' in schema:
            schema = self.schemas[schema['$ref']]
        kind = schema.get('type')
        if kind == 'object':
            if not isinstance(value, dict):
                problems.append('%s: %r is not an object' % (where, value))
                return
            props = schema.get('properties') or {}
            extra = schema.get('additionalProperties')
            for key, item in value.items():
                if key in props:
                    self._check(props[key], item, '%s.%s' % (where, key), problems)
                elif extra is not None:
                    self._check(extra, item, '%s[%s]' % (where, key), problems)
                else:
                    problems.append('%s: unknown field %r' % (where, key))
        elif kind == 'array':
            if not isinstance(value, list):
                problems.append('%s: %r is not an array' % (where, value))
                return
            for n, item in enumerate(value):
                self._check(schema.get('items') or {}, item, '%s[%d]' % (where, n), problems)
        elif kind == 'string':
            if not isinstance(value, str):
                problems.append('%s: %r is not a string' % (where, value))
            elif schema.get('format') in STRING_INT_FORMATS and not value.lstrip('-').isdigit():
                problems.append('%s: %r is not a %s string' % (where, value, schema['format']))
            elif schema.get('enum') and value not in schema['enum']:
                problems.append('%s: %r is not one of %s' % (where, value, schema['enum']))
        elif kind == 'integer':
            if not isinstance(value, int) or isinstance(value, bool):
                problems.append('%s: %r is not an integer' % (where, value))
        elif kind == 'boolean':
            if not isinstance(value, bool):
                problems.append('%s: %r is not a boolean' % (where, value))
        elif kind == 'number':
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                problems.append('%s: %r is not a number' % (where, value))


def document_path():
    """The path of compute.v1.json, extracted from the wheel (downloaded once into CACHE)."""
    target = os.path.join(CACHE, 'compute.v1.json')
    if os.path.exists(target):
        return target
    os.makedirs(CACHE, exist_ok=True)
    wheels = glob.glob(os.path.join(CACHE, 'google_api_python_client-*.whl'))
    if not wheels:
        subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps', '-d', CACHE, WHEEL],
                       check=True)
        wheels = glob.glob(os.path.join(CACHE, 'google_api_python_client-*.whl'))
    with zipfile.ZipFile(wheels[0]) as wheel:
        data = wheel.read(MEMBER)
    with open(target + '.tmp', 'wb') as out:
        out.write(data)
    os.replace(target + '.tmp', target)
    return target


def load():
    with open(document_path()) as f:
        return Schema(json.load(f))
