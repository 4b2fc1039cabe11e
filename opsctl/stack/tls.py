"""TLS material of the secured local stack, made with `cryptography` (no openssl CLI): a CA of
its own and one broker certificate for 127.0.0.1/localhost, both PEM. Kafka reads them as PEM
stores (`ssl.keystore.type=PEM`: one file with the PKCS#8 key and the certificate chain); the
clients trust only this CA (`ssl.ca.location`).

The broker's certificate also serves as its client certificate on the controller listener
(mutual TLS; KRaft controllers cannot use SCRAM, whose credentials live in the metadata they
serve), so it carries both serverAuth and clientAuth and its CN is the broker's principal.

`trial_certificate` (`python -m opsctl.stack.tls --dir D --name host ...`) makes the compose
proxy's self-signed certificate for a trial, when the operator has put none there (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from precast.files import write_private

VALID_DAYS = 825  # what browsers and most TLS stacks still accept for a leaf certificate


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # the CA certificate clients trust
    ca_key: Path  # the CA's key (0600): only needed to issue more certificates
    broker: Path  # the broker's PKCS#8 key + certificate + CA, one PEM file (0600)

    def exist(self) -> bool:
        return self.ca.exists() and self.broker.exists()


def files_in(folder: Path) -> TlsFiles:
    return TlsFiles(folder / "ca.pem", folder / "ca.key", folder / "broker.pem")


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make(folder: Path, broker_cn: str = "broker") -> TlsFiles:
    """A new CA and broker certificate in `folder` (what exists is kept: the clients' trust
    and the running broker stay valid across `stack up`)."""
    files = files_in(folder)
    if files.exist():
        return files
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "precast local stack CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, broker_cn)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_private(files.ca_key, _key_pem(ca_key))
    write_private(files.broker, _key_pem(key) + _pem(cert) + _pem(ca))
    files.ca.write_bytes(_pem(ca))
    return files


def trial_certificate(folder: Path, names: list[str]) -> str:
    """`tls.crt` and `tls.key` in `folder` for an HTTPS proxy: kept when both exist (the
    operator's own, or an earlier trial's), else a self-signed certificate for `names` (and
    localhost, 127.0.0.1). Returns "kept" or "made"."""
    crt, key_path = folder / "tls.crt", folder / "tls.key"
    if crt.exists() and key_path.exists():
        return "kept"
    all_names = list(dict.fromkeys([*names, "localhost", "127.0.0.1"]))
    sans: list[x509.GeneralName] = []
    for n in all_names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, all_names[0])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    write_private(key_path, _key_pem(key))
    crt.write_bytes(_pem(cert))
    return "made"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m opsctl.stack.tls", description=__doc__)
    ap.add_argument("--dir", type=Path, required=True, help="where tls.crt and tls.key live")
    ap.add_argument("--name", action="append", default=[], help="a host name (repeat)")
    args = ap.parse_args(argv)
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        done = trial_certificate(args.dir, args.name)
    except OSError as exc:
        print(f"tls: {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    what = "kept the certificate there" if done == "kept" else "made a self-signed certificate"
    print(f"tls: {args.dir}: {what} (tls.crt, tls.key)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
