"""A Kafka broker reachable only through TLS, for tests: a test CA, a server certificate for
127.0.0.1, a client certificate whose key is encrypted with a password (mutual TLS, so the client's
secret is really used), and a TLS terminator in front of the embedded broker, which advertises the
terminator's port: every client, after its bootstrap, connects through TLS again.

The terminator is asyncio's TLS server in a thread, copying bytes to and from the broker's plaintext
port (what stunnel does; in-process, so nothing is installed for it)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_password: str

    def client_settings(self) -> dict[str, str]:
        """librdkafka's settings for a client of the TLS listener (what BATON_KAFKA_CLIENT_CONFIG holds)."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca),
            "ssl.certificate.location": str(self.client_cert),
            "ssl.key.location": str(self.client_key),
            "ssl.key.password": self.client_key_password,
        }

    def write_client_config(self, path: Path) -> Path:
        path.write_text(json.dumps(self.client_settings()))
        path.chmod(0o600)
        return path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool, san: list | None = None):
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, password: str) -> Pki:
    """A CA, a server certificate for 127.0.0.1 / localhost and a client certificate (key encrypted
    with `password`), as PEM files under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _cert("baton test CA", ca_key, "baton test CA", ca_key, ca=True)
    server = _cert(
        "127.0.0.1",
        server_key,
        "baton test CA",
        ca_key,
        ca=False,
        san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client = _cert("baton test client", client_key, "baton test CA", ca_key, ca=False)

    def pem_key(key, secret: str | None) -> bytes:
        enc = serialization.BestAvailableEncryption(secret.encode()) if secret else serialization.NoEncryption()
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)

    files = {
        "ca.pem": ca.public_bytes(serialization.Encoding.PEM),
        "server.pem": server.public_bytes(serialization.Encoding.PEM),
        "server.key": pem_key(server_key, None),
        "client.pem": client.public_bytes(serialization.Encoding.PEM),
        "client.key": pem_key(client_key, password),
    }
    for name, data in files.items():
        (directory / name).write_bytes(data)
        (directory / name).chmod(0o600)
    return Pki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
        password,
    )


class TlsTerminator:
    """Accepts TLS on 127.0.0.1:`port` (client certificates signed by the test CA required) and
    forwards the plaintext to `target_port`. Counts the connections it accepted."""

    def __init__(self, pki: Pki, port: int, target_port: int):
        self.port, self.target_port = port, target_port
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
        self.context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-terminator", daemon=True)
        self._server = None

    def start(self) -> TlsTerminator:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.context), self._loop
        ).result(10)
        return self

    def stop(self) -> None:
        async def close():
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

        if self._server is not None:
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True)
