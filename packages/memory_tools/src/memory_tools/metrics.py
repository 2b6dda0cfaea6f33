"""Process-local counters (prometheus-client), kept in one registry of their own.

Nothing exposes them yet: an endpoint can serve ``REGISTRY`` with
``prometheus_client.generate_latest(REGISTRY)``. Counters are per process; with
``serve --processes N`` each process counts its own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry(auto_describe=True)

SIGNED_READS_ISSUED = Counter(
    "memory_signed_reads_issued",
    "Signed read links handed out, by purpose: preview (inline) or original (a download).",
    ["purpose"],
    registry=REGISTRY,
)
SIGNED_READS_DENIED = Counter(
    "memory_signed_reads_denied",
    "Signed read links refused by the object route (bad, tampered or expired).",
    registry=REGISTRY,
)


def issued(purpose: str) -> float:
    """How many signed read links of ``purpose`` this process has handed out."""
    value = REGISTRY.get_sample_value("memory_signed_reads_issued_total", {"purpose": purpose})
    return value or 0.0


def denied() -> float:
    """How many signed read links this process's object route has refused."""
    return REGISTRY.get_sample_value("memory_signed_reads_denied_total") or 0.0


# --- reconciliation (memory_tools.reconcile) -----------------------------------------------------

RECONCILE_FINDINGS = Counter(
    "memory_reconcile_findings",
    "Reconciliation findings, by check and action: repaired, or reported only (a dry run, or "
    "nothing a reconciler can repair).",
    ["check", "action"],
    registry=REGISTRY,
)
