"""The sharing page: who the caller's vaults are shared with; grant, revoke (docs/web.md#sharing).

``GET /sharing`` lists every vault the caller owns with its grants
(:func:`memory_tools.workflows.sharing.list_sharing`). ``POST /sharing/grant`` shares a vault
(:func:`memory_tools.workflows.sharing.grant_access`): a refusal shows the page again with the
message
and what was typed. ``POST /sharing/revoke`` removes a grant
(:func:`memory_tools.workflows.sharing.revoke_access`) and redirects back. Only the vault's owner
may do
either; a vault the caller cannot see is refused like one that does not exist.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.routing import Route

from memory_tools.errors import ToolFailure, http_status
from memory_tools.services import MemoryServices
from memory_tools.web.handlers import WebRequest, action, page
from memory_tools.workflows import sharing as sharing_workflows


def _field(web: WebRequest, name: str) -> str:
    value = web.form().get(name)
    return value if isinstance(value, str) else ""


def routes(services: MemoryServices) -> list[Route]:
    """``/sharing`` and its grant and revoke actions."""

    async def show(web: WebRequest) -> Response:
        overview = await web.call(sharing_workflows.list_sharing)
        return web.render(
            "sharing.html",
            title="Sharing",
            overview=overview,
            permissions=sharing_workflows.PERMISSIONS,
            typed=None,
            failure=None,
        )

    async def grant(web: WebRequest) -> Response:
        vault, grantee = _field(web, "vault"), _field(web, "grantee")
        permission = _field(web, "permission")
        try:
            done = await web.call(
                sharing_workflows.grant_access,
                vault=vault,
                grantee=grantee,
                permission=permission,
            )
        except ToolFailure as failure:
            if failure.code == "unauthenticated":
                raise
            # The page again, with the refusal beside the form and what was typed kept.
            overview = await web.call(sharing_workflows.list_sharing)
            return web.render(
                "sharing.html",
                status=http_status(failure),
                title="Sharing",
                overview=overview,
                permissions=sharing_workflows.PERMISSIONS,
                typed={"vault": vault, "grantee": grantee, "permission": permission},
                failure=failure,
            )
        if done.changed:
            notice = f"{done.vault} is shared with {done.grantee} ({done.permission})."
        else:
            notice = f"{done.grantee} already had {done.permission} access to {done.vault}."
        return web.redirect("/sharing", notice=notice)

    async def revoke(web: WebRequest) -> Response:
        done = await web.call(
            sharing_workflows.revoke_access,
            vault=_field(web, "vault"),
            grantee=_field(web, "grantee"),
        )
        if done.revoked:
            notice = f"{done.grantee} no longer has access to {done.vault}."
        else:
            notice = f"{done.grantee} had no access to {done.vault}: nothing changed."
        return web.redirect(web.back("/sharing"), notice=notice)

    return [
        page("/sharing", show, services),
        action("/sharing/grant", grant, services),
        action("/sharing/revoke", revoke, services),
    ]
