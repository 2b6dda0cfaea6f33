"""What every web response carries: security headers, a per-request CSP nonce, cookie flags.

The policy is strict: scripts run only from a ``<script nonce>`` of this response (the static
files under ``/static`` are loaded that way), styles only from ``/static``, no frames around
the app, no plugins, forms post only here. Signed links of an S3 store point at the bucket's
endpoint, so its origin is added for images (previews) and connections (upload PUTs).
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from memory_db.storage import HmacLinks
from memory_tools.services import MemoryServices

SESSION_COOKIE = "mem_session"
# Over HTTPS the cookie gets the __Host- prefix: Secure, host-only, Path=/ are then enforced.
SECURE_SESSION_COOKIE = "__Host-mem_session"
SIGN_IN_COOKIE = "mem_sign_in"
FLASH_COOKIE = "mem_flash"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


def new_nonce() -> str:
    """A fresh CSP nonce (128 random bits)."""
    return secrets.token_urlsafe(16)


def same_origin_link(services: MemoryServices, url: str) -> str:
    """A link of our own store as a path, so it works at whatever address the page was opened.

    The local store signs the key and expiry, not the host: ``http://localhost:8765/...`` and
    ``http://127.0.0.1:8765/...`` are the same link, but only the page's own origin passes
    its CSP and needs no CORS. An S3 link (the bucket's endpoint) is kept as it is.
    """
    if not isinstance(services.store, HmacLinks):
        return url
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def store_origins(services: MemoryServices) -> tuple[str, ...]:
    """Origins the store's signed links point at, when they are not this server's own."""
    if isinstance(services.store, HmacLinks):
        return ()
    settings = services.settings
    if settings.asset_s3_endpoint:
        parts = urlsplit(settings.asset_s3_endpoint)
        origin = f"{parts.scheme}://{parts.netloc}"
        if settings.asset_s3_force_path_style or not settings.asset_s3_bucket:
            return (origin,)
        return (origin, f"{parts.scheme}://{settings.asset_s3_bucket}.{parts.netloc}")
    region = settings.asset_s3_region or "us-east-1"
    bucket = settings.asset_s3_bucket or "*"
    # botocore signs a DNS-compatible bucket's links with the global host in every region
    # (https://<bucket>.s3.amazonaws.com), and path-style ones with the regional host.
    return (
        f"https://{bucket}.s3.amazonaws.com",
        f"https://{bucket}.s3.{region}.amazonaws.com",
        f"https://s3.{region}.amazonaws.com",
    )


def content_security_policy(nonce: str, origins: tuple[str, ...] = ()) -> str:
    """The CSP of a web page: nonce-only scripts, same-origin styles, no framing."""
    linked = " ".join(origins)
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            "style-src 'self'",
            f"img-src 'self' blob: {linked}".rstrip(),
            f"connect-src 'self' {linked}".rstrip(),
            "font-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "object-src 'none'",
        ]
    )


def secure_headers(response: Response, nonce: str, origins: tuple[str, ...] = ()) -> Response:
    """Set the security headers every web response carries; return ``response``."""
    response.headers["Content-Security-Policy"] = content_security_policy(nonce, origins)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    # same-origin, not no-referrer: browsers then still send a real Origin on our own POSTs.
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    response.headers["Permissions-Policy"] = "camera=(), microphone=(), geolocation=()"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def is_https(request: Request, services: MemoryServices) -> bool:
    """Whether the browser reached us over HTTPS (directly, or per the public base URL)."""
    if request.url.scheme == "https":
        return True
    return bool(services.public_base_url and services.public_base_url.startswith("https://"))


def session_cookie_name(request: Request, services: MemoryServices) -> str:
    """The session cookie's name for this request's scheme."""
    return SECURE_SESSION_COOKIE if is_https(request, services) else SESSION_COOKIE


def session_secret(request: Request, services: MemoryServices) -> str | None:
    """The session secret the browser sent, if any."""
    return request.cookies.get(session_cookie_name(request, services))


def same_token(presented: str | None, expected: str) -> bool:
    """Constant-time comparison of a CSRF token.

    As bytes: ``hmac.compare_digest`` raises ``TypeError`` for a ``str`` with non-ASCII
    characters, which a forged form field, header or cookie can carry.
    """
    if not presented:
        return False
    return hmac.compare_digest(
        str(presented).encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def same_origin(request: Request, services: MemoryServices | None = None) -> bool:
    """Whether a change request came from a page of ours (Origin, else Referer, else allowed).

    Ours: the request's own ``Host``, or the public base URL's origin (a proxy may hand us its
    upstream's ``Host``, as nginx's default ``proxy_set_header Host $proxy_host`` does).
    The CSRF token is the real guard; this refuses cross-site posts even before it is read.
    A browser that sends neither header (rare, privacy settings) still needs the token.
    """
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True
    return _ours(origin, request, services)


def script_of_ours(request: Request, services: MemoryServices | None = None) -> bool:
    """Whether a script's change (a JSON endpoint) says it came from a page of ours.

    A change must come from a page of this site (docs/web.md#security), and a script can always
    say so: browsers send ``Origin`` with every POST a script makes (``fetch``, whatever the
    referrer policy). So a JSON change without it did not come from our pages' script and is
    refused, even with the right CSRF token. A browser's ``Sec-Fetch-Site: same-origin`` (a
    header no page can set) is accepted in its stead; a ``Referer`` is not. A form
    (:func:`same_origin`) is still allowed without either: some browsers' privacy settings
    drop both on a plain form post, and its token is checked all the same.
    """
    origin = request.headers.get("origin")
    if origin is None:
        return request.headers.get("sec-fetch-site") == "same-origin"
    return _ours(origin, request, services)


def _ours(origin: str, request: Request, services: MemoryServices | None) -> bool:
    """Whether ``origin`` (an Origin or Referer value) is this server's, as the browser reached it.

    Ours: the request's own ``Host`` (over HTTPS when the browser reached us over HTTPS), or
    the public base URL's origin.
    """
    sent = urlsplit(origin)
    if sent.scheme not in ("http", "https") or not sent.netloc:
        return False
    if sent.netloc == request.headers.get("host", ""):
        # The same host over plain HTTP is another origin when the browser reached us over
        # HTTPS: a page of http://host is whatever anyone on the network made of it.
        reached_https = request.url.scheme == "https" or (
            services is not None and is_https(request, services)
        )
        return sent.scheme == "https" or not reached_https
    public = urlsplit(services.public_base_url) if services and services.public_base_url else None
    return public is not None and (sent.scheme, sent.netloc) == (public.scheme, public.netloc)


def safe_next(target: str | None, default: str = "/library") -> str:
    """A local path to go to after signing in: never another site (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return default
    if any(ord(c) < 0x21 or c == "\\" for c in target):
        return default
    return target
