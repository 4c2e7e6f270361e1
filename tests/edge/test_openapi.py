"""The OpenAPI document at /openapi.json describes exactly the routes the edge serves."""

from __future__ import annotations

import aiohttp
import grpc
import schemathesis
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from edge.app import EdgeSettings, build_app
from edge.openapi import DOCUMENT

METHODS = {"GET", "POST", "DELETE", "PUT", "PATCH"}


async def registered_routes() -> set[tuple[str, str]]:
    # The channel is never called: only the routes are read.
    async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
        app = build_app(channel, EdgeSettings(), CollectorRegistry())
    # add_get also registers HEAD for each GET; the document describes the GET.
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method in METHODS and route.resource is not None
    }


def documented_routes() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in DOCUMENT["paths"].items()
        for method in item
        if method.upper() in METHODS
    }


async def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    registered, documented = await registered_routes(), documented_routes()
    assert registered - documented == set(), "routes the document does not describe"
    assert documented - registered == set(), "documented routes the edge does not serve"


def test_the_document_is_valid_openapi() -> None:
    # Loading validates it against the OpenAPI 3.1 schema; every operation must resolve.
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == len(documented_routes())


async def test_the_edge_serves_the_document() -> None:
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    server = TestServer(build_app(channel, EdgeSettings(), CollectorRegistry()))
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.make_url("/openapi.json")) as response:
                assert response.status == 200
                assert await response.json() == DOCUMENT
    finally:
        await server.close()
        await channel.close()
