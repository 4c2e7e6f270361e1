"""Checks a JSON reply of the edge against its own OpenAPI document's schema."""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from edge.openapi import DOCUMENT


def assert_conforms(schema_name: str, value: Any) -> None:
    """Raises jsonschema_rs.ValidationError, naming the first field that does not fit."""
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": DOCUMENT["components"]}
    jsonschema_rs.Draft202012Validator(schema).validate(value)
