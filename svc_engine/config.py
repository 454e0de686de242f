"""The service's settings: one table, read from flags and ``SVC_*`` variables.

Every setting is declared once in ``SETTINGS``; README.md's configuration table
is checked against it by a test, so an undocumented setting fails the suite.
Precedence: command-line flag, then environment variable, then default.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from svc_engine.errors import ValidationError
from svc_engine.hosts import ascii_host


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {v!r}")


DEFAULT_MAP_SIZE = 256 << 30
"""LMDB reserves its map as address space and grows the file only as the store
grows, so the default is sized for growth, not for the disk: the 1 million
links and 10 million clicks of bench/README.md's scale run take 9.9 GiB (they
did not fit the 8 GiB this once was), so 256 GiB holds about 250 million
clicks. A 64-bit Linux process has 128 TiB of address space (512 GiB on
arm64 kernels built with 39-bit addresses); under a lower ``ulimit -v`` the
service refuses to start and says so (storage/lmdb_store.py)."""


def _size(v: str) -> int:
    """A size in bytes, with an optional K, M, G or T (or KiB...) suffix. A
    ValueError for anything else, ``inf`` and ``nan`` too (the range check
    then bounds it: ``_RANGES``)."""
    s = v.strip().upper()
    for suffix, mult in (("TIB", 1 << 40), ("GIB", 1 << 30), ("MIB", 1 << 20), ("KIB", 1 << 10),
                         ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if s.endswith(suffix):
            number = float(s[: -len(suffix)])
            if not math.isfinite(number):
                raise ValueError(f"not a size: {v!r}")
            return int(number * mult)
    return int(s)


def _csv(v: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in v.split(",") if p.strip())


def _opt(v: str) -> str | None:
    return v or None


def _cidrs(v: str) -> tuple[str, ...]:
    out = _csv(v)
    for cidr in out:
        ipaddress.ip_network(cidr, strict=False)  # a ValueError names it
    return out


def _token(v: str) -> str | None:
    v = v.strip()
    if v and (len(v) < 16 or any(c.isspace() for c in v)):
        raise ValueError("a metrics token needs at least 16 characters and no spaces")
    return v or None


@attrs.frozen
class Setting:
    name: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", "SVC_DATA_DIR", "./data", str, "LMDB data directory"),
    Setting("host", "SVC_HOST", "127.0.0.1", str, "address to listen on"),
    Setting("port", "SVC_PORT", 8080, int, "port to listen on"),
    Setting("public_url", "SVC_PUBLIC_URL", None, _opt,
            "public base URL; its host is the default link domain "
            "(default: http://HOST:PORT)"),
    Setting("map_size", "SVC_MAP_SIZE", DEFAULT_MAP_SIZE, _size,
            "LMDB map size: the most the store may hold (address space only: the file "
            "grows as the store does), e.g. 1TiB; raise it if the map fills"),
    Setting("max_body_bytes", "SVC_MAX_BODY_BYTES", 1 << 20, _size,
            "largest request body accepted (larger: 413)"),
    Setting("max_in_flight", "SVC_MAX_IN_FLIGHT", 512, int,
            "requests handled at once; beyond it requests get a quick 503"),
    Setting("max_lag_ms", "SVC_MAX_LAG_MS", 50, int,
            "event-loop delay (ms) past which new requests get a quick 503 (overload); 0 disables"),
    Setting("max_connections", "SVC_MAX_CONNECTIONS", 1024, int,
            "open connections at once; beyond it a connection gets 503 and is closed"),
    Setting("body_timeout_s", "SVC_BODY_TIMEOUT", 30, int,
            "seconds a request body may take to arrive (slower: 408)"),
    Setting("rate_limit_per_client", "SVC_RATE_LIMIT_PER_CLIENT", 300, int,
            "API requests per second per client address, an IPv6 client by its /64 "
            "(in memory only; burst 2x); 0 disables"),
    Setting("rate_limit_per_key", "SVC_RATE_LIMIT_PER_KEY", 100, int,
            "sustained requests per second per secret API key (burst: 2x); 0 disables "
            "(publishable keys, shared by every install of an app, are limited per "
            "client address)"),
    Setting("country_header", "SVC_COUNTRY_HEADER", None, _opt,
            "trusted proxy header carrying the client's country, e.g. CF-IPCountry"),
    Setting("geoip_db", "SVC_GEOIP_DB", None, _opt,
            "optional MaxMind-format country database file"),
    Setting("client_ip_header", "SVC_CLIENT_IP_HEADER", None, _opt,
            "trusted proxy header with the client address (its last entry, the one your proxy "
            "wrote; in memory only), e.g. X-Forwarded-For"),
    Setting("certfile", "SVC_CERTFILE", None, _opt, "TLS certificate (PEM) to serve HTTPS"),
    Setting("keyfile", "SVC_KEYFILE", None, _opt, "TLS private key (PEM) to serve HTTPS"),
    Setting("webhook_allow_cidrs", "SVC_WEBHOOK_ALLOW_CIDRS", (), _cidrs,
            "comma-separated CIDRs webhook endpoints may resolve to despite the private-"
            "address guard"),
    Setting("webhook_local_receivers", "SVC_WEBHOOK_LOCAL_RECEIVERS", True, _bool,
            "webhook endpoints may be localhost, 127.0.0.1 or [::1] (plain http allowed, as "
            "SPEC says, for development); false on a server several teams share, so that no "
            "project can make it post to services on its own loopback"),
    Setting("webhook_ca_bundle", "SVC_WEBHOOK_CA_BUNDLE", None, _opt,
            "CA bundle (PEM) trusted for webhook endpoints' TLS certificates (default: certifi's)"),
    Setting("webhook_retry_scale", "SVC_WEBHOOK_RETRY_SCALE", 1.0, float,
            "test only: multiplies webhook retry delays (e.g. 0.001); keep 1.0 in production"),
    Setting("event_retention_days", "SVC_EVENT_RETENTION_DAYS", 90, int,
            "days raw events are kept (aggregates are kept)"),
    Setting("log_level", "SVC_LOG_LEVEL", "info", str, "debug, info, warning or error"),
    Setting("access_log", "SVC_ACCESS_LOG", True, _bool,
            "log one line per request (never the client address, query or user agent)"),
    Setting("shutdown_grace_s", "SVC_SHUTDOWN_GRACE", 10, int,
            "seconds in-flight requests get to finish on SIGTERM/SIGINT"),
    Setting("metrics_token", "SVC_METRICS_TOKEN", None, _token,
            "bearer token that opens GET /metrics (Prometheus format; 16+ characters); "
            "unset: /metrics is off"),
)


def _canonical_or_none(url: str | None) -> str | None:
    return None if url is None else canonical_public_url(url)


@attrs.frozen
class Config:
    data_dir: str = "./data"
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = attrs.field(default=None, converter=_canonical_or_none)
    map_size: int = DEFAULT_MAP_SIZE
    max_body_bytes: int = 1 << 20
    max_in_flight: int = 512
    max_lag_ms: int = 50
    max_connections: int = 1024
    body_timeout_s: int = 30
    rate_limit_per_client: int = 300
    rate_limit_per_key: int = 100
    country_header: str | None = None
    geoip_db: str | None = None
    client_ip_header: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    webhook_allow_cidrs: tuple[str, ...] = ()
    webhook_local_receivers: bool = True
    webhook_ca_bundle: str | None = None
    webhook_retry_scale: float = 1.0
    event_retention_days: int = 90
    log_level: str = "info"
    access_log: bool = True
    shutdown_grace_s: int = 10
    metrics_token: str | None = attrs.field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        scheme = "https" if self.certfile else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def dashboard_url(self) -> str:
        """The dashboard: at the public origin's root whatever the public URL's
        path (its pages, forms and cookie name /dashboard), so a proxy serving
        the API and links under a path routes /dashboard at the root too."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}/dashboard"


_LOG_LEVELS = ("debug", "info", "warning", "error")
_RANGES: dict[str, tuple[float, float | None]] = {
    "port": (0, 65535), "map_size": (1 << 20, 1 << 50), "max_body_bytes": (1, 1 << 40),
    "max_in_flight": (1, None), "max_lag_ms": (0, None), "max_connections": (1, None),
    "body_timeout_s": (1, None), "rate_limit_per_client": (0, None),
    "rate_limit_per_key": (0, None), "event_retention_days": (0, None),
    "shutdown_grace_s": (0, None), "webhook_retry_scale": (1e-6, 1e3),
}
"""The values a number setting may take (inclusive; None: no upper bound)."""


def load(env: Mapping[str, str], overrides: Mapping[str, Any]) -> Config:
    """Build a Config from environment variables and explicit overrides (flags);
    a value a setting cannot take is a ValidationError naming the setting."""
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if overrides.get(s.name) is not None:
            values[s.name] = overrides[s.name]
        elif s.env in env:
            try:
                values[s.name] = s.parse(env[s.env])
            except ValueError as e:
                raise ValidationError(f"{s.env}: {e}", field=s.env) from None
        else:
            values[s.name] = s.default
    _check(values)
    return Config(**values)  # the public URL made canonical (canonical_public_url)


def canonical_public_url(url: str) -> str:
    """``url`` (an ``_is_public_url``) with its host as browsers send it in
    ``Host``: lower-case ASCII (IDNA A-labels), without a trailing dot. Its
    host is the default link domain, which custom domains, Host headers and
    resolved URLs are compared with in that form: written ``bücher.example``
    or ``go.example.com.``, it matched none of them, and a project could
    claim it as a custom domain (``xn--bcher-kva.example``) and serve its
    own links and association files on the service's own domain.
    ValidationError when a Unicode host is not a valid internationalized
    name, or no host is left (an ASCII one is taken as written)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host.startswith("[") and ":" not in host:  # not an IPv6 literal
        try:  # the dot cut after IDNA, which makes one of "。" and its kin
            host = ascii_host(host.rstrip(".")).lower().rstrip(".")
        except UnicodeError:
            raise ValidationError(f"SVC_PUBLIC_URL: {url!r}: {host!r} is not a valid "
                                  "internationalized domain name",
                                  field="SVC_PUBLIC_URL") from None
        if not host:
            raise ValidationError(f"SVC_PUBLIC_URL: {url!r} names no host",
                                  field="SVC_PUBLIC_URL")
    else:
        host = f"[{host.strip('[]')}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return parts._replace(scheme=parts.scheme.lower(), netloc=netloc).geturl()


def _check(values: Mapping[str, Any]) -> None:
    env = {s.name: s.env for s in SETTINGS}
    for name, (low, high) in _RANGES.items():
        v = values[name]
        if not low <= v or (high is not None and v > high):
            bound = f"{low:g} to {high:g}" if high is not None else f"at least {low:g}"
            raise ValidationError(f"{env[name]}: {v} is not {bound}", field=env[name])
    if not str(values["host"]).strip():  # it listened everywhere, links named ":8080"
        raise ValidationError("SVC_HOST: empty (0.0.0.0 listens on every IPv4 address)",
                              field="SVC_HOST")
    if values["log_level"].lower() not in _LOG_LEVELS:
        raise ValidationError(f"SVC_LOG_LEVEL: {values['log_level']!r} is not one of "
                              f"{', '.join(_LOG_LEVELS)}", field="SVC_LOG_LEVEL")
    if bool(values["certfile"]) != bool(values["keyfile"]):
        raise ValidationError("SVC_CERTFILE and SVC_KEYFILE go together: set both to serve "
                              "HTTPS, or neither", field="SVC_KEYFILE")
    url = values["public_url"]
    if url is not None and not _is_public_url(url):
        raise ValidationError(f"SVC_PUBLIC_URL: {url!r} is not an http(s) URL such as "
                              "https://go.example.com", field="SVC_PUBLIC_URL")


def _is_public_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        _ = parts.port  # a ValueError when it is no port
    except ValueError:
        return False
    return (parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
            and parts.username is None and not parts.query and not parts.fragment
            and not any(c.isspace() for c in url))
