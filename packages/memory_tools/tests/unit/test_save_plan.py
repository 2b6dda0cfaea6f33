"""The save plan's decisions, without a database: fused text, keys, charge, dedupe, intent."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import example, given, reject
from hypothesis import strategies as st

from memory_db import VaultScope, new_id
from memory_db.repositories.records import QuarantineReason
from memory_tools.errors import ConflictFailure, InvalidImage, InvalidInputFailure
from memory_tools.ingest.images import FORMATS, InspectedImage
from memory_tools.ingest.plan import (
    NO_FUSED_TEXT,
    SaveIntent,
    SaveOrder,
    SaveTarget,
    dedupe,
    fused_text,
    plan_save,
    repeat_key,
    source_url_hash,
)
from memory_tools.ingest.save import SaveRequest, describe, require_folder_project

VECTOR = 1024 * 2 + 8  # one halfvec of 1024 dimensions and its header
IMAGE = InspectedImage(
    format=FORMATS["png"],
    sha256="ab" * 32,
    bytes=5000,
    width=48,
    height=32,
    pages=1,
    orientation=1,
    preview=b"webp-preview-bytes",
    preview_width=48,
    preview_height=32,
)


def _fused(**given: Any) -> str | None:
    values: dict[str, Any] = {
        "title": None,
        "title_source": "caller",
        "alt_text": None,
        "description": None,
        "source_ref": {},
    }
    return fused_text(**(values | given))


def test_fused_text_takes_only_what_a_caller_or_a_page_said() -> None:
    assert _fused() is None
    assert _fused(title="Red kite") == "Red kite"
    # A derived title ("Image from host") says nothing about the picture.
    assert _fused(title="Image from example.com", title_source="derived") is None
    assert (
        _fused(
            title="Red kite",
            alt_text="a bird of prey",
            description="over the ridge",
            source_ref={"pageTitle": "Birds of Wales", "url": "https://x.test/kite.png"},
        )
        == "Red kite\na bird of prey\nover the ridge\nBirds of Wales"
    )


def test_fused_text_skips_blanks_repeats_and_non_text() -> None:
    assert _fused(alt_text="   ", description="", source_ref={"pageTitle": 7}) is None
    assert _fused(title="Kite", alt_text="Kite", description=" wings ") == "Kite\nwings"


def _order(intent: SaveIntent | None = None) -> SaveOrder:
    target = SaveTarget(
        scope=VaultScope("alice@example.com", "Library"),
        display_vault="Library",
        namespace_id=new_id("ans"),
        project_id=None,
        folder_id=None,
    )
    return SaveOrder(
        actor="bob@example.com",
        intent=intent or describe(SaveRequest(), source_kind="upload", data=b"x"),
        target=target,
        reservation_id=new_id("aur"),
        object_id=new_id("aob"),
    )


def test_without_text_the_plan_has_one_visual_vector_and_a_default_title() -> None:
    order = _order()
    plan = plan_save(order, b"png bytes", IMAGE, env_prefix="dev", vector_size=VECTOR)
    assert plan.text is None and plan.representations == ("visual",)
    assert plan.vector_bytes == VECTOR
    assert plan.title == "Image PNG 48x32"
    assert plan.metadata(deduplicated=False)["embedding"] == {"fused": NO_FUSED_TEXT}
    namespace, object_id = order.target.namespace_id, order.object_id
    assert plan.new_keys == (
        f"dev/tenants/{namespace}/objects/{object_id}/original.png",
        f"dev/tenants/{namespace}/objects/{object_id}/preview.webp",
    )
    assert plan.owner == "alice@example.com" and plan.order.actor == "bob@example.com"


def test_caller_text_adds_a_fused_vector_and_is_charged_for_it() -> None:
    intent = describe(SaveRequest(title="Kite", tags=["Birds"]), source_kind="upload")
    plan = plan_save(_order(intent), b"png", IMAGE, env_prefix="dev", vector_size=VECTOR)
    assert plan.text == "Kite" and plan.representations == ("visual", "fused")
    assert plan.title == "Kite"
    assert plan.charge(deduplicated=True) == 2 * VECTOR
    assert plan.charge(deduplicated=False) == 2 * VECTOR + 5000 + len(IMAGE.preview)
    metadata = plan.metadata(deduplicated=True)
    assert metadata["deduplicated"] is True and metadata["embedding"] == {"fused": "queued"}
    assert metadata["vectorBytes"] == 2 * VECTOR and metadata["titleSource"] == "caller"
    assert plan.provenance(deduplicated=False) == {
        "sourceKind": "upload",
        "bytes": 5000,
        "deduplicated": False,
        "representations": ["visual", "fused"],
    }


def test_a_url_without_a_title_is_named_after_its_host_and_not_fused() -> None:
    request = SaveRequest(source_url="https://user:pw@img.example.com/a.png?sig=1")
    intent = describe(
        request, source_kind="external_url", source_url="https://img.example.com/a.png"
    )
    assert (intent.title, intent.title_source) == ("Image from img.example.com", "derived")
    plan = plan_save(_order(intent), b"png", IMAGE, env_prefix="dev", vector_size=VECTOR)
    assert plan.title == "Image from img.example.com" and plan.text is None


@pytest.mark.parametrize(
    ("live", "recent", "quarantined", "expected"),
    [
        (True, False, None, "share"),
        (True, False, "unreadable", "share"),  # a usable copy wins over an old quarantine
        (True, False, "integrity", "share"),
        (False, True, None, "take_back"),
        (False, True, "unreadable", "take_back"),
        (False, False, None, "store"),
    ],
)
def test_dedupe_shares_takes_back_or_stores(
    live: bool, recent: bool, quarantined: QuarantineReason | None, expected: str
) -> None:
    assert dedupe(live=live, recently_deleted=recent, quarantined=quarantined) == expected


def test_a_repeated_scraper_save_returns_the_earlier_asset_whatever_the_owner_stores() -> None:
    for live, recent, quarantined in [
        (True, False, None),
        (False, True, None),
        (False, False, "unreadable"),
    ]:
        assert (
            dedupe(live=live, recently_deleted=recent, quarantined=quarantined, repeated=True)
            == "repeat"
        )


@pytest.mark.parametrize(
    ("source_kind", "source_url", "repeatable"),
    [
        ("scrape", "https://img.example.com/a.png", True),
        ("screenshot", "https://example.com/page", True),
        ("scrape", None, False),
        ("external_url", "https://img.example.com/a.png", False),  # a URL a caller names
        ("upload", None, False),
    ],
)
def test_only_scraper_saves_with_a_source_url_are_repeats(
    source_kind: Any, source_url: str | None, repeatable: bool
) -> None:
    intent = describe(SaveRequest(title="t"), source_kind=source_kind, source_url=source_url)
    key = repeat_key(replace(intent, artifact_id="art_x"), "cd" * 32)
    if not repeatable:
        assert key is None
        return
    assert key is not None and source_url is not None
    assert (key.source_url_hash, key.sha256, key.artifact_id) == (
        source_url_hash(source_url),
        "cd" * 32,
        "art_x",
    )


def test_an_artifact_save_records_its_artifact_in_the_asset_metadata() -> None:
    intent = replace(describe(SaveRequest(), source_kind="scrape"), artifact_id="art_1")
    plan = plan_save(_order(intent), b"png", IMAGE, env_prefix="dev", vector_size=VECTOR)
    assert plan.metadata(deduplicated=False)["artifactId"] == "art_1"
    plain = plan_save(
        _order(describe(SaveRequest(), source_kind="upload", data=b"png")),
        b"png",
        IMAGE,
        env_prefix="dev",
        vector_size=VECTOR,
    )
    assert "artifactId" not in plain.metadata(deduplicated=False)


def test_bytes_the_provider_could_not_read_are_refused_as_an_invalid_image() -> None:
    with pytest.raises(InvalidImage, match="could not read them"):
        dedupe(live=False, recently_deleted=False, quarantined="unreadable")


def test_bytes_whose_stored_copy_is_damaged_are_a_conflict_naming_the_repair() -> None:
    # The caller's bytes are fine: calling them unreadable would send them looking for a
    # problem in their image; what waits is an operator restoring the stored copy.
    with pytest.raises(ConflictFailure, match="missing or damaged") as refused:
        dedupe(live=False, recently_deleted=False, quarantined="integrity")
    assert "could not read" not in str(refused.value)


def test_the_fingerprint_is_what_makes_a_repeat_the_same_request() -> None:
    base = SaveRequest(title="Kite", tags=["a", "b"], idempotency_key="k1")

    def fingerprint(request: SaveRequest, data: bytes | None = b"img") -> str:
        return describe(request, source_kind="upload", data=data).fingerprint

    # Normalised fields: the same tags in another case or repeated, the title spaced out.
    assert fingerprint(base) == fingerprint(replace(base, tags=["A", "b", "a"], title=" Kite "))
    # The key itself is not part of it: a repeat carries the same key by definition.
    assert fingerprint(base) == fingerprint(replace(base, idempotency_key="k2"))
    different = [
        replace(base, title="Hawk"),
        replace(base, tags=["a"]),
        replace(base, vault="Work"),
        replace(base, description="over the ridge"),
        replace(base, project_id="prj_x"),
    ]
    assert len({fingerprint(r) for r in different} | {fingerprint(base)}) == 6
    assert fingerprint(base, b"other image") != fingerprint(base)


def test_an_intent_refuses_bad_metadata() -> None:
    with pytest.raises(InvalidInputFailure, match="projectId"):
        require_folder_project(SaveRequest(folder_id="fld_x"))
    with pytest.raises(InvalidInputFailure, match="title"):
        describe(SaveRequest(title="x" * 10_000), source_kind="upload")
    with pytest.raises(InvalidInputFailure):
        describe(SaveRequest(tags=["ok", "bad\x00tag"]), source_kind="upload")


@pytest.mark.parametrize(
    ("given", "kept", "title"),
    [
        ("IMG_0423.JPG", "IMG_0423.JPG", "IMG_0423"),
        ("harbour at dusk.jpeg", "harbour at dusk.jpeg", "harbour at dusk"),
        ("archive.tar.gz", "archive.tar.gz", "archive.tar"),
        # Paths, POSIX and Windows: only the base name is kept.
        ("/home/alice/Pictures/kite.png", "kite.png", "kite"),
        ("C:\\Users\\bob\\Desktop\\boat.webp", "boat.webp", "boat"),
        ("../../etc/passwd", "passwd", "passwd"),
        # Control characters are dropped, as from a title; spaces are collapsed in the title.
        ("sun\x07\x1bset\t\t  beach.png", "sunset\t\t  beach.png", "sunset beach"),
        # Nothing before the dot, or an extension that is not one: the name stays whole.
        (".jpg", ".jpg", ".jpg"),
        ("notes.final draft", "notes.final draft", "notes.final draft"),
        ("photo.", "photo.", "photo."),
        # No name at all.
        ("", None, None),
        ("   ", None, None),
        ("\x01\x02", None, None),
        ("a/b/", None, None),
        ("..", None, None),
        ("dir/.", None, None),
    ],
)
def test_a_file_name_is_kept_as_its_base_name_and_titles_an_untitled_image(
    given: str, kept: str | None, title: str | None
) -> None:
    intent = describe(SaveRequest(file_name=given), source_kind="upload")
    assert intent.file_name == kept
    plan = plan_save(_order(intent), b"png", IMAGE, env_prefix="dev", vector_size=VECTOR)
    assert plan.title == (title or "Image PNG 48x32")
    # A file name is never words of the image: it does not make a fused vector.
    assert intent.title_source == "derived" and plan.text is None


def test_a_very_long_file_name_is_cut_keeping_its_extension_and_the_title_bounded() -> None:
    intent = describe(SaveRequest(file_name="x" * 1000 + ".png"), source_kind="upload")
    assert intent.file_name == "x" * 251 + ".png"
    assert intent.title == "x" * 240
    no_extension = describe(SaveRequest(file_name="y" * 300), source_kind="upload")
    assert no_extension.file_name == "y" * 255
    with pytest.raises(InvalidInputFailure, match="fileName: at most 4096"):
        describe(SaveRequest(file_name="z" * 5000), source_kind="upload")
    with pytest.raises(InvalidInputFailure, match="fileName: must not contain a NUL"):
        describe(SaveRequest(file_name="a\x00.png"), source_kind="upload")


def test_a_callers_title_wins_over_the_file_name_which_wins_over_the_host() -> None:
    titled = describe(SaveRequest(title="Kite", file_name="IMG_1.jpg"), source_kind="upload")
    assert (titled.title, titled.title_source, titled.file_name) == ("Kite", "caller", "IMG_1.jpg")
    from_url = describe(
        SaveRequest(source_url="https://img.example.com/a.png", file_name="IMG_2.jpg"),
        source_kind="external_url",
        source_url="https://img.example.com/a.png",
    )
    assert from_url.title == "IMG_2"
    # The file name makes a repeat under one idempotency key a different request.
    base = SaveRequest(idempotency_key="k1")
    assert (
        describe(replace(base, file_name="a.png"), source_kind="upload").fingerprint
        != describe(base, source_kind="upload").fingerprint
    )


# What a caller can type into a name, a title or a tag (NUL is refused before any plan).
CALLER_TEXT = st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=40)


@example(
    owner="alice@example.com",
    actor="bob@example.com",
    vault="Holidays",
    file_name="C:\\Users\\alice\\DCIM\\IMG_0423.JPG",
    title="Pier at dusk",
    description="for alice@example.com",
    alt_text="a pier",
    tags=["pier"],
    fmt="png",
    env="production",
)
@given(
    owner=st.emails(),
    actor=st.emails(),
    vault=CALLER_TEXT,
    file_name=CALLER_TEXT,
    title=CALLER_TEXT,
    description=CALLER_TEXT,
    alt_text=CALLER_TEXT,
    tags=st.lists(CALLER_TEXT, max_size=3),
    fmt=st.sampled_from(sorted(FORMATS)),
    env=st.from_regex(r"[a-z0-9][a-z0-9-]{0,31}", fullmatch=True),
)
def test_a_saves_object_keys_hold_no_caller_value(
    owner: str,
    actor: str,
    vault: str,
    file_name: str,
    title: str,
    description: str,
    alt_text: str,
    tags: list[str],
    fmt: str,
    env: str,
) -> None:
    """docs/acceptance.md criterion 4: whatever a caller says in a save (who they are, whose
    vault, the file name, title, description, alt text, tags), the plan's object keys are built
    from the owner's namespace id and the server's object id only."""
    handle = f"{owner}/{vault}"
    request = SaveRequest(
        vault=handle,
        title=title,
        description=description,
        alt_text=alt_text,
        tags=tags,
        file_name=file_name,
    )
    try:
        intent = describe(request, source_kind="upload", data=b"image bytes")
    except InvalidInputFailure:
        reject()  # refused before any key is made (e.g. a tag of blanks only)
    namespace, object_id = new_id("ans"), new_id("aob")
    # A project and folder reach a save as their server ids, never by name.
    project, folder = new_id("apr"), new_id("afl")
    order = SaveOrder(
        actor=actor,  # a grantee saving into the owner's vault
        intent=replace(intent, project_id=project, folder_id=folder),
        target=SaveTarget(
            scope=VaultScope(owner, vault),
            display_vault=handle,
            namespace_id=namespace,
            project_id=project,
            folder_id=folder,
            caller_is_owner=False,
        ),
        reservation_id=new_id("aur"),
        object_id=object_id,
    )
    image = replace(IMAGE, format=FORMATS[fmt])
    plan = plan_save(order, b"image bytes", image, env_prefix=env, vector_size=VECTOR)
    shapes = (
        f"{env}/tenants/{{ns}}/objects/{{obj}}/original.{image.format.extension}",
        f"{env}/tenants/{{ns}}/objects/{{obj}}/preview.webp",
    )
    # Every caller value, as the plan holds it; one that is part of the fixed words of a key
    # ("tenants", "original.png", the environment) cannot tell a leak and is not looked for.
    said = [owner, actor, vault, handle, intent.file_name, intent.title, intent.description]
    said += [intent.alt_text, *intent.tags, project, folder, order.reservation_id]
    for key in plan.new_keys:
        without_ids = key.replace(namespace, "{ns}").replace(object_id, "{obj}")
        for value in said:
            if value and not any(value in shape for shape in shapes):
                assert value not in without_ids, f"{value!r} is in the object key {key!r}"
    assert (
        tuple(key.replace(namespace, "{ns}").replace(object_id, "{obj}") for key in plan.new_keys)
        == shapes
    )
