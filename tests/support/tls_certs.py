"""A private CA and a server certificate for 127.0.0.1 it signed (PEM files), for HTTPS test servers.

The extensions are those a real private CA (cert-manager, step-ca, openssl's v3_ca) writes: Python 3.13's
default TLS context verifies strictly (VERIFY_X509_STRICT) and refuses a chain without key identifiers.
"""
import datetime
import ipaddress
from pathlib import Path


def private_ca(folder: Path) -> tuple[Path, Path, Path]:
    """-> (CA certificate, server certificate, server key): what a Kubeflow behind a private CA serves."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject: str, key, issuer_name, issuer_key, ca: bool):
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (x509.CertificateBuilder().subject_name(name)
                   .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=not ca, key_cert_sign=ca,
                                                crl_sign=ca, content_commitment=False, data_encipherment=False,
                                                key_agreement=False, encipher_only=False, decipher_only=False),
                                  critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test private CA")])
    ca_cert = certificate("test private CA", ca_key, ca_name, ca_key, ca=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = certificate("127.0.0.1", key, ca_name, ca_key, ca=False)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return paths


def service_account_key(folder: Path, token_uri: str, email: str = "deployer@project.iam.gserviceaccount.com") -> Path:
    """A Google service-account key file (the JSON `gcloud iam service-accounts keys create` writes) whose
    token endpoint is ``token_uri``."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = folder / "sa-key.json"
    path.write_text(json.dumps({"type": "service_account", "project_id": "project", "private_key_id": "k1",
                                "private_key": pem, "client_email": email, "client_id": "1",
                                "token_uri": token_uri}))
    return path
