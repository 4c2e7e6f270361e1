"""Named platforms for chatctl, as kubectl names clusters: a YAML file of contexts, one of
them current, each with a platform's addresses and where its credentials are.

    current: prod
    contexts:
      prod:
        scheduler: 127.0.0.1:50051     # e.g. through `kubectl port-forward`
        gateway: 127.0.0.1:50052
        tls_dir: ~/.config/chatctl/prod     # ca.crt, operator.crt, operator.key
        admin_token_file: ~/.config/chatctl/prod/admin-token
        token_file: ""                      # a user's token, for `chatctl chat`

The file is --contexts, else CHAT_CONTEXTS, else ~/.config/chatctl/contexts.yaml; the context
is --context, else CHAT_CONTEXT, else the file's current one. A flag or an environment variable
still wins over the context for each value, and the context over a `chatctl up` state dir.
Tokens stay in files of their own (0600), never in the contexts file.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clients.chatctl.output import CtlError, emit, table_or

CONTEXTS_ENV = "CHAT_CONTEXTS"
CONTEXT_ENV = "CHAT_CONTEXT"
DEFAULT_FILE = "~/.config/chatctl/contexts.yaml"


@dataclass(frozen=True)
class Context:
    scheduler: str = ""
    gateway: str = ""
    tls_dir: str = ""
    admin_token_file: str = ""
    token_file: str = ""


@dataclass(frozen=True)
class Contexts:
    current: str
    named: dict[str, Context]


FIELDS = [f.name for f in dataclasses.fields(Context)]


def contexts_file(args: argparse.Namespace) -> Path:
    chosen = getattr(args, "contexts", None) or os.environ.get(CONTEXTS_ENV) or DEFAULT_FILE
    return Path(chosen).expanduser()


def load(path: Path) -> Contexts:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return Contexts("", {})
    except (OSError, yaml.YAMLError) as error:
        raise CtlError(f"cannot read {path}: {error}") from error
    if not isinstance(raw, dict) or not isinstance(raw.get("contexts", {}), dict):
        raise CtlError(f"{path}: expected `current:` and a mapping `contexts:`")
    named = {}
    for name, values in (raw.get("contexts") or {}).items():
        values = values or {}
        unknown = set(values) - set(FIELDS) if isinstance(values, dict) else {"(not a mapping)"}
        if unknown:
            raise CtlError(f"{path}: context {name!r} has unknown fields {sorted(unknown)}; "
                           f"known: {', '.join(FIELDS)}")  # fmt: skip
        named[str(name)] = Context(**{k: str(v or "") for k, v in values.items()})
    return Contexts(str(raw.get("current") or ""), named)


def save(path: Path, contexts: Contexts) -> None:
    document: dict[str, Any] = {
        "current": contexts.current,
        "contexts": {name: dataclasses.asdict(c) for name, c in sorted(contexts.named.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(yaml.safe_dump(document, sort_keys=False))
    partial.replace(path)


def selected(args: argparse.Namespace) -> Context:
    """The context this command runs in; an empty one when none is named or current."""
    path = contexts_file(args)
    contexts = load(path)
    name = getattr(args, "context", None) or os.environ.get(CONTEXT_ENV) or contexts.current
    if not name:
        return Context()
    if name not in contexts.named:
        known = ", ".join(sorted(contexts.named)) or "none"
        raise CtlError(f"no context {name!r} in {path} (known: {known})")
    return contexts.named[name]


def read_token_file(path: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as error:
        raise CtlError(f"cannot read the token file {path}: {error}") from error


def context_command(args: argparse.Namespace) -> int:
    path = contexts_file(args)
    contexts = load(path)
    if args.action == "list":
        rows = [["*" if name == contexts.current else "", name, c.scheduler, c.gateway]
                for name, c in sorted(contexts.named.items())]  # fmt: skip
        value = {"current": contexts.current, "contexts": contexts.named}
        emit(args.json, value, table_or(("", "NAME", "SCHEDULER", "GATEWAY"), rows,
                                        f"no contexts in {path}"))  # fmt: skip
        return 0
    if args.action == "use":
        if args.name not in contexts.named:
            raise CtlError(f"no context {args.name!r} in {path}")
        save(path, Contexts(args.name, contexts.named))
        emit(args.json, {"current": args.name}, f"now using context {args.name}")
        return 0
    # set: the given fields over the context's current ones; the first context becomes current.
    before = contexts.named.get(args.name, Context())
    given = {f: getattr(args, f) for f in FIELDS if getattr(args, f) is not None}
    after = dataclasses.replace(before, **given)
    named = {**contexts.named, args.name: after}
    save(path, Contexts(contexts.current or args.name, named))
    emit(args.json, after, f"context {args.name} saved in {path}")
    return 0


def add_context_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    command = commands.add_parser("context", help="named platforms (a cluster, a local one)")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    flags = argparse.ArgumentParser(add_help=False, parents=[common])
    where = f"the contexts file ({CONTEXTS_ENV}; default {DEFAULT_FILE})"
    flags.add_argument("--contexts", metavar="FILE", help=where)
    actions.add_parser("list", parents=[flags], help="every context; * marks the current one")
    use = actions.add_parser("use", parents=[flags], help="make a context the current one")
    use.add_argument("name", metavar="NAME")
    define = actions.add_parser("set", parents=[flags], help="create or change a context")
    define.add_argument("name", metavar="NAME")
    define.add_argument("--scheduler", metavar="HOST:PORT")
    define.add_argument("--gateway", metavar="HOST:PORT")
    define.add_argument("--tls-dir", dest="tls_dir", metavar="DIR",
                        help="ca.crt, operator.crt and operator.key")  # fmt: skip
    define.add_argument("--admin-token-file", dest="admin_token_file", metavar="FILE")
    define.add_argument("--token-file", dest="token_file", metavar="FILE")
    command.set_defaults(handler=context_command)
