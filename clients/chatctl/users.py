"""`chatctl users ACTION`: users, their tiers and their bearer tokens (admin calls)."""

from __future__ import annotations

import argparse

from clients.admin_client import AdminClient
from clients.chatctl.addresses import admin_client
from clients.chatctl.output import emit, note, print_json, table_or, when, yes_no


async def users_create(admin: AdminClient, args: argparse.Namespace) -> None:
    created = await admin.create_user(args.user_id, args.tier, args.region or "", args.pinned)
    if args.json:
        print_json(created)
        return
    print(f"created user {created.user.user_id} ({created.user.tier})")
    print(f"token {created.token}")
    note("the token is shown once: the platform keeps only its hash")


async def users_list(admin: AdminClient, args: argparse.Namespace) -> None:
    found = await admin.users()
    rows = [[u.user_id, u.tier, yes_no(u.has_token), u.home_region or "-",
             yes_no(u.pinned), when(u.created_at)] for u in found]  # fmt: skip
    headers = ("USER", "TIER", "TOKEN", "HOME", "PINNED", "CREATED")
    emit(args.json, found, table_or(headers, rows, "no users"))


async def users_tier(admin: AdminClient, args: argparse.Namespace) -> None:
    user = await admin.set_tier(args.user_id, args.tier)
    emit(args.json, user, f"user {user.user_id} is now {user.tier}")


async def users_rotate(admin: AdminClient, args: argparse.Namespace) -> None:
    token = await admin.rotate_token(args.user_id)
    if args.json:
        print_json({"user_id": args.user_id, "token": token})
        return
    print(f"token {token}")
    note(f"{args.user_id}'s old token no longer works; this one is shown once")


async def users_revoke(admin: AdminClient, args: argparse.Namespace) -> None:
    await admin.revoke_tokens(args.user_id)
    emit(
        args.json,
        {"user_id": args.user_id, "revoked": True},
        f"user {args.user_id} has no working token now (`chatctl users rotate` issues one)",
    )


async def users_delete(admin: AdminClient, args: argparse.Namespace) -> None:
    await admin.delete_user(args.user_id)
    emit(
        args.json,
        {"user_id": args.user_id, "deleted": True},
        f"user {args.user_id} is deleted, with their conversations, ratings, captured prompts "
        "and memories",
    )


async def users_memories(admin: AdminClient, args: argparse.Namespace) -> None:
    found = await admin.export_memories(args.user_id)
    rows = [[m.memory_id, m.source, yes_no(m.pinned), when(m.updated_at), m.text] for m in found]
    headers = ("MEMORY", "SOURCE", "PINNED", "WRITTEN", "TEXT")
    emit(args.json, found, table_or(headers, rows, f"user {args.user_id} has no memories"))


async def users_forget(admin: AdminClient, args: argparse.Namespace) -> None:
    deleted = await admin.delete_memories(args.user_id, args.memory_ids)
    emit(
        args.json,
        {"user_id": args.user_id, "deleted": deleted},
        f"deleted {deleted} of user {args.user_id}'s memories",
    )


USER_ACTIONS = {
    "create": users_create,
    "list": users_list,
    "tier": users_tier,
    "rotate": users_rotate,
    "revoke": users_revoke,
    "delete": users_delete,
    "memories": users_memories,
    "forget": users_forget,
}


async def users(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        await USER_ACTIONS[args.action](admin, args)
    return 0
