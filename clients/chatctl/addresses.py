"""Where the platform is and who calls it: addresses, tokens and certificates for each command.

Each comes from its flag, else the environment (CHAT_SCHEDULER, CHAT_GATEWAY, CHAT_ADMIN_TOKEN,
CHAT_TOKEN, CHAT_TLS_DIR), else the context (clients/chatctl/contexts.py: a named platform,
such as a cluster), else the files `chatctl up` leaves in its state dir (platform.json,
admin-token, dev-tokens.json). chatctl shows the operator certificate of the TLS dir (ca.crt,
operator.crt, operator.key); with no TLS dir anywhere it talks plaintext.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clients.admin_client import AdminClient
from clients.chat_client import ChatClient
from clients.chatctl.contexts import read_token_file, selected
from clients.chatctl.output import CtlError
from clients.chatctl.platform import ADMIN_TOKEN_FILE, DEV_TOKENS_FILE, PLATFORM_FILE
from infra.tls import Role, TlsConfig


def state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir)


def read_state_json(path: Path) -> dict[str, Any]:
    """A JSON file of the state dir; {} where `chatctl up` has not written it (yet)."""
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise CtlError(f"cannot read {path}: {error}") from error


def read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def resolve(flag: str | None, env: str, fallback: Callable[[], str], what: str) -> str:
    value = flag or os.environ.get(env) or fallback()
    if not value:
        option = "--" + what.replace(" address", "").replace(" ", "-")
        raise CtlError(
            f"no {what}: pass {option}, set {env}, choose a context (`chatctl context`), "
            "or start a platform with `chatctl up`"
        )
    return value


def service_address(args: argparse.Namespace, service: str) -> str:
    """--scheduler or --gateway, CHAT_SCHEDULER or CHAT_GATEWAY, the context's, else
    platform.json's entry."""
    return resolve(
        getattr(args, service),
        f"CHAT_{service.upper()}",
        lambda: (
            getattr(selected(args), service)
            or str(read_state_json(state_dir(args) / PLATFORM_FILE).get(service, ""))
        ),
        f"{service} address",
    )


def admin_token(args: argparse.Namespace) -> str:
    return resolve(
        args.admin_token,
        "CHAT_ADMIN_TOKEN",
        lambda: (
            read_token_file(selected(args).admin_token_file)
            or read_secret(state_dir(args) / ADMIN_TOKEN_FILE)
        ),
        "admin token",
    )


def dev_token(args: argparse.Namespace, user: str) -> str:
    return str(read_state_json(state_dir(args) / DEV_TOKENS_FILE).get(user, ""))


def user_token(args: argparse.Namespace) -> str:
    """--token, else --user's dev token, else CHAT_TOKEN, else the context's token file, else
    the dev Free user's token."""
    if args.user:
        token = dev_token(args, args.user)
        if not token:
            raise CtlError(f"no {args.user} token in {state_dir(args) / DEV_TOKENS_FILE}")
        return token
    return resolve(
        args.token,
        "CHAT_TOKEN",
        lambda: read_token_file(selected(args).token_file) or dev_token(args, "free"),
        "token",
    )


def operator_tls(args: argparse.Namespace) -> TlsConfig | None:
    """--tls-dir, else CHAT_TLS_DIR, else the context's, else platform.json's tls_dir; None
    (plaintext) if none."""
    folder = (
        args.tls_dir
        or os.environ.get("CHAT_TLS_DIR")
        or selected(args).tls_dir
        or str(read_state_json(state_dir(args) / PLATFORM_FILE).get("tls_dir", ""))
    )
    return TlsConfig.in_folder(Path(folder).expanduser(), Role.OPERATOR) if folder else None


def admin_client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(
        service_address(args, "scheduler"), admin_token(args), tls=operator_tls(args)
    )


def chat_client(args: argparse.Namespace) -> ChatClient:
    return ChatClient(service_address(args, "gateway"), user_token(args), tls=operator_tls(args))
