"""faust/aiokafka connection options from the same `KafkaSettings` every librdkafka client uses,
so the context aggregator connects like the other components: TLS, SASL, client id, and the
parts of `PRECAST_KAFKA__EXTRA` aiokafka has a counterpart for.

aiokafka is not librdkafka: an `EXTRA` property that changes security (`ssl.*`, `sasl.*`,
`security.protocol`) and has no counterpart here is refused (exit 2) rather than silently
dropped, which would connect with weaker settings than the operator asked for; a tuning
property without a counterpart (e.g. `topic.metadata.refresh.interval.ms`) is ignored with one
warning line naming it (never its value)."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

from precast.errors import ConfigError
from precast.settings import KafkaSettings

log = logging.getLogger("precast.context")

# librdkafka names that map onto the modelled fields (the EXTRA value wins, as for librdkafka).
_FIELDS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
    "client.id": "client_id",
}
# TLS switches with an ssl.SSLContext counterpart.
_TLS_SWITCHES = ("ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification")
# Tuning with a faust setting of its own: librdkafka name -> (faust option, scale to faust's unit).
_TUNING: dict[str, tuple[str, float]] = {
    "request.timeout.ms": ("broker_request_timeout", 0.001),
    "metadata.max.age.ms": ("producer_metadata_max_age_ms", 1),
    "linger.ms": ("producer_linger_ms", 1),
}
_SECURITY_PREFIXES = ("ssl.", "sasl.", "security.")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _effective(kafka: KafkaSettings) -> dict[str, Any]:
    """The modelled fields after EXTRA's overrides, secrets as plain strings."""
    out: dict[str, Any] = {}
    for field in set(_FIELDS.values()):
        value = getattr(kafka, field)
        out[field] = value.get_secret_value() if hasattr(value, "get_secret_value") else value
    for key, value in kafka.extra.items():
        if key in _FIELDS:
            out[_FIELDS[key]] = str(value)
    return out


def ssl_context(values: dict[str, Any], extra: dict[str, Any]) -> ssl.SSLContext:
    """A client TLS context: the configured CA (else the system's), the client certificate
    when one is configured, hostname checks unless EXTRA turns them off."""
    ca = values.get("ssl_ca_location")
    if ca and ca != "probe":
        ca_path = Path(ca)
        ctx = ssl.create_default_context(
            cafile=str(ca_path) if ca_path.is_file() else None,
            capath=str(ca_path) if ca_path.is_dir() else None,
        )
    else:
        ctx = ssl.create_default_context()
    cert, key = values.get("ssl_certificate_location"), values.get("ssl_key_location")
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None, values.get("ssl_key_password") or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the client certificate {cert}: {exc}") from None
    if str(extra.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    if str(extra.get("enable.ssl.certificate.verification", "true")).lower() in ("false", "0"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connection_options(kafka: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments for `faust.App`: broker URL, client id, credentials, tuning."""
    import faust

    values = _effective(kafka)
    unknown_security = [
        k
        for k in kafka.extra
        if k.startswith(_SECURITY_PREFIXES) and k not in _FIELDS and k not in _TLS_SWITCHES
    ]
    if unknown_security:
        raise ConfigError(
            "PRECAST_KAFKA__EXTRA sets "
            + ", ".join(sorted(unknown_security))
            + ", which the context aggregator (aiokafka) cannot apply; remove it or model it "
            "(docs/security.md)"
        )
    ignored = [
        k for k in kafka.extra if k not in _FIELDS and k not in _TLS_SWITCHES and k not in _TUNING
    ]
    if ignored:
        log.warning(
            "PRECAST_KAFKA__EXTRA: %s not applied by the context aggregator (librdkafka only)",
            ", ".join(sorted(ignored)),
        )
    protocol = str(values["security_protocol"]).upper()
    opts: dict[str, Any] = {
        "broker": ";".join(f"kafka://{h.strip()}" for h in kafka.bootstrap_servers.split(",")),
        "broker_client_id": values["client_id"],
    }
    for key, (option, scale) in _TUNING.items():
        if key in kafka.extra:
            raw = kafka.extra[key]
            opts[option] = float(raw) * scale
    if protocol == "PLAINTEXT":
        return opts
    ctx = ssl_context(values, kafka.extra) if protocol.endswith("SSL") else None
    if protocol == "SSL":
        assert ctx is not None
        opts["broker_credentials"] = faust.SSLCredentials(ctx)
        return opts
    mechanism = str(values.get("sasl_mechanism") or "PLAIN").upper()
    if mechanism not in _MECHANISMS:
        raise ConfigError(
            f"SASL mechanism {mechanism} is not supported by the context aggregator "
            f"(aiokafka here supports {', '.join(_MECHANISMS)})"
        )
    if not values.get("sasl_username") or not values.get("sasl_password"):
        raise ConfigError(
            f"{protocol} needs PRECAST_KAFKA__SASL_USERNAME and PRECAST_KAFKA__SASL_PASSWORD"
        )
    opts["broker_credentials"] = faust.SASLCredentials(
        username=values["sasl_username"],
        password=values["sasl_password"],
        mechanism=mechanism,
        ssl_context=ctx,
    )
    return opts


def preflight(settings: Any) -> None:
    """Before faust starts (its own errors are tracebacks, not one line): the cluster answers
    and takes these credentials, and this principal may read and write the context's topics."""
    from precast.kafka.access import connect_as

    connect_as(settings, "context")
