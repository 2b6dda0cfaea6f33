"""The Keys page: the caller's API keys, what each did, and their switches (docs/web.md#keys).

``GET /keys`` lists the keys (:func:`memory_tools.workflows.keys.list_keys`): an owner's own,
an operator's (a key with the ``admin`` scope) everyone's. ``POST /keys/create`` makes a key
and answers with the page itself, the secret shown in it once with a copy button: it is never
stored, never put in a cookie or a redirect, and the page replaces its address with ``/keys``
(``keys.js``) so that reloading it reads the list again instead of showing the secret.
``POST /keys/pause``, ``/keys/resume`` and ``/keys/revoke`` switch a key
(:func:`memory_tools.workflows.keys.change_own_key`) and redirect back with what happened.
Every form carries the session's CSRF token (``memory_tools.web.handlers.action``).

The key the page is signed in with cannot be paused or revoked here (the workflow refuses it):
that would end this very session. Sign in with another key, or use the command line.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from memory_tools.errors import ToolFailure, http_status
from memory_tools.services import MemoryServices
from memory_tools.web.handlers import WebHandler, WebRequest, action, page
from memory_tools.workflows import keys as key_workflows
from memory_tools.workflows.keys import KeyAction, NewKeyView

_DONE = {"pause": "paused", "resume": "resumed", "revoke": "revoked"}
_ALREADY = {"pause": "was already paused", "resume": "was not paused", "revoke": "was revoked"}


def _field(web: WebRequest, name: str) -> str:
    value = web.form().get(name)
    return value if isinstance(value, str) else ""


def routes(services: MemoryServices) -> list[Route]:
    """``/keys`` and its create, pause, resume and revoke actions."""

    async def shown(
        web: WebRequest,
        *,
        created: NewKeyView | None = None,
        failure: ToolFailure | None = None,
        typed: dict[str, object] | None = None,
    ) -> Response:
        listed = await web.call(key_workflows.list_keys)
        return web.render(
            "keys.html",
            status=200 if failure is None else http_status(failure),
            title="Keys",
            listed=listed,
            created=created,
            failure=failure,
            typed=typed or {"scopes": [s for s in ("read", "write") if s in listed.scopes]},
            all_scopes=[s for s in key_workflows.KEY_SCOPES if s in listed.scopes],
        )

    async def show(web: WebRequest) -> Response:
        return await shown(web)

    async def create(web: WebRequest) -> Response:
        form = web.form()
        label, note = _field(web, "label"), _field(web, "note")
        scopes = [s for s in form.getlist("scopes") if isinstance(s, str)]
        try:
            created = await web.call(
                key_workflows.create_key, label=label, note=note, scopes=scopes
            )
        except ToolFailure as failure:
            if failure.code == "unauthenticated":
                raise
            typed: dict[str, object] = {"label": label, "note": note, "scopes": scopes}
            return await shown(web, failure=failure, typed=typed)
        return await shown(web, created=created)

    def switch(kind: KeyAction) -> WebHandler:
        async def handle(web: WebRequest) -> Response:
            done = await web.call(
                key_workflows.change_own_key, key_id=_field(web, "key"), change=kind
            )
            named = done.key.label or done.key.key_id
            outcome = _DONE[kind] if done.changed else _ALREADY[kind]
            return web.redirect(web.back("/keys"), notice=f"Key “{named}” {outcome}.")

        return handle

    return [
        page("/keys", show, services),
        action("/keys/create", create, services),
        *(action(f"/keys/{kind}", switch(kind), services) for kind in key_workflows.KEY_ACTIONS),
    ]
