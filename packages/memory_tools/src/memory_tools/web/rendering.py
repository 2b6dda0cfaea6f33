"""Templates (Jinja2, autoescaped) and the one-shot flash message of a redirect."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import Response

from memory_tools.web.security import FLASH_COOKIE, safe_next

# Where every <img> of the pages loads a preview: a session route that redirects to a fresh
# signed link (memory_tools.web.asset_page.preview), so no page holds a link that expires.
PREVIEW_ROUTE = "/app/previews/{asset_id}"

FlashKind = Literal["ok", "error"]
_FLASH_MESSAGE_CHARS = 500  # what read_flash shows at most
_FLASH_COOKIE_CHARS = 1500  # the JSON; cookie quoting may double it, still under 4096 bytes


@dataclass(frozen=True, slots=True)
class Flash:
    """A message shown once on the page a change redirects to."""

    kind: FlashKind
    message: str
    code: str | None = None
    link: str | None = None  # a local path to go on to (e.g. the trash), shown after it
    link_text: str | None = None
    # The form a refusal belongs to (e.g. "edit"), so the page shows it beside that form, and
    # what was typed into it, so nothing typed is lost (left out when it would not fit).
    form: str | None = None
    fields: dict[str, str] | None = None


def _static_version() -> str:
    # Changes with the files, so browsers never keep a stale script after an upgrade.
    import hashlib

    digest = hashlib.sha256()
    for item in sorted(resources.files("memory_tools.web").joinpath("static").iterdir(), key=str):
        if item.is_file():
            digest.update(item.name.encode())
            digest.update(item.read_bytes())
    return digest.hexdigest()[:12]


@cache
def environment() -> Environment:
    """The template environment: package templates, autoescaped, undefined names are errors."""
    env = Environment(
        loader=PackageLoader("memory_tools.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    version = _static_version()

    def static(name: str) -> str:
        return f"/static/{name}?v={version}"

    globals_: dict[str, Any] = env.globals  # jinja2's stubs type the values too narrowly
    globals_["static"] = static
    globals_["preview_src"] = preview_src
    env.filters["bytes"] = human_bytes
    return env


def preview_src(asset_id: str) -> str:
    """The ``src`` of an image's preview on a page (:data:`PREVIEW_ROUTE`)."""
    return PREVIEW_ROUTE.format(asset_id=quote(asset_id, safe=""))


def human_bytes(count: int | float | None) -> str:
    """``1536`` → ``1.5 KiB``; binary units, as the limits are documented."""
    if count is None:
        return "—"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def render_template(name: str, context: dict[str, Any]) -> str:
    """Render ``name`` with ``context``."""
    return environment().get_template(name).render(context)


def read_flash(request: Request) -> Flash | None:
    """The flash message the browser carries, if it is well-formed."""
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        kind = data["kind"]
        message = str(data["message"])[:500]
        code = data.get("code")
    except (ValueError, KeyError, TypeError):
        return None
    if kind not in ("ok", "error"):
        return None
    link, link_text = data.get("link"), data.get("linkText")
    if not isinstance(link, str) or safe_next(link, "") == "" or not isinstance(link_text, str):
        link, link_text = None, None  # only a local path, never another site
    form, fields = data.get("form"), data.get("fields")
    if not isinstance(form, str):
        form = None
    if isinstance(fields, dict):
        sent: dict[Any, Any] = fields  # a JSON object: its keys are strings
        fields = {k: v for k, v in sent.items() if isinstance(v, str)} or None
    else:
        fields = None
    return Flash(
        kind,
        message,
        str(code)[:40] if code else None,
        link[:500] if link else None,
        link_text[:100] if link_text else None,
        form[:40] if form else None,
        fields,
    )


def set_flash(response: Response, flash: Flash, *, secure: bool) -> None:
    """Carry ``flash`` to the next page (one minute at most)."""
    message = flash.message[:_FLASH_MESSAGE_CHARS]
    fields = flash.fields
    while True:
        payload: dict[str, Any] = {
            "kind": flash.kind,
            "message": message,
            "code": flash.code,
        }
        if flash.link is not None:
            payload |= {"link": flash.link, "linkText": flash.link_text or flash.link}
        if flash.form is not None:
            payload["form"] = flash.form
        if fields:
            payload["fields"] = fields
        value = json.dumps(payload, separators=(",", ":"))
        # A browser drops a cookie over 4096 bytes, and the failure would never be shown:
        # non-ASCII text grows sixfold in JSON and again in the cookie's quoting. What was
        # typed goes first (the form then shows the saved values), the message's end next.
        if len(value) <= _FLASH_COOKIE_CHARS or len(message) <= 1:
            break
        if fields:
            fields = None
            continue
        message = message[: len(message) // 2].rstrip() + "…"
    response.set_cookie(
        FLASH_COOKIE,
        value,
        max_age=60,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure,
    )


def clear_flash(response: Response) -> None:
    """Forget the flash message once shown."""
    response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
