"""``GET /metrics``: the Prometheus exposition of :mod:`memory_tools.metrics`.

Who may read it (docs/observability.md#access): anyone, when the server listens only on
loopback (``127.0.0.1``, ``::1``, ``localhost``: only this machine can reach it), is not
published elsewhere (``MEMORY_PUBLIC_BASE_URL``) and the request came through no proxy
(``Forwarded``, ``X-Forwarded-For``, ``X-Real-IP``); otherwise only a bearer API key with the
``admin`` scope. No key or an unknown or revoked one is a 401, a
key without ``admin`` a 403. The answer carries counts by bounded labels only: no id, owner,
key or URL.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Generator
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from memory_db import DatabaseUnavailable, get_logger
from memory_db.repositories import QueueHealth
from memory_tools import metrics
from memory_tools.services import MemoryServices

log = get_logger(__name__)

METRICS_PATH = "/metrics"
ADMIN_SCOPE = "admin"
_NO_STORE = {"Cache-Control": "no-store"}


def is_loopback_only(host: str | None) -> bool:
    """Whether a server bound to ``host`` can be reached from this machine only."""
    if host is None:
        return False
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


# Headers a reverse proxy adds: a request carrying one came from wherever the proxy listens.
_FORWARDED = ("forwarded", "x-forwarded-for", "x-real-ip")


def is_public_behind_proxy(public_base_url: str | None) -> bool:
    """Whether ``MEMORY_PUBLIC_BASE_URL`` names another machine's address than loopback.

    Clients then reach this server through a proxy, whatever address it is bound to.
    """
    if public_base_url is None:
        return False
    return not is_loopback_only(urlsplit(public_base_url).hostname)


def _forwarded(request: Request) -> bool:
    return any(name in request.headers for name in _FORWARDED)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _refuse(status: int, message: str) -> Response:
    headers = dict(_NO_STORE)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return PlainTextResponse(message + "\n", status_code=status, headers=headers)


async def _admitted(services: MemoryServices, request: Request) -> Response | None:
    """``None`` when the request may read the metrics, else the refusal to answer."""
    token = _bearer(request)
    if token is None:
        return _refuse(401, "an API key with the 'admin' scope is required (Bearer)")
    try:
        # As every call checks a key: from the process's cache when warm (no round trip),
        # which a revocation clears in every process before it returns.
        async with services.database.single_statements() as uow:
            record = await uow.api_keys.use(token)
    except DatabaseUnavailable:
        log.warning("metrics_key_check_unavailable", exc_info=True)
        return PlainTextResponse(
            "the database is unavailable; retry shortly\n",
            status_code=503,
            headers={**_NO_STORE, "Retry-After": "5"},
        )
    if record is None:
        return _refuse(401, "the API key is unknown or revoked")
    if ADMIN_SCOPE not in record.scopes:
        return _refuse(403, "this API key lacks the 'admin' scope: metrics are for operators")
    return None


async def _queue_health(services: MemoryServices) -> QueueHealth | None:
    """The queue's gauges; ``None`` (and the process metrics alone) when the database is down."""
    try:
        async with services.database.single_statements() as uow:
            return await uow.jobs.queue_health()
    except DatabaseUnavailable:
        log.warning("metrics_queue_unavailable", exc_info=True)
        return None


def metrics_routes(services: MemoryServices, *, listen_host: str | None) -> list[Route]:
    """``GET /metrics``, open on a loopback-only server, else for ``admin`` keys only.

    ``listen_host`` is the address the server is bound to; ``None`` (unknown) counts as public.
    """
    open_access = is_loopback_only(listen_host) and not is_public_behind_proxy(
        services.settings.memory_public_base_url
    )

    async def scrape(request: Request) -> Response:
        if not open_access or _forwarded(request):
            refused = await _admitted(services, request)
            if refused is not None:
                return refused
        body = metrics.render(await _queue_health(services))
        return Response(body, media_type=metrics.CONTENT_TYPE, headers=_NO_STORE)

    return [Route(METRICS_PATH, scrape, methods=["GET"])]


async def serve_metrics(services: MemoryServices, host: str, port: int) -> None:
    """Serve ``/metrics`` alone on ``host:port`` until cancelled (a worker's own endpoint)."""
    import uvicorn
    from starlette.applications import Starlette

    class _Embedded(uvicorn.Server):
        # The worker's command handles SIGINT/SIGTERM; this server only ends with the worker.
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None]:
            yield

    app = Starlette(routes=metrics_routes(services, listen_host=host))
    # Our logging config handles uvicorn's loggers; no access lines (as for the servers).
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    server = _Embedded(config)
    log.info("worker_metrics_listening", host=host, port=port)
    await server.serve()
