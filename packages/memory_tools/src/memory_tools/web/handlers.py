"""How a web route is written: a page (GET), a form action (POST) or a JSON endpoint.

Each wraps a handler ``async def handler(web: WebRequest) -> Response``:

- the browser's session is resolved to its caller first (no session: a page redirects to the
  sign-in page, an action or endpoint answers 401);
- a change (every POST, PUT, PATCH, DELETE) must come from our own origin and echo the
  session's CSRF token (a form's ``csrf`` field, or the ``X-CSRF-Token`` header from JS); a
  JSON endpoint's change must also say where it came from (``Origin``, or the browser's
  ``Sec-Fetch-Site: same-origin``: :func:`memory_tools.web.security.script_of_ours`);
- the handler calls workflows through :meth:`WebRequest.call` (``workflow(uow, caller,
  services, ...)`` in one transaction, admitted like a tool call, the session re-checked inside
  it, so a key revoked meanwhile is refused) or :meth:`WebRequest.call_as_caller`: the one
  call runner of every adapter (:mod:`memory_tools.workflows.calls`) with the session as the
  credential;
- a ``ToolFailure`` the handler does not catch becomes an error page (pages), a flash message
  on the page the form came from (actions) or ``{"error": {"code", "message"}}`` (endpoints);
- every response carries the security headers and this request's CSP nonce.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from memory_db import get_logger
from memory_tools.access import Caller
from memory_tools.errors import (
    Forbidden,
    InvalidInputFailure,
    ToolFailure,
    Unauthenticated,
    http_status,
    map_failures,
)
from memory_tools.services import MemoryServices
from memory_tools.sessions import SessionCaller, session_caller
from memory_tools.web import security
from memory_tools.web.rendering import (
    Flash,
    clear_flash,
    read_flash,
    render_template,
    set_flash,
)
from memory_tools.workflows import meaning
from memory_tools.workflows.calls import (
    AsCaller,
    InTransaction,
    WebSession,
    invoke,
    invoke_as_caller,
)

log = get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# A form of text fields (edits, moves, grants ...) is small; a form with a file says its own.
FORM_MAX_BYTES = 64 * 1024
_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class WebRequest:
    """One web request of a signed-in caller: call workflows, render, redirect."""

    request: Request
    services: MemoryServices
    who: SessionCaller
    nonce: str
    form_data: FormData | None = None
    # The operator's one line while search understands words only (workflows.meaning).
    operator_notice: str | None = None
    _flash: Flash | None = field(default=None, repr=False)

    @property
    def caller(self) -> Caller:
        """The caller this session acts as (its key's identity and scopes)."""
        return self.who.caller

    @property
    def may_change(self) -> bool:
        """Whether changes can succeed at all: the key has ``write`` and the server is writable.

        Pages use it to leave out forms that could only be refused; the workflows refuse such
        changes themselves whatever a page shows.
        """
        return self.caller.has_scope("write") and not self.services.read_only

    async def call(
        self,
        action: InTransaction[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run a workflow as the caller, exactly as an MCP tool call does (one transaction).

        :func:`memory_tools.workflows.calls.invoke` with this browser's session, re-checked in
        the transaction (a key revoked since the page was resolved is refused).
        """
        return await invoke(self.services, self._session(), action, *args, **kwargs)

    async def call_as_caller(
        self,
        action: AsCaller[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``action(caller, ...)`` outside a transaction (work that makes network calls)."""
        return await invoke_as_caller(self.services, self._session(), action, *args, **kwargs)

    def credential(self) -> WebSession:
        """The browser's session as a credential, for a runner that checks it per call.

        A bulk action (:mod:`memory_tools.workflows.bulk`) checks it again for each item, so a
        session ended mid-way is refused from the next item on.
        """
        return WebSession(security.session_secret(self.request, self.services))

    def _session(self) -> WebSession:
        return self.credential()

    def render(self, template: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        """Render a page of the signed-in app (the layout, navigation and flash included)."""
        return render_page(
            self.request,
            self.services,
            template,
            nonce=self.nonce,
            who=self.who,
            status=status,
            operator_notice=self.operator_notice,
            **context,
        )

    def redirect(
        self,
        url: str,
        *,
        notice: str | None = None,
        failure: ToolFailure | None = None,
        link: tuple[str, str] | None = None,
        form: str | None = None,
        fields: dict[str, str] | None = None,
    ) -> Response:
        """A 303 to a local ``url``, carrying a one-shot notice or a failure to show there.

        ``link`` (a local path and its text) is shown after the notice, e.g. "Open the trash".
        ``form`` and ``fields``: the form a failure belongs to and what was typed into it, for
        a page that shows the refusal beside that form (post-redirect-get).
        """
        response = RedirectResponse(security.safe_next(url), status_code=303)
        secure = security.is_https(self.request, self.services)
        if failure is not None:
            flash = Flash("error", failure.message, failure.code, form=form, fields=fields)
            set_flash(response, flash, secure=secure)
        elif notice is not None:
            href, text = link if link is not None else (None, None)
            set_flash(response, Flash("ok", notice, link=href, link_text=text), secure=secure)
        return response

    def form(self) -> FormData:
        """The submitted form of an action (already read, bounded, and CSRF-checked)."""
        if self.form_data is None:
            raise InvalidInputFailure("this request carries no form")
        return self.form_data

    async def json(self, max_bytes: int = FORM_MAX_BYTES) -> Any:
        """The JSON body of an endpoint's call, bounded (see :func:`read_json`)."""
        return await read_json(self.request, max_bytes)

    def back(self, default: str = "/library") -> str:
        """Where an action returns to: the form's ``back`` field when it is a local path."""
        sent = self.form_data.get("back") if self.form_data is not None else None
        return security.safe_next(sent if isinstance(sent, str) else None, default)


def render_page(
    request: Request,
    services: MemoryServices,
    template: str,
    *,
    nonce: str,
    who: SessionCaller | None,
    status: int = 200,
    operator_notice: str | None = None,
    **context: Any,
) -> HTMLResponse:
    """Render ``template`` with the layout's context; shows and clears a pending flash.

    ``operator_notice``: the line the layout shows an operator (:mod:`memory_tools.workflows
    .meaning`), resolved by :func:`page` for the signed-in caller.
    """
    flash = read_flash(request)
    body = render_template(
        template,
        {
            "nonce": nonce,
            "who": who,
            "csrf": who.csrf_token if who else "",
            "is_admin": bool(who and who.caller.has_scope("admin")),
            "path": request.url.path,
            "flash": flash,
            "operator_notice": operator_notice,
            # A store link as the page shows it (a path for the local store: see the function).
            "store_link": partial(security.same_origin_link, services),
            **context,
        },
    )
    response = HTMLResponse(body, status_code=status)
    if flash is not None:
        clear_flash(response)
    security.secure_headers(response, nonce, security.store_origins(services))
    return response


async def _resolve(request: Request, services: MemoryServices) -> SessionCaller:
    secret = security.session_secret(request, services)
    with map_failures():
        async with services.call_admission.admit(), services.database.unit_of_work() as uow:
            return await session_caller(uow, secret)


async def read_body(request: Request, max_bytes: int, what: str = "the body") -> bytes:
    """Read a request body of at most ``max_bytes`` (refused as soon as it is exceeded)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise InvalidInputFailure(f"{what} is larger than {max_bytes} bytes")
    received = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        received += len(chunk)
        if received > max_bytes:
            raise InvalidInputFailure(f"{what} is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, max_bytes: int = FORM_MAX_BYTES) -> Any:
    """Read a JSON body of at most ``max_bytes``; ``InvalidInputFailure`` when it is not JSON.

    A JSON endpoint reads its body with this (or :meth:`WebRequest.json`), never with
    ``request.json()``: nothing else bounds a web request's body (the limit is on ``/mcp``).
    """
    body = await read_body(request, max_bytes, "the JSON body")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise InvalidInputFailure("the body is not valid JSON") from exc


async def read_form(request: Request, max_bytes: int = FORM_MAX_BYTES) -> FormData:
    """Read a form body of at most ``max_bytes`` (refused as soon as it is exceeded)."""
    body = await read_body(request, max_bytes, "the form")

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    # Starlette parses the form from the body we already read (and bounded). Its refusal of a
    # malformed one (too many fields or files, no boundary) would be a bare 400 of its own.
    try:
        return await Request(request.scope, replay).form(max_files=4, max_fields=200)
    except (HTTPException, MultiPartException) as exc:
        why = exc.detail if isinstance(exc, HTTPException) else exc.message
        raise InvalidInputFailure(f"the form is malformed: {why}") from exc


def _failure_status(failure: ToolFailure) -> int:
    return http_status(failure)


def _sign_in_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/sign-in?next={quote(target, safe='/')}", status_code=303)


def _refusal(request: Request, services: MemoryServices, nonce: str, status: int, text: str):
    response = render_page(
        request,
        services,
        "error.html",
        nonce=nonce,
        who=None,
        status=status,
        title="Refused",
        failure_code="forbidden",
        failure_message=text,
    )
    return response


async def _signed_in(
    request: Request, services: MemoryServices, nonce: str
) -> SessionCaller | Response:
    """The browser's session, or what a page or action answers without one.

    No session (or one that ended): to the sign-in page, back here after. The session could
    not be read (the database is away, the server is busy): the error page.
    """
    try:
        return await _resolve(request, services)
    except Unauthenticated:
        return security.secure_headers(_sign_in_redirect(request), nonce)
    except ToolFailure as failure:
        return error_page(request, services, nonce, None, failure)


WebHandler = Callable[[WebRequest], Awaitable[Response]]


def page(path: str, handler: WebHandler, services: MemoryServices) -> Route:
    """A GET page of the signed-in app; no session sends the browser to sign in first."""

    async def endpoint(request: Request) -> Response:
        nonce = security.new_nonce()
        who = await _signed_in(request, services, nonce)
        if isinstance(who, Response):
            return who
        web = WebRequest(request, services, who, nonce)
        try:
            with map_failures():  # an unexpected error is logged and shown as `internal`
                web.operator_notice = await meaning.operator_notice(services, who.caller)
                response = await handler(web)
        except Unauthenticated:
            return security.secure_headers(_sign_in_redirect(request), nonce)
        except ToolFailure as failure:
            return error_page(request, services, nonce, who, failure)
        return security.secure_headers(response, nonce, security.store_origins(services))

    return Route(path, endpoint, methods=["GET"])


def action(
    path: str,
    handler: WebHandler,
    services: MemoryServices,
    *,
    max_bytes: int = FORM_MAX_BYTES,
) -> Route:
    """A POST form action: same origin, the session's CSRF token, then ``handler``.

    A failure the handler does not catch is shown on the page the form came from (its ``back``
    field), and nothing was changed by the workflow that refused.
    """

    async def endpoint(request: Request) -> Response:
        nonce = security.new_nonce()
        if not security.same_origin(request, services):
            return _refusal(request, services, nonce, 403, "cross-site request refused")
        who = await _signed_in(request, services, nonce)
        if isinstance(who, Response):
            return who
        try:
            form = await read_form(request, max_bytes)
        except ToolFailure as failure:
            return error_page(request, services, nonce, who, failure)
        sent = form.get(security.CSRF_FIELD)
        if not security.same_token(sent if isinstance(sent, str) else None, who.csrf_token):
            log.info("web_csrf_refused", path=request.url.path)
            await form.close()  # a posted file's spooled copy
            return _refusal(
                request, services, nonce, 403, "the form has expired; reload the page and retry"
            )
        web = WebRequest(request, services, who, nonce, form_data=form)
        try:
            with map_failures():
                response = await handler(web)
        except Unauthenticated:
            return security.secure_headers(_sign_in_redirect(request), nonce)
        except ToolFailure as failure:
            response = web.redirect(web.back(), failure=failure)
        finally:
            await form.close()  # a posted file's spooled copy, whatever the handler did
        return security.secure_headers(response, nonce, security.store_origins(services))

    return Route(path, endpoint, methods=["POST"])


def json_failure(failure: ToolFailure) -> JSONResponse:
    """``{"error": {"code", "message"}}`` with the status of the code."""
    return JSONResponse(
        {"error": {"code": failure.code, "message": failure.message}},
        status_code=_failure_status(failure),
    )


def endpoint(
    path: str,
    handler: WebHandler,
    services: MemoryServices,
    *,
    methods: tuple[str, ...] = ("GET",),
) -> Route:
    """A JSON endpoint for the app's own scripts.

    A change needs the ``X-CSRF-Token`` header and an ``Origin`` of this site (or
    ``Sec-Fetch-Site: same-origin``); without them it is refused 403 before it is read.
    """

    async def serve(request: Request) -> Response:
        nonce = security.new_nonce()
        try:
            if request.method in _CHANGES and not security.script_of_ours(request, services):
                raise Forbidden("cross-site request refused: no Origin of this site")
            who = await _resolve(request, services)
            if request.method in _CHANGES and not security.same_token(
                request.headers.get(security.CSRF_HEADER), who.csrf_token
            ):
                raise Forbidden("the CSRF token is missing or wrong; reload the page")
            with map_failures():
                response = await handler(WebRequest(request, services, who, nonce))
        except ToolFailure as failure:
            response = json_failure(failure)
        return security.secure_headers(response, nonce, security.store_origins(services))

    return Route(path, serve, methods=list(methods))


async def not_found_page(request: Request, services: MemoryServices) -> Response:
    """The page of an address no route serves: the app's layout, a link home, status 404.

    Signed in, it shows the navigation; without a session (or when the session cannot be
    read) it shows the page alone, as the sign-in page does.
    """
    nonce = security.new_nonce()
    who: SessionCaller | None = None
    if security.session_secret(request, services) is not None:
        try:
            who = await _resolve(request, services)
        except ToolFailure:
            who = None  # signed out, or the database is away: still a page, without the nav
    response = render_page(
        request,
        services,
        "not_found.html",
        nonce=nonce,
        who=who,
        status=404,
        title="Page not found",
    )
    return security.secure_headers(response, nonce, security.store_origins(services))


def error_page(
    request: Request,
    services: MemoryServices,
    nonce: str,
    who: SessionCaller | None,
    failure: ToolFailure,
) -> Response:
    """The page of a refused request: what was wrong, its code, and where to go next."""
    if failure.code in ("unavailable", "busy"):
        log.warning("web_page_unavailable", path=request.url.path, code=failure.code)
    return render_page(
        request,
        services,
        "error.html",
        nonce=nonce,
        who=who,
        status=_failure_status(failure),
        title={"not_found": "Not found", "forbidden": "Not allowed"}.get(
            failure.code, "Something went wrong"
        ),
        failure_code=failure.code,
        failure_message=failure.message,
    )
