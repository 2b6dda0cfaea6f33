"""One call runner: every adapter runs a caller's action the same way, whatever the credential.

An MCP tool call, a web page's workflow call and a direct-upload route differ only in what the
caller presents: an API key (a bearer token, or the stdio server's ``MEMORY_API_KEY``) or a web
session's cookie. The call itself is the same for all of them:

1. what escapes is translated at one boundary (:func:`memory_tools.errors.map_failures`);
2. the call is admitted (``MemoryServices.call_admission``): past the limit it waits its turn,
   and past the admission wait it fails as ``busy`` without having done anything;
3. the credential is checked in the call's first unit of work, so a key revoked or a session
   ended meanwhile is refused on this very call;
4. the action runs: in that same transaction (:func:`invoke`), or outside any transaction for
   work that makes network calls and opens its own (:func:`invoke_as_caller`);
5. the thumbnails the answer asks for (``includeThumbnails``) are made after the commit, still
   within the admitted call (:func:`memory_tools.workflows.thumbnails.render`);
6. the call is counted for its key, and once a minute the counts gathered are written
   (:mod:`memory_tools.key_activity`).

A failure leaves as a ``ToolFailure``; each adapter answers it in its own protocol (a tool
error and an audited denial, an error page or flash, a JSON error). The credential keeps the
caller it was found to be, so a refusal after authentication can name who was refused.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from memory_db import MemoryDbError, UnitOfWork, get_logger
from memory_tools.access import Caller, authenticate
from memory_tools.errors import map_failures
from memory_tools.services import MemoryServices
from memory_tools.sessions import session_caller
from memory_tools.workflows import thumbnails

log = get_logger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# A workflow run in the call's transaction, and work that opens its own.
InTransaction = Callable[Concatenate[UnitOfWork, Caller, MemoryServices, P], Awaitable[T]]
AsCaller = Callable[Concatenate[Caller, P], Awaitable[T]]


class Credential(Protocol):
    """What a caller presents; :meth:`check` resolves it to the caller it acts as."""

    @property
    def caller(self) -> Caller | None:
        """The caller found by the last successful :meth:`check`; ``None`` before that."""
        ...

    async def check(self, uow: UnitOfWork) -> Caller:
        """The caller behind this credential; ``Unauthenticated`` when it is none of ours.

        One statement (or none, from the key cache): it may run outside a transaction.
        """
        ...


@dataclass
class ApiKey:
    """An API key as presented (``None``: none was sent): a tool call's or a route's bearer."""

    secret: str | None
    caller: Caller | None = field(default=None, init=False)

    async def check(self, uow: UnitOfWork) -> Caller:
        """The key's caller; unknown and revoked keys are ``Unauthenticated``."""
        self.caller = await authenticate(uow, self.secret)
        return self.caller


@dataclass
class WebSession:
    """A web session's cookie secret (``None``: no cookie): the caller its key acts as."""

    secret: str | None
    caller: Caller | None = field(default=None, init=False)

    async def check(self, uow: UnitOfWork) -> Caller:
        """The session's caller; an expired, ended or revoked session is ``Unauthenticated``."""
        self.caller = (await session_caller(uow, self.secret)).caller
        return self.caller


@asynccontextmanager
async def admitted(services: MemoryServices) -> AsyncGenerator[None]:
    """Steps 1 and 2: one failure boundary around one admitted turn.

    Also each item's turn of a bulk call (:mod:`memory_tools.workflows.bulk`).
    """
    with map_failures():
        async with services.call_admission.admit():
            yield


async def count_call(services: MemoryServices, caller: Caller) -> None:
    """Step 6: count the call; write the gathered counts when the oldest is a minute old.

    A failed write keeps the counts for the next call and never fails this one: the answer is
    committed already, and counts are not worth an error.
    """
    activity = services.key_activity
    activity.note(caller.key_id, calls=1)
    taken = activity.take_due()
    if not taken:
        return
    try:
        async with services.database.unit_of_work() as uow:
            await uow.api_keys.add_activity(taken)
    except MemoryDbError:
        activity.restore(taken)
        log.warning("key_activity_not_written", keys=len(taken), exc_info=True)


async def invoke(
    services: MemoryServices,
    credential: Credential,
    action: InTransaction[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``action(uow, caller, services, ...)`` for ``credential``'s caller in one transaction.

    The credential is checked in that transaction; a failure anywhere rolls it back.
    """
    async with admitted(services):
        async with services.database.unit_of_work() as uow:
            caller = await credential.check(uow)
            answer = await action(uow, caller, services, *args, **kwargs)
        await count_call(services, caller)
        return await thumbnails.render(services, answer)


async def invoke_as_caller(
    services: MemoryServices,
    credential: Credential,
    action: AsCaller[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``action(caller, ...)`` outside any transaction, admitted for the whole call.

    For work that must not hold a transaction open across network calls: ``action`` opens its
    own. The credential check is one statement, so it needs no transaction around it.
    """
    async with admitted(services):
        async with services.database.single_statements() as uow:
            caller = await credential.check(uow)
        answer = await action(caller, *args, **kwargs)
        await count_call(services, caller)
        return await thumbnails.render(services, answer)
