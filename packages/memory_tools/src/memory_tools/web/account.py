"""Signing in and out, the account page, ``/`` and the static files."""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from importlib import resources

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from memory_db import get_logger
from memory_tools.errors import ToolFailure, Unauthenticated, map_failures
from memory_tools.services import MemoryServices
from memory_tools.sessions import sign_in, sign_out
from memory_tools.web import security
from memory_tools.web.handlers import (
    WebRequest,
    action,
    error_page,
    page,
    read_form,
    render_page,
)

log = get_logger(__name__)

_STATIC_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\.(css|js|svg)$")
_STATIC_TYPES = {
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "svg": "image/svg+xml",
}


def routes(services: MemoryServices) -> list[Route]:
    """``/``, ``/sign-in`` (GET, POST), ``/sign-out``, ``/account`` and ``/static/{name}``."""

    async def home(request: Request) -> Response:
        # The library when signed in; the page itself sends a stranger to sign in first.
        return security.secure_headers(
            RedirectResponse("/library", status_code=303), security.new_nonce()
        )

    def sign_in_form(
        request: Request,
        *,
        status: int = 200,
        error: ToolFailure | None = None,
        next_path: str | None = None,
    ) -> Response:
        nonce = security.new_nonce()
        token = secrets.token_urlsafe(32)
        response = render_page(
            request,
            services,
            "sign_in.html",
            nonce=nonce,
            who=None,
            status=status,
            title="Sign in",
            sign_in_token=token,
            next=security.safe_next(next_path or request.query_params.get("next")),
            error=error,
        )
        # Login CSRF: the form must echo this cookie, which no other site can read or set.
        response.set_cookie(
            security.SIGN_IN_COOKIE,
            token,
            max_age=3600,
            path="/sign-in",
            httponly=True,
            samesite="strict",
            secure=security.is_https(request, services),
        )
        return response

    async def show_sign_in(request: Request) -> Response:
        return sign_in_form(request)

    async def submit_sign_in(request: Request) -> Response:
        nonce = security.new_nonce()
        if not security.same_origin(request, services):
            return security.secure_headers(
                PlainTextResponse("cross-site request refused", status_code=403), nonce
            )
        try:
            form = await read_form(request)
        except ToolFailure as failure:
            return error_page(request, services, nonce, None, failure)
        wanted = form.get("next")
        next_path = security.safe_next(wanted if isinstance(wanted, str) else None)
        sent = form.get("signInToken")
        cookie = request.cookies.get(security.SIGN_IN_COOKIE, "")
        if not cookie or not security.same_token(sent if isinstance(sent, str) else None, cookie):
            return sign_in_form(
                request,
                status=403,
                error=Unauthenticated("the sign-in form expired; enter your key again"),
                next_path=next_path,
            )
        key = form.get("apiKey")
        key = key if isinstance(key, str) else ""
        lifetime = timedelta(seconds=services.settings.web_session_ttl_seconds)
        try:
            with map_failures():
                async with (
                    services.call_admission.admit(),
                    services.database.unit_of_work() as uow,
                ):
                    started = await sign_in(uow, key, lifetime)
                    # The session this browser had (another key, or a stale one) ends here:
                    # its cookie is overwritten, so nothing could sign it out any more.
                    await sign_out(uow, security.session_secret(request, services))
        except Unauthenticated:
            log.info("web_sign_in_refused")
            return sign_in_form(
                request,
                status=401,
                error=Unauthenticated("that API key is unknown or revoked"),
                next_path=next_path,
            )
        except ToolFailure as failure:
            return error_page(request, services, nonce, None, failure)
        log.info("web_signed_in", session_id=started.session_id, key_id=started.caller.key_id)
        response = RedirectResponse(next_path, status_code=303)
        https = security.is_https(request, services)
        response.set_cookie(
            security.session_cookie_name(request, services),
            started.secret,
            max_age=int(lifetime.total_seconds()),
            path="/",
            httponly=True,
            samesite="strict",
            secure=https,
        )
        response.delete_cookie(security.SIGN_IN_COOKIE, path="/sign-in")
        return security.secure_headers(response, nonce)

    async def do_sign_out(web: WebRequest) -> Response:
        secret = security.session_secret(web.request, services)
        with map_failures():
            async with services.database.unit_of_work() as uow:
                await sign_out(uow, secret)
        log.info("web_signed_out", session_id=web.who.session_id)
        response = RedirectResponse("/sign-in", status_code=303)
        response.delete_cookie(
            security.session_cookie_name(web.request, services),
            path="/",
            httponly=True,
            samesite="strict",
            secure=security.is_https(web.request, services),
        )
        return response

    async def account(web: WebRequest) -> Response:
        return web.render("account.html", title="Account")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if not _STATIC_NAME.match(name):
            return PlainTextResponse("not found", status_code=404)
        item = resources.files("memory_tools.web").joinpath("static", name)
        if not item.is_file():
            return PlainTextResponse("not found", status_code=404)
        return Response(
            item.read_bytes(),
            media_type=_STATIC_TYPES[name.rsplit(".", 1)[1]],
            headers={
                "X-Content-Type-Options": "nosniff",
                # Opened as a page (an SVG is a document), a static file runs nothing.
                "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
                "X-Frame-Options": "DENY",
                # The URL carries the files' version (?v=), so a year is safe.
                "Cache-Control": "public, max-age=31536000, immutable",
            },
        )

    return [
        Route("/", home, methods=["GET"]),
        Route("/sign-in", show_sign_in, methods=["GET"]),
        Route("/sign-in", submit_sign_in, methods=["POST"]),
        action("/sign-out", do_sign_out, services),
        page("/account", account, services),
        Route("/static/{name}", static, methods=["GET"]),
    ]
