"""Tools declared once: a decorator records each tool, ``bind`` turns them into fastmcp Tools.

A tool is one decorated method of a toolset class (``MemoryTools``): its name is the method's
name, its description the docstring, its input schema the parameters, its output schema the
return model. The decorator states the title, all four MCP hints and the provenance operation
under which refusals are audited; nothing else lists tools by name.

Services are bound the way fastmcp binds state to tools, as bound methods of one toolset per
server (fastmcp drops ``self`` from the schema), rather than closures (docs/architecture.md,
"Declaring a tool"). What a client is told of a parameter whose bound depends on the server's
settings (the base64 image, at most ASSET_MAX_BYTES) is declared with :class:`Advertised` in
its annotation; ``bind`` applies it with fastmcp's own argument transform for the toolset's
settings, as pydantic-ai's ``prepare`` adapts a tool's advertised schema per run. The bound
itself is enforced by the workflow, so every entry point refuses the same input.

Parameters several tools share as a group (the filters of listing and search,
:class:`memory_tools.workflows.filters.FilterParameters`) are one pydantic model, declared as
one parameter annotated with :class:`Spread`: ``bind`` shows each of the model's fields as a
tool parameter of its own, under its camelCase alias, in the parameter's place, and calls the
method with the model built from them. The schema is that of the fields written out one by one.

An answer that carries thumbnails (``WireModel.with_thumbnails``, asked for with
``includeThumbnails``) is sent as a ``ToolResult``: the declared model's structured content
unchanged, then the thumbnails as MCP image content (``_shown_with_thumbnails``). The output
schema still comes from the method's return model.

Every bound tool is listed with lean schemas (:mod:`memory_tools.mcp.lean_schemas`): the same
constraints, spelled in fewer bytes, and an output schema that names an answer's fields.
``tools/list`` has a byte budget per tool (``scraper_mcp.schema_budget``).
"""

from __future__ import annotations

import base64
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar, get_args, get_origin, get_type_hints

from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import transform_context_annotations
from fastmcp.tools import FunctionTool, Tool, ToolResult
from fastmcp.tools.tool_transform import ArgTransform
from mcp_types import ContentBlock, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel

from memory_db import MemorySettings, get_logger
from memory_db.schema import PROVENANCE_OPERATIONS
from memory_tools.access import Caller
from memory_tools.errors import ToolFailure
from memory_tools.mcp.lean_schemas import lean_input_schema, lean_output_schema
from memory_tools.services import MemoryServices
from memory_tools.wire import Thumbnail, WireModel
from memory_tools.workflows.bulk import BulkAnswer

log = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
T = TypeVar("T", bound=Tool)


@dataclass(frozen=True)
class Advertised:
    """Annotation metadata: clients are told of this parameter ``describe(settings)``.

    ``describe`` returns the ``ArgTransform`` (type and description) a server with those
    settings advertises; the declared type is what the call is validated against.
    """

    describe: Callable[[MemorySettings], ArgTransform]


@dataclass(frozen=True)
class Spread:
    """Annotation metadata: this parameter, a pydantic model, is shown as its fields.

    Each field becomes a tool parameter named by its alias, with its own bounds and
    description; the method receives the model validated from them.
    """


@dataclass(frozen=True)
class ToolSpec:
    """What the decorator states about one tool."""

    name: str
    title: str
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    audited: str | None  # the provenance operation refusals are recorded under, if any
    # What the server must have for the tool to be offered at all (e.g. "chromium"); a server
    # without it leaves the tool out of tools/list instead of offering one that always fails.
    requires: frozenset[str] = frozenset()

    def annotations(self) -> ToolAnnotations:
        """All four MCP hints stated explicitly (the spec's defaults are unsafe).

        The title is the tool's own ``title`` alone: every client of the protocol revisions
        with output schemas reads it there, and listing it twice cost every tool its bytes.
        """
        return ToolAnnotations(
            read_only_hint=self.read_only,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=self.open_world,
        )


class Refused(Exception):
    """A workflow's ``ToolFailure`` with the caller it was refused to (``None`` before auth)."""

    def __init__(self, failure: ToolFailure, caller: Caller | None) -> None:
        self.failure = failure
        self.caller = caller
        super().__init__(str(failure))


class Toolset(Protocol):
    """What ``bind`` needs of the object whose methods are the tools."""

    services: MemoryServices


class ToolRegistry:
    """The tools of one toolset class, in declaration order."""

    def __init__(self) -> None:
        self._specs: dict[str, ToolSpec] = {}

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """Every declared tool."""
        return tuple(self._specs.values())

    def spec(self, name: str) -> ToolSpec:
        """The declared tool ``name`` (``KeyError`` for a name never declared)."""
        return self._specs[name]

    def tool(
        self,
        title: str,
        *,
        read_only: bool,
        idempotent: bool,
        destructive: bool = False,
        open_world: bool = False,
        audited: str | None = None,
        requires: frozenset[str] = frozenset(),
    ) -> Callable[[F], F]:
        """Declare the decorated method a tool; ``audited`` must be a provenance operation.

        ``open_world`` only for tools that may reach the open web (saving or searching by URL);
        ``requires``: what the server must have to offer it (see ``ToolSpec.requires``).
        """

        def register(fn: F) -> F:
            name = fn.__name__
            if audited is not None and audited not in PROVENANCE_OPERATIONS:
                raise ValueError(f"{name}: {audited!r} is not a provenance operation")
            if name in self._specs:
                raise ValueError(f"tool {name} is declared twice")
            self._specs[name] = ToolSpec(
                name=name,
                title=title,
                read_only=read_only,
                destructive=destructive,
                idempotent=idempotent,
                open_world=open_world,
                audited=audited,
                requires=requires,
            )
            return fn

        return register

    def bind(
        self, toolset: Toolset, offers: Callable[[ToolSpec], bool] | None = None
    ) -> list[Tool]:
        """A fastmcp Tool for each declared method of ``toolset``; register them on any server.

        ``offers``: only the tools it admits (a server's ``ToolSelection.offers``); all by default.
        """
        bound: list[Tool] = []
        for spec in self._specs.values():
            if offers is not None and not offers(spec):
                continue
            method = getattr(toolset, spec.name)
            entry = _spread(method, _entry(spec, method, toolset.services))
            advertised = _advertised(method, toolset.services.settings)
            if advertised:
                tool = Tool.from_tool(_parsed(spec, method, entry), transform_args=advertised)
                bound.append(_listed_lean(tool))
            else:
                bound.append(_parsed(spec, method, entry, lean=True))
        return bound


# What parsing a tool method gives (its input and output schemas, description, type adapters)
# depends on the class's method alone, not on the toolset it is bound to, and it was most of
# building a server: about 0.1 s of CPU for the memory tools, paid by every process start and
# every server a test builds. So each method is parsed once per process; every bind copies the
# parsed tool with its own entry, the only part that holds the toolset's services. Keyed by the
# class's function and whether the copy is the lean listing (a tool whose advertised schema
# depends on the settings is transformed after the copy, per bind).
_PARSED: dict[tuple[Callable[..., Any], bool], FunctionTool] = {}


async def _unbound(**_: Any) -> None:
    raise RuntimeError("a parsed tool runs only as a copy bound to a toolset")


def _parsed(
    spec: ToolSpec,
    method: Callable[..., Awaitable[Any]],
    entry: Callable[..., Awaitable[Any]],
    *,
    lean: bool = False,
) -> FunctionTool:
    """The tool of ``method`` calling ``entry``: parsed once per method, then copied."""
    key = (getattr(method, "__func__", method), lean)
    parsed = _PARSED.get(key)
    if parsed is None:
        tool = Tool.from_function(entry, title=spec.title, annotations=spec.annotations())
        # Kept without this first toolset's entry, which would hold its services for good.
        tool = tool.model_copy(update={"fn": _unbound})
        parsed = _PARSED[key] = _listed_lean(tool) if lean else tool
    # As from_function prepares the function it is given (a Context parameter becomes a
    # dependency); the copy's schemas and adapters were built from the same signature.
    return parsed.model_copy(update={"fn": transform_context_annotations(entry)})


def _listed_lean(tool: T) -> T:
    """``tool`` listed with its lean schemas (:mod:`memory_tools.mcp.lean_schemas`).

    Only what ``tools/list`` shows changes: calls are validated from the method's signature.
    """
    return tool.model_copy(
        update={
            "parameters": lean_input_schema(tool.parameters),
            "output_schema": lean_output_schema(tool.output_schema),
        }
    )


def _entry(
    spec: ToolSpec, method: Callable[..., Awaitable[Any]], services: MemoryServices
) -> Callable[..., Awaitable[Any]]:
    """The bound method, its refusals turned into ``ToolError`` (and audited when denied)."""

    @functools.wraps(method)
    async def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            answer = await method(*args, **kwargs)
        except Refused as refused:
            raise await _refuse(services, spec, refused.caller, refused.failure) from None
        except ToolFailure as failure:
            raise await _refuse(services, spec, None, failure) from None
        if isinstance(answer, WireModel) and answer.thumbnails is not None:
            return _shown_with_thumbnails(answer, answer.thumbnails)
        if isinstance(answer, BulkAnswer):
            # Sent as its own dump: fastmcp would serialise it through the declared union
            # (``MoveResult | BulkAnswer[MoveResult]``), whose generic member is not the class
            # the runner built at run time. The listed schema names both shapes' fields.
            return ToolResult(structured_content=answer.model_dump(mode="json"))
        return answer

    return entry


def _spread_model(hint: Any) -> type[BaseModel] | None:
    """The model of a parameter annotated ``Annotated[Model, Spread()]``, else ``None``."""
    if get_origin(hint) is not Annotated:
        return None
    model, *metadata = get_args(hint)
    if not any(isinstance(item, Spread) for item in metadata):
        return None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"Spread needs a pydantic model, not {model!r}")
    return model


def _spread(
    method: Callable[..., Awaitable[Any]], entry: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    """``entry`` with each ``Spread`` parameter of ``method`` shown as its model's fields.

    The signature (what fastmcp builds the input schema from) has, in place of the parameter,
    one parameter per field, named by its alias and annotated as the model declares it; a call
    gathers those arguments back into the model. Without a ``Spread`` parameter: ``entry``.
    """
    hints = get_type_hints(method, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {}
    for name, parameter in inspect.signature(method).parameters.items():
        model = _spread_model(hints.get(name))
        if model is None:
            parameters.append(parameter.replace(annotation=hints.get(name, parameter.annotation)))
            continue
        declared = get_type_hints(model, include_extras=True)
        aliases: list[str] = []
        for field_name, info in model.model_fields.items():
            alias = info.alias or field_name
            aliases.append(alias)
            parameters.append(
                inspect.Parameter(
                    alias,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=info.get_default(call_default_factory=True),
                    annotation=declared[field_name],
                )
            )
        groups[name] = (model, tuple(aliases))
    if not groups:
        return entry

    @functools.wraps(entry)
    async def spread(**arguments: Any) -> Any:
        for name, (model, aliases) in groups.items():
            values = {alias: arguments.pop(alias) for alias in aliases if alias in arguments}
            arguments[name] = model.model_validate(values)
        return await entry(**arguments)

    signature = inspect.Signature(
        parameters, return_annotation=hints.get("return", inspect.Signature.empty)
    )
    spread.__signature__ = signature  # type: ignore[attr-defined]  # read by inspect.signature
    spread.__annotations__ = {p.name: p.annotation for p in parameters} | {
        "return": signature.return_annotation
    }
    return spread


def _shown_with_thumbnails(answer: WireModel, thumbnails: tuple[Thumbnail, ...]) -> ToolResult:
    """The answer as fastmcp would send it, followed by its results' thumbnails.

    The structured content, and the text block that repeats it, are exactly those of the
    declared return model (so the output schema holds); then, per result, a text line naming
    its ``assetId`` and its JPEG as MCP image content, or a line saying why it has none.
    """
    structured = answer.model_dump(mode="json")
    content: list[ContentBlock] = list(ToolResult(structured_content=structured).content)
    shown = sum(thumb.jpeg is not None for thumb in thumbnails)
    content.append(
        TextContent(
            type="text",
            text=f"Thumbnails: {shown} of {len(thumbnails)} result(s), each after the line "
            f"naming its {thumbnails[0].id_name if thumbnails else 'assetId'}.",
        )
    )
    for position, thumb in enumerate(thumbnails, start=1):
        named = f"{thumb.id_name} {thumb.asset_id}"
        if thumb.jpeg is None:
            line = f"Result {position}: {named}: no thumbnail ({thumb.missing})."
            content.append(TextContent(type="text", text=line))
            continue
        line = f"Result {position}: {named} ({thumb.width}x{thumb.height} JPEG):"
        content.append(TextContent(type="text", text=line))
        data = base64.b64encode(thumb.jpeg).decode("ascii")
        content.append(ImageContent(type="image", data=data, mime_type="image/jpeg"))
    return ToolResult(content=content, structured_content=structured)


def _advertised(method: Callable[..., Any], settings: MemorySettings) -> dict[str, ArgTransform]:
    """How each ``Advertised`` parameter of ``method`` is shown by a server with ``settings``."""
    transforms: dict[str, ArgTransform] = {}
    for name, hint in get_type_hints(method, include_extras=True).items():
        if get_origin(hint) is not Annotated:
            continue
        for metadata in get_args(hint)[1:]:
            if isinstance(metadata, Advertised):
                transforms[name] = metadata.describe(settings)
    return transforms


async def _refuse(
    services: MemoryServices, spec: ToolSpec, caller: Caller | None, failure: ToolFailure
) -> ToolError:
    log.info("tool_refused", tool=spec.name, code=failure.code)
    if failure.code == "forbidden" and caller is not None and spec.audited is not None:
        # The refused transaction rolled back; the denial is recorded on its own.
        async with services.database.unit_of_work() as uow:
            await uow.provenance.record(
                spec.audited,
                actor_identity=caller.identity,
                outcome="denied",
                detail={"tool": spec.name, "code": failure.code},
            )
    # The framework logs every tool error at the error's level: a refusal the caller can act
    # on is not a server error (``tool_refused`` above records it); only ``internal`` is.
    level = logging.ERROR if failure.code == "internal" else logging.DEBUG
    return ToolError(str(failure), log_level=level)
