"""Loads a service's config: dataclass defaults, then a YAML file, then environment overrides.

A field `grpc_listen` of the gateway is set by `gateway.grpc_listen` in the file or by the
environment variable `CHAT_GATEWAY_GRPC_LISTEN`. A field that is itself a dataclass is a nested
section: the gateway's `tls.ca_file` is `gateway.tls.ca_file` in the file, or
`CHAT_GATEWAY_TLS_CA_FILE`.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
# Marks a field neither the file nor the environment sets.
_ABSENT = object()


class ConfigError(ValueError):
    pass


def _coerce(name: str, raw: Any, kind: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        if raw is None or raw == "":
            return None
        return _coerce(name, raw, inner[0])
    if origin in (list, tuple):
        (item,) = typing.get_args(kind)[:1]
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return origin(_coerce(name, i, item) for i in items if i != "")
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind in (int, float, str):
            return kind(raw)
        if isinstance(kind, type) and issubclass(kind, str):
            return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"config field {name!r}: cannot read {raw!r} as {kind}") from exc
    return raw


def load_config(
    cls: type[T],
    section: str,
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> T:
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    if path:
        document = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        values.update(document.get(section) or {})
    return _build(cls, section, values, env, f"CHAT_{section.upper()}_")


def _build(
    cls: type[T], section: str, values: dict[str, Any], env: Mapping[str, str], prefix: str
) -> T:
    if not isinstance(values, dict):
        raise ConfigError(f"{section} must be a mapping of fields")
    hints = typing.get_type_hints(cls)
    # Every config class is a dataclass; T cannot be bound to one (no public protocol says so).
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown {section} config fields: {', '.join(sorted(unknown))}")
    coerced: dict[str, Any] = {}
    for name in known:
        kind = hints[name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            inner_prefix = f"{prefix}{name.upper()}_"
            # Absent from the file and the environment: the field's own default stands.
            if name in values or any(key.startswith(inner_prefix) for key in env):
                coerced[name] = _build(
                    kind, f"{section}.{name}", values.get(name) or {}, env, inner_prefix
                )
            continue
        raw = env.get(prefix + name.upper(), values.get(name, _ABSENT))
        if raw is not _ABSENT:
            coerced[name] = _coerce(name, raw, kind)
    return cls(**coerced)
