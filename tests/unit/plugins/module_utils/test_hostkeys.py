"""Host keys published out of band (providers/hostkeys.py): cloud-init's console block and guest attributes."""

from ansible_collections.ephemera.workspaces.plugins.module_utils.providers import hostkeys


def _public_key(kind):
    """A real public key of ``kind`` (ed25519 or ecdsa) as "type base64"."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    key = ed25519.Ed25519PrivateKey.generate() if kind == 'ed25519' else ec.generate_private_key(ec.SECP256R1())
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode('ascii')


def test_the_host_keys_cloud_init_printed_are_read_from_the_console():
    ed, ecdsa, old = _public_key('ed25519'), _public_key('ecdsa'), _public_key('ed25519')
    block = ['-----BEGIN SSH HOST KEY KEYS-----', ecdsa + ' root@ip-10-0-0-5', ed + ' root@ip-10-0-0-5',
             '-----END SSH HOST KEY KEYS-----']
    boot = ['Linux version 6.1.0', '<14>Dec  5 00:00:00 ec2: -----BEGIN SSH HOST KEY FINGERPRINTS-----',
            '<14>Dec  5 00:00:00 ec2: 256 SHA256:abc root@ip-10-0-0-5 (ED25519)',
            '<14>Dec  5 00:00:00 ec2: -----END SSH HOST KEY FINGERPRINTS-----']
    assert hostkeys.console_host_keys('\n'.join(boot + block)) == [ecdsa, ed]
    # Behind a syslog or journal prefix, with carriage returns, as serial consoles show them.
    prefixed = ['[   12.345] cloud-init[812]: ' + line + '\r' for line in block]
    assert hostkeys.console_host_keys('\n'.join(boot + prefixed)) == [ecdsa, ed]
    # A later boot's block replaces an earlier one; a block cut off (the console still being written) counts not.
    earlier = ['-----BEGIN SSH HOST KEY KEYS-----', old + ' root@x', '-----END SSH HOST KEY KEYS-----']
    assert hostkeys.console_host_keys('\n'.join(earlier + block)) == [ecdsa, ed]
    assert hostkeys.console_host_keys('\n'.join(earlier + block[:2])) == [old]
    assert hostkeys.console_host_keys('\n'.join(block[:2])) == []
    # Nothing to read, a fingerprint, and a key line whose encoded key is of another type or no key are left out.
    kind, blob = ed.split()
    forged = ['-----BEGIN SSH HOST KEY KEYS-----', 'ssh-rsa ' + blob, 'ssh-ed25519 ' + 'A' * 68,
              'ssh-ed25519 not+base64!', '256 SHA256:abc root@x (ED25519)', '-----END SSH HOST KEY KEYS-----']
    assert hostkeys.console_host_keys('\n'.join(forged)) == []
    assert hostkeys.console_host_keys(None) == [] and hostkeys.console_host_keys('') == []


def test_a_key_given_as_type_and_encoded_key_is_taken_only_when_its_encoding_names_that_type():
    ed, ecdsa = _public_key('ed25519'), _public_key('ecdsa')
    kind, blob = ed.split()
    assert hostkeys.host_key(kind, blob) == ed
    assert hostkeys.host_key(' %s ' % kind, blob + '\n') == ed
    assert hostkeys.host_key(*ecdsa.split()) == ecdsa
    # Another type's name, an unknown type, no key, not base64, not text: nothing.
    assert hostkeys.host_key('ssh-rsa', blob) is None
    assert hostkeys.host_key('ssh-dss', blob) is None
    assert hostkeys.host_key(kind, 'A' * 68) is None
    assert hostkeys.host_key(kind, 'not base64!') is None
    assert hostkeys.host_key(kind, None) is None and hostkeys.host_key(None, blob) is None
