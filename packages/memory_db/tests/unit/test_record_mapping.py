"""Records are filled from ORM rows by field name (``repositories._base.record_from_row``).

The mapping is by name, so a record field its table does not have would fail only when that
row is first read; these tests catch it without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import pytest

from memory_db import schema
from memory_db.repositories import records
from memory_db.repositories._base import record_from_row

# Every record a repository fills with record_from_row, its table, and the fields its mapper
# gives itself (copied JSON values, or values the row does not hold).
MAPPED: list[tuple[type[Any], type[Any], set[str]]] = [
    (records.ObjectRecord, schema.AssetObject, set()),
    (records.AssetRecord, schema.Asset, {"source_ref", "tags", "metadata", "ocr"}),
    (records.ApiKeyRecord, schema.ApiKey, {"scopes"}),
    (records.VaultRecord, schema.Vault, {"permission"}),
    (records.GrantRecord, schema.VaultGrant, set()),
    (records.JobRecord, schema.AssetEmbeddingJob, {"usage"}),
    (records.ProjectRecord, schema.AssetProject, set()),
    (records.FolderRecord, schema.AssetFolder, set()),
    (records.ReservationRecord, schema.AssetUploadReservation, {"request"}),
    (records.ReconcileRunRecord, schema.ReconcileRun, set()),
    (records.ContextRecord, schema.AssetContext, {"context", "current"}),
    (records.ArtifactRecord, schema.ScrapeArtifact, {"source_ref"}),
    (records.ProvenanceRecord, schema.ProvenanceEvent, {"detail"}),
]


@pytest.mark.parametrize(
    ("record_type", "table", "given"), MAPPED, ids=[r.__name__ for r, _, _ in MAPPED]
)
def test_every_field_a_mapper_copies_is_a_column_of_its_table(
    record_type: type[Any], table: type[Any], given: set[str]
) -> None:
    # The mapped attributes, which getattr reads: not the column names (``metadata_`` holds the
    # column ``metadata``; ``row.metadata`` is SQLAlchemy's MetaData).
    attributes = set(table.__mapper__.attrs.keys())
    copied = {field.name for field in fields(record_type)} - given
    assert copied - attributes == set()


@dataclass(frozen=True)
class _Pair:
    name: str
    seen_at: datetime
    labels: list[str]


class _Row:
    def __init__(self) -> None:
        self.name = "a"
        self.seen_at = datetime(2026, 1, 2, tzinfo=UTC)
        self.labels = ["x"]
        self.unrelated = 1


def test_record_from_row_copies_by_name_and_given_fields_win() -> None:
    row = _Row()
    plain = record_from_row(_Pair, row)
    assert plain == _Pair("a", datetime(2026, 1, 2, tzinfo=UTC), ["x"])
    assert plain.labels is row.labels  # copied by reference unless the mapper copies it
    copied = record_from_row(_Pair, row, labels=list(row.labels))
    assert copied.labels == ["x"] and copied.labels is not row.labels


def test_record_from_row_refuses_a_row_without_a_field() -> None:
    row = _Row()
    del row.labels
    with pytest.raises(AttributeError, match="labels"):
        record_from_row(_Pair, row)
