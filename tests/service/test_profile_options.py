"""The options an adapter sees: the profile's under the request's own, as sie-server
0.10.1's ``merge_runtime_options`` merges them (API.md §2.1)."""

from __future__ import annotations

import pytest

from sift_server.errors import InvalidInput
from sift_server.registry.catalog import Catalog, ModelSpec
from sift_server.service.common import profile_options


@pytest.fixture(scope="module")
def docling() -> ModelSpec:
    return Catalog.from_dirs([], check_weights=False).get("docling")


def test_the_profile_by_option_or_path(docling: ModelSpec) -> None:
    assert profile_options(docling, None, {}) == {}
    assert profile_options(docling, None, {"profile": "default"}) == {}
    assert profile_options(docling, None, {"profile": "ocr"}) == {"ocr": True}
    assert profile_options(docling, "ocr", {}) == {"ocr": True}
    assert profile_options(docling, "ocr", {"profile": "default", "x": 1}) == {"ocr": True, "x": 1}
    assert profile_options(docling, "ocr", {"profile": None}) == {"ocr": True}


def test_the_requests_options_win(docling: ModelSpec) -> None:
    assert profile_options(docling, None, {"profile": "ocr", "ocr": False}) == {"ocr": False}
    assert profile_options(docling, "ocr", {"ocr": False}) == {"ocr": False}


def test_the_profile_is_not_changed_by_a_request(docling: ModelSpec) -> None:
    profile_options(docling, "ocr", {"ocr": False, "extra": 1})
    assert docling.profiles["ocr"].options == {"ocr": True}


@pytest.mark.parametrize(
    ("path", "options", "message"),
    [
        (None, {"profile": "fast"}, "Unknown profile 'fast'; model 'docling' has the profiles default, ocr."),
        ("ocr", {"profile": "ocr"}, "Unknown profile 'ocr'; 'docling:ocr' has only the 'default' profile."),
        (None, {"profile": 7}, "Option 'profile' must be a non-empty string or null."),
        (None, {"profile": " "}, "Option 'profile' must be a non-empty string or null."),
    ],
)
def test_a_bad_profile_is_invalid_input(
    docling: ModelSpec, path: str | None, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        profile_options(docling, path, options)
    assert info.value.message == message


def test_a_model_without_profiles_keeps_its_message() -> None:
    spec = Catalog.from_dirs([], check_weights=False).get("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(InvalidInput, match=r"^Unknown profile 'sparse'; this model has only the 'default' profile\.$"):
        profile_options(spec, None, {"profile": "sparse"})
