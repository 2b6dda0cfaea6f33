"""Object keys (docs/design.md#object-keys) and opaque ids."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_db import InvalidStorageKey, is_valid_id, new_id
from memory_db.storage import (
    ParsedKey,
    build_artifact_key,
    build_object_key,
    content_type_for_key,
    namespace_prefix,
    parse_storage_key,
    served_as,
    validate_object_key,
    validate_storage_key,
)

KEY_RE = re.compile(
    r"^[a-z0-9][a-z0-9-]{0,31}/tenants/ans_[a-z2-7]{26}/objects/aob_[a-z2-7]{26}/"
    r"(original\.(jpg|png|webp|gif)|preview\.webp)$"
)


def test_ids_are_prefixed_unique_and_opaque() -> None:
    ids = {new_id("ast") for _ in range(2000)}
    assert len(ids) == 2000
    assert all(is_valid_id(i, "ast") for i in ids)
    assert not is_valid_id(next(iter(ids)), "aob")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ast_",
        "ast_" + "a" * 25,
        "ast_" + "A" * 26,
        "ast_" + "1" * 26,
        None,
        7,
        "xyz_" + "a" * 26,
    ],
)
def test_malformed_ids_are_rejected(value: object) -> None:
    assert not is_valid_id(value, "ast")


def test_unknown_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="prefix"):
        new_id("zzz")


@given(
    ext=st.sampled_from(["jpg", "png", "webp", "gif"]),
    variant=st.sampled_from(["original", "preview"]),
    env=st.from_regex(r"[a-z0-9][a-z0-9-]{0,31}", fullmatch=True),
)
def test_an_object_key_is_exactly_its_server_parts(ext: str, variant: str, env: str) -> None:
    """The builder takes server values only (env, namespace id, object id, variant); that a
    save's caller values never reach it is shown through the save plan, in memory_tools'
    ``test_save_plan.py::test_a_saves_object_keys_hold_no_caller_value``."""
    namespace, obj = new_id("ans"), new_id("aob")
    key = build_object_key(env, namespace, obj, variant, ext)  # type: ignore[arg-type]
    assert KEY_RE.fullmatch(key)
    assert validate_object_key(key) == key
    filename_part = "preview.webp" if variant == "preview" else f"original.{ext}"
    assert key == f"{env}/tenants/{namespace}/objects/{obj}/{filename_part}"


@given(st.text(max_size=200))
def test_arbitrary_strings_are_not_accepted_as_keys(value: str) -> None:
    if KEY_RE.fullmatch(value):
        return  # hypothesis found a string of the exact server shape: that one is valid
    with pytest.raises(InvalidStorageKey):
        validate_object_key(value)


@given(st.text(min_size=1, max_size=60))
def test_caller_values_cannot_stand_in_for_server_ids(value: str) -> None:
    with pytest.raises(InvalidStorageKey):
        build_object_key("production", value, new_id("aob"), "original", "png")
    with pytest.raises(InvalidStorageKey):
        build_object_key("production", new_id("ans"), value, "original", "png")


@pytest.mark.parametrize(
    ("env", "variant", "ext"),
    [
        ("Prod", "original", "png"),
        ("", "original", "png"),
        ("p/x", "original", "png"),
        ("p", "original", "svg"),
        ("p", "thumb", "png"),
        ("p", "original", "../png"),
    ],
)
def test_builder_rejects_bad_parts(env: str, variant: str, ext: str) -> None:
    with pytest.raises(InvalidStorageKey):
        build_object_key(env, new_id("ans"), new_id("aob"), variant, ext)  # type: ignore[arg-type]


def test_content_type_follows_the_key() -> None:
    ns, obj = new_id("ans"), new_id("aob")
    assert content_type_for_key(build_object_key("p", ns, obj, "original", "jpg")) == "image/jpeg"
    assert content_type_for_key(build_object_key("p", ns, obj, "preview")) == "image/webp"


def test_an_artifact_key_lives_under_its_owners_namespace_and_is_never_served() -> None:
    ns, art = new_id("ans"), new_id("art")
    key = build_artifact_key("p", ns, art, "gif")
    assert key == f"p/tenants/{ns}/artifacts/{art}/artifact.gif"
    assert key.startswith(namespace_prefix("p", ns))
    assert parse_storage_key(key) == ParsedKey("artifact", "p", ns, artifact_id=art)
    assert validate_storage_key(key) == key
    assert content_type_for_key(key) == "image/gif"
    with pytest.raises(InvalidStorageKey):
        validate_object_key(key)  # not an object: no signed link serves it
    with pytest.raises(InvalidStorageKey):
        served_as(key)


@pytest.mark.parametrize(
    ("namespace", "artifact", "ext"),
    [
        ("ans_x", None, "png"),
        (None, "aob_" + "a" * 26, "png"),
        (None, "../x", "png"),
        (None, None, "svg"),
    ],
)
def test_the_artifact_key_builder_takes_server_ids_only(
    namespace: str | None, artifact: str | None, ext: str
) -> None:
    with pytest.raises(InvalidStorageKey):
        build_artifact_key("p", namespace or new_id("ans"), artifact or new_id("art"), ext)


@pytest.mark.parametrize(
    "suffix",
    ["artifacts/art_x/artifact.png", "artifacts/{art}/artifact.svg", "artifacts/{art}/a.png"],
)
def test_only_built_artifact_keys_parse(suffix: str) -> None:
    key = f"p/tenants/{new_id('ans')}/" + suffix.format(art=new_id("art"))
    with pytest.raises(InvalidStorageKey):
        parse_storage_key(key)
