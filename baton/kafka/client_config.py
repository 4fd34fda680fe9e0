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
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLIENT_CONFIG_ENV = "BATON_KAFKA_CLIENT_CONFIG"
# Settings whose value is a secret (librdkafka's names): masked wherever a configuration is shown.
SECRET_KEYS = frozenset({
    "sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password", "ssl.keystore.password",
    "ssl.key.pem", "ssl_key", "sasl.oauthbearer.config",
})
# What the file may set: how to reach the cluster, not how a client behaves (a file that set
# isolation.level or transactional.id would silently break Baton's guarantees).
ALLOWED_PREFIXES = ("security.protocol", "ssl.", "ssl_", "sasl.", "client.id", "client.dns.lookup",
                    "socket.", "broker.address.family", "enable.ssl.certificate.verification")
MASK = "***"

_cache: dict[str, tuple[float, dict[str, str]]] = {}


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
        raise ClientConfigError(f"{CLIENT_CONFIG_ENV}={path}: not a JSON object of Kafka client settings: "
                                f"{exc}") from None
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
                f"client.id, socket.* (a client's behaviour is Baton's to set)")
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
    """A librdkafka configuration: the security settings, then the client's own `settings`, then the
    bootstrap. Every Kafka client Baton creates is built from this."""
    return {**client_settings(), **(settings or {}), "bootstrap.servers": bootstrap}


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` fit for a log: secret values masked."""
    return {k: (MASK if k in SECRET_KEYS or "password" in k or "secret" in k else v) for k, v in config.items()}
