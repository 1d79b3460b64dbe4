"""Settings come from ``TASKHUB_*`` variables; an unusable value stops the hub at start."""

import pytest
from pydantic import ValidationError

from app.settings import Settings


@pytest.mark.parametrize(
    ("raw", "categories"),
    [("a, b,,c", ["a", "b", "c"]), ('["x", "y"]', ["x", "y"]), ("c" * 64, ["c" * 64])],
)
def test_categories_are_a_comma_or_json_list(monkeypatch, raw, categories):
    monkeypatch.setenv("TASKHUB_ALLOWED_CATEGORIES", raw)
    assert Settings().allowed_categories == categories


@pytest.mark.parametrize("raw", ["c" * 65, "a:b", '["ok", ""]'])
def test_a_category_that_could_not_name_a_job_is_refused(monkeypatch, raw):
    monkeypatch.setenv("TASKHUB_ALLOWED_CATEGORIES", raw)
    with pytest.raises(ValidationError, match="a category is 1 to 64 characters"):
        Settings()
