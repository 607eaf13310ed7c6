"""Key material of a try-out cluster: a CA and the API's server certificate, and SSH keys.

Everything is made once per state directory and reused, so a restarted cluster keeps the CA file
and the key pair that clients were given.
"""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=825)


def write_private(path, data):
    """Write a secret file readable by its owner only, whatever the umask."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(data)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _load_cert(path):
    with open(path, 'rb') as fh:
        return x509.load_pem_x509_certificate(fh.read())


def _names(hosts):
    out = []
    for host in ('localhost', '127.0.0.1') + tuple(hosts):
        try:
            entry = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            entry = x509.DNSName(host)
        if entry not in out:
            out.append(entry)
    return out


def _covers(cert, hosts):
    """True if the certificate names every host and is valid for another week at least."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    remaining = cert.not_valid_after_utc - datetime.datetime.now(datetime.timezone.utc)
    return all(name in list(sans) for name in _names(hosts)) and remaining > datetime.timedelta(days=7)


def ensure_pki(directory, hosts):
    """The CA and a server certificate for hosts in directory: {'ca_file', 'cert_file', 'key_file'}.

    A real chain (CA -> server), so clients verify the API exactly as they verify a real Proxmox VE
    with a private CA: they are given the CA file only.
    """
    os.makedirs(directory, exist_ok=True)
    paths = {'ca_file': os.path.join(directory, 'ca.crt'), 'cert_file': os.path.join(directory, 'server.crt'),
             'key_file': os.path.join(directory, 'server.key')}
    ca_key_file = os.path.join(directory, 'ca.key')
    now = datetime.datetime.now(datetime.timezone.utc)
    if os.path.exists(paths['ca_file']) and os.path.exists(ca_key_file):
        ca_cert = _load_cert(paths['ca_file'])
        with open(ca_key_file, 'rb') as fh:
            ca_key = serialization.load_pem_private_key(fh.read(), None)
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'localpve CA')])
        ca_cert = (x509.CertificateBuilder()
                   .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
                   .sign(ca_key, hashes.SHA256()))
        write_private(ca_key_file, _pem_key(ca_key))
        with open(paths['ca_file'], 'wb') as out:
            out.write(ca_cert.public_bytes(serialization.Encoding.PEM))
        for stale in (paths['cert_file'], paths['key_file']):
            if os.path.exists(stale):
                os.unlink(stale)
    if os.path.exists(paths['cert_file']) and os.path.exists(paths['key_file']):
        cert = _load_cert(paths['cert_file'])
        if cert.issuer == ca_cert.subject and _covers(cert, hosts):
            return paths
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else 'localhost')]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    write_private(paths['key_file'], _pem_key(key))
    with open(paths['cert_file'], 'wb') as out:
        out.write(cert.public_bytes(serialization.Encoding.PEM))
    return paths


def ssh_key(path, comment):
    """An ed25519 key in OpenSSH format at path (made if missing); returns the public key line."""
    if not os.path.exists(path):
        key = ed25519.Ed25519PrivateKey.generate()
        write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()))
    with open(path, 'rb') as fh:
        key = serialization.load_ssh_private_key(fh.read(), None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return '{0} {1}'.format(public.decode(), comment)


def ssh_key_pair(path, comment):
    """ssh_key() plus the .pub file next to it, as ssh-keygen leaves them; returns the public key line."""
    line = ssh_key(path, comment)
    with open(path + '.pub', 'w', encoding='utf-8') as out:
        out.write(line + '\n')
    return line
