"""How a call's waits for an asset's state ended: by a notification or by its deadline.

Asserting this replaces measuring how long a call took: a wait that a notification ended is
over before its deadline by construction, however slow the machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest

from memory_db.repositories.asset_states import StateSubscription


@dataclass
class Waits:
    """Each time a call waited for a change of state, and how that wait ended."""

    began: anyio.Event = field(default_factory=anyio.Event)  # set when a call first waits
    entered: int = 0  # waits begun so far
    # "notified": a change (or a new listener) ended it; "cancelled": its deadline did (or
    # the caller's cancellation: get_asset_waiting cancels a wait for nothing else).
    ended: list[str] = field(default_factory=list)


def record_waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    """Record every ``StateSubscription.changed`` wait from now to the end of the test."""
    seen = Waits()
    changed = StateSubscription.changed

    async def recorded(subscription: StateSubscription) -> None:
        seen.entered += 1
        seen.began.set()
        try:
            await changed(subscription)
        except anyio.get_cancelled_exc_class():
            seen.ended.append("cancelled")
            raise
        seen.ended.append("notified")

    monkeypatch.setattr(StateSubscription, "changed", recorded)
    return seen
