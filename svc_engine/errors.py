"""The one error tree of svc.

Every error the service raises on purpose is an ``SvcError``. The tree has
three branches, and which branch an error is on decides who sees it::

    SvcError
    ├── CallerError            the request is at fault: 4xx, with the spec's code
    │   ├── ValidationError        400 validation_error
    │   │   └── SlugTaken              the slug is in use on its domain (a random
    │   │                              one is drawn again, a chosen one refused)
    │   ├── InvalidDomain          400 invalid_domain
    │   ├── DestinationBlocked     400 destination_blocked
    │   ├── InvalidApiKey          401 invalid_api_key
    │   ├── Unauthenticated        401 unauthenticated (dashboard session missing)
    │   ├── WrongKeyKind           403 wrong_key_kind
    │   ├── ProjectSuspended       403 project_suspended
    │   ├── Forbidden              403 forbidden (role or plan does not allow it)
    │   ├── NotFound               404 not_found
    │   ├── InstallNotFound        404 install_not_found
    │   ├── MethodNotAllowed       405 method_not_allowed
    │   ├── Conflict               409 (base of the conflicts below)
    │   │   ├── IdempotencyKeyReused   409 idempotency_key_reused
    │   │   ├── InstallIdConflict      409 install_id_conflict
    │   │   └── InstallNotRegistered   409 install_not_registered
    │   ├── RequestTimeout         408 request_timeout (body not sent in time)
    │   ├── Gone                   410 gone
    │   ├── PayloadTooLarge        413 payload_too_large
    │   ├── HeadersTooLarge        431 headers_too_large (the request head)
    │   ├── UnsupportedMediaType   415 unsupported_media_type
    │   ├── RateLimited            429 rate_limited (carries retry_after seconds)
    │   └── LinkQuotaExceeded      429 link_quota_exceeded
    ├── RemoteError            a webhook endpoint misbehaved: drives retries and
    │                          endpoint health, never reaches an API caller
    └── InternalError          500 internal_error: our fault
        ├── StorageUnavailable     503 storage_unavailable: a commit or its flush
        │   │                      failed (a full disk, a failing device): retry
        │   │                      later, same Idempotency-Key (carries retry_after)
        │   ├── StoreFull              the LMDB map is full (see README: SVC_MAP_SIZE)
        │   ├── MapUnavailable         the map (SVC_MAP_SIZE) cannot be reserved at
        │   │                          open: a command refuses to start, saying why
        │   ├── StoreDamaged           data.mdb is shorter than its store (cut short):
        │   │                          a command refuses to open it, saying why
        │   └── StoreSchema            the data dir's schema is newer than this svc
        │                              knows, or older and the command does not
        │                              upgrade it (only `svc serve` does)
        ├── Overloaded             503 overloaded: admission limit reached
        └── ActorFailed            the owning actor crashed while serving the request

Errors carry the HTTP status as a hint (as h11 does); the web layer turns any
``SvcError`` into the JSON body ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations


class SvcError(Exception):
    """Root of every error svc raises on purpose."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.replace("_", " "))

    @property
    def message(self) -> str:
        return str(self.args[0])


class CallerError(SvcError):
    """The request is at fault; answered with a 4xx and the spec's code."""

    status = 400
    code = "bad_request"


class ValidationError(CallerError):
    status = 400
    code = "validation_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SlugTaken(ValidationError):
    pass


class InvalidDomain(CallerError):
    status = 400
    code = "invalid_domain"


class DestinationBlocked(CallerError):
    status = 400
    code = "destination_blocked"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidApiKey(CallerError):
    status = 401
    code = "invalid_api_key"


class Unauthenticated(CallerError):
    status = 401
    code = "unauthenticated"


class WrongKeyKind(CallerError):
    status = 403
    code = "wrong_key_kind"


class ProjectSuspended(CallerError):
    status = 403
    code = "project_suspended"


class Forbidden(CallerError):
    status = 403
    code = "forbidden"


class NotFound(CallerError):
    status = 404
    code = "not_found"


class InstallNotFound(CallerError):
    status = 404
    code = "install_not_found"


class MethodNotAllowed(CallerError):
    status = 405
    code = "method_not_allowed"

    def __init__(self, message: str = "", *, allowed: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.allowed = allowed


class Conflict(CallerError):
    status = 409
    code = "conflict"


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


class InstallIdConflict(Conflict):
    code = "install_id_conflict"


class InstallNotRegistered(Conflict):
    code = "install_not_registered"


class RequestTimeout(CallerError):
    status = 408
    code = "request_timeout"


class Gone(CallerError):
    status = 410
    code = "gone"


class PayloadTooLarge(CallerError):
    status = 413
    code = "payload_too_large"


class HeadersTooLarge(CallerError):
    """The request line and headers are over the server's limit (web/connection.py);
    answered before any route sees the request."""

    status = 431
    code = "headers_too_large"


class CodingNotImplemented(CallerError):
    """A request body in a transfer coding other than chunked (gzip, say):
    RFC 9112 6.1 asks for 501 (web/connection.py); before any route."""

    status = 501
    code = "not_implemented"


class UnsupportedMediaType(CallerError):
    status = 415
    code = "unsupported_media_type"


class RateLimited(CallerError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str = "", *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class LinkQuotaExceeded(CallerError):
    """The organization's plan holds no more links. ``Retry-After`` is short
    on purpose: the SDK retries a 429 after at least ``Retry-After`` before
    ``createLink`` throws, so an hour there would hold the app's call for an
    hour; the quota lifts only by a person's action (a deletion, a plan)."""

    status = 429
    code = "link_quota_exceeded"

    def __init__(self, message: str = "", *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RemoteError(SvcError):
    """A webhook endpoint failed an attempt. Never answered to an API caller."""

    status = 502
    code = "remote_error"


class InternalError(SvcError):
    status = 500
    code = "internal_error"


class StorageUnavailable(InternalError):
    """The store could not commit or flush (a full disk, a failing device, a
    full map).

    A commit that fails is aborted: nothing of its batch is stored. A flush
    that fails after its commit leaves the batch readable but not known to
    be on disk; a retry with the same Idempotency-Key then replays the
    stored answer. Earlier data is intact either way, and writes work again
    once the cause is gone. The message is for the operator's log: callers
    get a fixed one (web/http.py), since the cause is the service's."""

    status = 503
    code = "storage_unavailable"
    retry_after = 5  # seconds, in the answer's Retry-After


class StoreFull(StorageUnavailable):
    """The LMDB map is full. Remedy: raise SVC_MAP_SIZE and restart."""


class MapUnavailable(StorageUnavailable):
    """The store could not be opened: the process cannot reserve address
    space for its map (SVC_MAP_SIZE), usually under a lower ``ulimit -v``.
    Raised before anything is served, never to a request."""


class StoreDamaged(StorageUnavailable):
    """``data.mdb`` is shorter than the store its newest commit describes;
    LMDB would die of SIGBUS reading past its end (storage/data_file.py).
    Raised before the file is mapped, never to a request."""


class StoreUnreachable(StorageUnavailable):
    """The data dir cannot be used by this process: not a directory, or its
    files not readable or writable by this user (a service run as another
    user than the one that made it). Raised before anything is served,
    never to a request."""


class StoreSchema(StorageUnavailable):
    """The data dir's schema is not this svc's: newer (an older svc after an
    upgrade: refused, never misread), or older and the command is not the one
    that upgrades it (``svc serve``), so a backup taken before an upgrade is
    the store as it was. Raised before anything is served, never to a request."""


class Overloaded(InternalError):
    status = 503
    code = "overloaded"

    def __init__(self, message: str = "", *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ActorFailed(InternalError):
    """The actor owning the state crashed while serving the request."""
