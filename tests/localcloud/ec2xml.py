"""EC2's Query API on the wire: requests (form fields), error answers, and the instance answers the proxy rewrites.

EC2 answers in XML under one namespace; an error is <Response><Errors><Error><Code>..</Code><Message>..</Message>
</Error></Errors><RequestID>..</RequestID></Response> with an HTTP status of 4xx or 5xx.
"""

import base64
import re
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

NS = 'http://ec2.amazonaws.com/doc/2016-11-15'
ET.register_namespace('', NS)
INSTANCE_ID = re.compile(r'^i-[0-9a-f]{8,17}$')
NAMING_KEYS = re.compile(r'^(InstanceId|InstanceIds|ResourceId)(\.\d+)?$')
FILTER_FIELD = re.compile(r'^Filter\.(\d+)\.(.+)$')
# What moto records as the ClientToken of a RunInstances that gave none; EC2 records none (an empty clientToken).
MOTO_NO_TOKEN = 'ABCDE'
STATE_CODES = {'pending': 0, 'running': 16, 'shutting-down': 32, 'terminated': 48, 'stopping': 64, 'stopped': 80}


def tag(name):
    return '{{{0}}}{1}'.format(NS, name)


def parse_query(body, query_string=''):
    """The request's fields as a dict (form body, else the URL's query); the last value of a repeated field wins."""
    text = body.decode('utf-8', errors='replace') if isinstance(body, bytes) else (body or '')
    fields = dict(urllib.parse.parse_qsl(query_string or '', keep_blank_values=True))
    fields.update(urllib.parse.parse_qsl(text, keep_blank_values=True))
    return fields


def named_instances(fields):
    """The instance ids a request names (InstanceId.N, InstanceId, ResourceId.N of CreateTags and DeleteTags)."""
    return [v for k, v in sorted(fields.items()) if NAMING_KEYS.match(k) and INSTANCE_ID.match(v)]


def encode_query(fields):
    return urllib.parse.urlencode(sorted(fields.items())).encode()


def error_body(code, message):
    """An EC2 error answer's body."""
    text = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{0}</Code><Message>{1}</Message>'
            '</Error></Errors><RequestID>{2}</RequestID></Response>')
    return text.format(escape(code), escape(message), uuid.uuid4()).encode()


def not_found(instance_id):
    return 'InvalidInstanceID.NotFound', "The instance ID '{0}' does not exist".format(instance_id)


def parse(payload):
    """The answer's root element, or None if it is no XML (an error page, say)."""
    try:
        return ET.fromstring(payload)
    except ET.ParseError:
        return None


def dump(root):
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)


def instance_items(root):
    """(instancesSet element, item) for every instance in a RunInstances, DescribeInstances, Start/Stop/Terminate
    answer."""
    out = []
    for parent in root.iter(tag('instancesSet')):
        for item in list(parent):
            if item.find(tag('instanceId')) is not None:
                out.append((parent, item))
    return out


def item_id(item):
    found = item.find(tag('instanceId'))
    return found.text if found is not None else None


def _set_state(element, state):
    if element is None:
        return
    for child in list(element):
        if child.tag == tag('code'):
            child.text = str(STATE_CODES[state])
        elif child.tag == tag('name'):
            child.text = state


def take_filter(fields, name):
    """(the fields without the filters named ``name``, the others renumbered from 1; the values those filters ask
    for, or None when no filter has that name)."""
    named = set(m.group(1) for k, v in fields.items() for m in [FILTER_FIELD.match(k)] if m and m.group(2) == 'Name'
                and v == name)
    if not named:
        return fields, None
    out, values, others = {}, set(), {}
    for key, value in fields.items():
        found = FILTER_FIELD.match(key)
        if found is None:
            out[key] = value
        elif found.group(1) in named:
            if found.group(2).startswith('Value.'):
                values.add(value)
        else:
            others.setdefault(found.group(1), []).append((found.group(2), value))
    for number, old in enumerate(sorted(others, key=int), 1):
        for rest, value in others[old]:
            out['Filter.{0}.{1}'.format(number, rest)] = value
    return out, values


def keep_client_tokens(root, tokens):
    """Remove from an answer the instances whose client token is not one of ``tokens``."""
    drop_instances(root, set(item_id(item) for parent, item in instance_items(root)
                             if shown_client_token(client_token(item)) not in tokens))


def client_token(item):
    found = item.find(tag('clientToken'))
    return found.text if found is not None else None


def shown_client_token(token):
    """An instance's client token as EC2 shows it: '' for an instance launched without one (moto records a
    placeholder)."""
    return '' if token in (None, MOTO_NO_TOKEN) else token


def show_client_token(item):
    """The item's clientToken as EC2 shows it (shown_client_token)."""
    found = item.find(tag('clientToken'))
    if found is not None and not shown_client_token(found.text):
        found.text = None


def rewrite_instance(item, view):
    """One instance item as this cloud shows it: view = {'state', 'addresses': {moto address: ours},
    'private': bool, 'public': bool} (False: the field is gone, as on a terminated or stopped instance)."""
    mapping = view.get('addresses') or {}
    for element in item.iter():
        if element.text and element.text.strip() in mapping:
            element.text = mapping[element.text.strip()]
    _set_state(item.find(tag('instanceState')), view['state'])
    # StartInstances/StopInstances/TerminateInstances answers say currentState.
    _set_state(item.find(tag('currentState')), view['state'])
    if not view.get('public', True):
        _remove(item, tag('ipAddress'))
        _remove(item, tag('dnsName'))
        for parent in list(item.iter()):
            _remove(parent, tag('association'))
    if not view.get('private', True):
        _remove(item, tag('privateIpAddress'))
        nics = item.find(tag('networkInterfaceSet'))
        if nics is not None:
            for nic in list(nics):
                nics.remove(nic)


def _remove(parent, name):
    for child in parent.findall(name):
        parent.remove(child)


def drop_instances(root, ids):
    """Remove the instances of ids from an answer (and reservations left without instances)."""
    for parent, item in instance_items(root):
        if item_id(item) in ids:
            parent.remove(item)
    reservations = root.find(tag('reservationSet'))
    if reservations is not None:
        for reservation in list(reservations):
            instances = reservation.find(tag('instancesSet'))
            if instances is not None and not len(instances):
                reservations.remove(reservation)


def reservations(root):
    found = root.find(tag('reservationSet'))
    return [] if found is None else list(found)


def page(root, start, size, token):
    """Keep reservations [start, start+size) of a DescribeInstances answer; nextToken is token (None: none)."""
    found = root.find(tag('reservationSet'))
    items = [] if found is None else list(found)
    for index, item in enumerate(items):
        if not start <= index < start + size:
            found.remove(item)
    _remove(root, tag('nextToken'))
    if token is not None:
        ET.SubElement(root, tag('nextToken')).text = token
    return root


def console_answer(instance_id, text):
    """A GetConsoleOutput answer: the console's text, base64-encoded as EC2 sends it."""
    out = ET.Element(tag('GetConsoleOutputResponse'))
    ET.SubElement(out, tag('requestId')).text = str(uuid.uuid4())
    ET.SubElement(out, tag('instanceId')).text = instance_id
    ET.SubElement(out, tag('timestamp')).text = time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime())
    ET.SubElement(out, tag('output')).text = base64.b64encode(text.encode('utf-8')).decode('ascii')
    return out


def run_answer(describe_root, request_id=None):
    """A RunInstances answer made of the first reservation of a DescribeInstances answer: what EC2 answers a
    RunInstances whose ClientToken it has seen before."""
    out = ET.Element(tag('RunInstancesResponse'))
    ET.SubElement(out, tag('requestId')).text = request_id or str(uuid.uuid4())
    found = reservations(describe_root)
    if found:
        for child in list(found[0]):
            out.append(child)
    return out
