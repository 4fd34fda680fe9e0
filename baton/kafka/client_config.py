"""The settings every Kafka client Baton creates gets besides its own: how to reach the cluster
securely (TLS, SASL), from one file named by the environment.

A managed or secured Kafka needs `security.protocol`, `ssl.*` and `sasl.*` settings on every client:
the slots' source, sink, follower, lease and status producer, the control log, the admin calls, the
Airflow side's hooks and triggers. They all build their configuration with `kafka_config`, which
adds what the file at BATON_KAFKA_CLIENT_CONFIG holds (a JSON object of librdkafka settings).

Why a file named by the environment, not arguments: secrets (a SASL password, a key's password)
must never reach a process list or a log. A slot's command line carries the bootstrap only; its
environment carries the file's path, which Airflow's workers, the triggerer and every process they
start inherit. `redacted` is what may be logged of a configuration.

A cluster's settings may also come from an Airflow connection (baton_airflow.hooks.kafka): the hook
builds a `KafkaSecurity` from the connection's form and registers it for the cluster's bootstrap in its
process (`register`), so every client made there for that bootstrap gets it; it also writes it to a
private file (`write_security_file`, mode 0600) whose path, not its content, goes to the slots it
starts (their environment) and the triggers it defers to (an argument, `use_file` in the triggerer).
A registered cluster's settings come before the file the environment names.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

CLIENT_CONFIG_ENV = "BATON_KAFKA_CLIENT_CONFIG"
# Settings whose value is a secret (librdkafka's names): masked wherever a configuration is shown.
SECRET_KEYS = frozenset(
    {
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "ssl_key",
        "sasl.oauthbearer.config",
    }
)
# What the file may set: how to reach the cluster, not how a client behaves (a file that set
# isolation.level or transactional.id would silently break Baton's guarantees).
ALLOWED_PREFIXES = (
    "security.protocol",
    "ssl.",
    "ssl_",
    "sasl.",
    "client.id",
    "client.dns.lookup",
    "socket.",
    "broker.address.family",
    "enable.ssl.certificate.verification",
)
MASK = "***"

_cache: dict[str, tuple[float, dict[str, str]]] = {}
# bootstrap -> the settings registered for that cluster in this process (a connection's), or the path
# of a file holding them (a trigger's, a slot's)
_registered: dict[str, dict[str, str] | str] = {}
_registered_lock = threading.Lock()


class ClientConfigError(ValueError):
    """The client configuration file is missing, unreadable or sets what it may not."""


def load_client_settings(path: str | os.PathLike[str]) -> dict[str, str]:
    """The security settings in the JSON file at `path`, checked: an object of string (or number or
    boolean) values, each an allowed key. Read again when the file changes."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime
    except OSError as exc:
        raise ClientConfigError(f"{CLIENT_CONFIG_ENV}={path}: cannot read the Kafka client settings: {exc}") from None
    cached = _cache.get(str(p))
    if cached is not None and cached[0] == mtime:
        return dict(cached[1])
    try:
        raw = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ClientConfigError(
            f"{CLIENT_CONFIG_ENV}={path}: not a JSON object of Kafka client settings: {exc}"
        ) from None
    settings = check_client_settings(raw, str(p))
    _cache[str(p)] = (mtime, settings)
    return dict(settings)


def check_client_settings(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ClientConfigError(f"{where}: Kafka client settings must be a JSON object, got {type(raw).__name__}")
    settings: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.startswith(ALLOWED_PREFIXES):
            raise ClientConfigError(
                f"{where}: {key!r} is not a connection setting; allowed: security.protocol, ssl.*, sasl.*, "
                f"client.id, socket.* (a client's behaviour is Baton's to set)"
            )
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, (str, int, float)):
            raise ClientConfigError(f"{where}: {key} must be a string, number or boolean")
        settings[key] = str(value)
    return settings


def client_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The security settings for this process's Kafka clients: the file BATON_KAFKA_CLIENT_CONFIG
    names, or none (a plaintext cluster)."""
    path = (os.environ if environ is None else environ).get(CLIENT_CONFIG_ENV, "").strip()
    return load_client_settings(path) if path else {}


def kafka_config(bootstrap: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A librdkafka configuration: the security settings (those registered for this bootstrap, else the
    environment's file), then the client's own `settings`, then the bootstrap. Every Kafka client Baton
    creates is built from this."""
    return {**security_settings(bootstrap), **(settings or {}), "bootstrap.servers": bootstrap}


def security_settings(bootstrap: str) -> dict[str, str]:
    """The security settings for clients of the cluster at `bootstrap` in this process."""
    with _registered_lock:
        registered = _registered.get(bootstrap)
    if registered is None:
        return client_settings()
    return load_client_settings(registered) if isinstance(registered, str) else dict(registered)


def register(bootstrap: str, security: KafkaSecurity) -> None:
    """The settings of the cluster at `bootstrap` for this process's clients (a connection's)."""
    with _registered_lock:
        _registered[bootstrap] = security.settings()


def use_file(bootstrap: str, path: str | os.PathLike[str] | None) -> None:
    """The settings of the cluster at `bootstrap` are in the file at `path` (None: nothing to register)."""
    if path:
        with _registered_lock:
            _registered[bootstrap] = str(path)


def forget(bootstrap: str) -> None:
    with _registered_lock:
        _registered.pop(bootstrap, None)


@dataclass(frozen=True)
class KafkaSecurity:
    """How to reach a cluster securely, typed: what a connection's form holds (or a file). The secrets
    (`sasl_password`, `ssl_key_password`) are masked in its repr; `settings()` is librdkafka's form."""

    security_protocol: str = ""
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: str = field(default="", repr=False)
    other: tuple[tuple[str, str], ...] = ()  # further allowed settings (ssl.endpoint..., sasl.oauthbearer...)

    PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

    def __post_init__(self) -> None:
        if self.security_protocol and self.security_protocol.upper() not in self.PROTOCOLS:
            raise ClientConfigError(
                f"security protocol {self.security_protocol!r} is not one of {', '.join(self.PROTOCOLS)}"
            )
        check_client_settings(dict(self.other), "further Kafka client settings")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> KafkaSecurity:
        """From librdkafka's keys (checked: only connection settings)."""
        checked = check_client_settings(dict(settings), "Kafka client settings")
        named = {f.name: checked.pop(f.name.replace("_", "."), "") for f in fields(cls) if f.name != "other"}
        return cls(**named, other=tuple(sorted(checked.items())))

    def settings(self) -> dict[str, str]:
        named = {f.name.replace("_", "."): getattr(self, f.name) for f in fields(self) if f.name != "other"}
        return {**{k: v for k, v in named.items() if v}, **dict(self.other)}

    def __bool__(self) -> bool:
        return bool(self.settings())


def write_security_file(security: KafkaSecurity, directory: str | os.PathLike[str]) -> Path:
    """The settings in a file only this user can read, named by a digest of what it holds (the same
    settings, the same file: written once), for processes that get its path and never the secrets."""
    text = json.dumps(security.settings(), sort_keys=True)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"kafka-client-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.is_file():
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    return path


def registered_file(bootstrap: str, directory: str | os.PathLike[str]) -> Path | None:
    """The file of the settings registered for `bootstrap` here (written under `directory` when they
    were registered in memory), or None when none are: the environment's file then holds them."""
    with _registered_lock:
        registered = _registered.get(bootstrap)
    if registered is None:
        return None
    if isinstance(registered, str):
        return Path(registered)
    return write_security_file(KafkaSecurity.from_settings(registered), directory) if registered else None


def is_secret(key: str) -> bool:
    """Whether a setting's value is a secret: librdkafka's secret keys, or any key naming a password or secret."""
    return key in SECRET_KEYS or "password" in key or "secret" in key


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` fit for a log: secret values masked."""
    return {k: (MASK if is_secret(k) else v) for k, v in config.items()}
