"""The admin API's check, one for every servicer that serves it (the scheduler's admin calls,
UserService and PromptCaptureService; a gateway's ReplayService): a call bears the admin
token, or is refused before it reads anything."""

from __future__ import annotations

import grpc

from domain.errors import PermissionDenied, Unauthenticated
from infra.bearer import bearer_from_metadata, same_secret


def check_admin(context: grpc.aio.ServicerContext, admin_token: str) -> None:
    token = bearer_from_metadata(context.invocation_metadata())
    if token is None:
        raise Unauthenticated("admin calls need 'authorization: Bearer <admin token>'")
    # No admin token configured: nobody may use the admin API.
    if not admin_token or not same_secret(token, admin_token):
        raise PermissionDenied("this token may not use the admin API")
