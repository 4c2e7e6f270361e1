"""An MCP server for tests/tool_servers.py, run as its own process: serves a MCPServer over
streamable HTTP at /mcp with three tools, so gateway/mcp_tools.py is tested through a real
socket and the SDK's real server, never a scripted double.

    python tests/mcp_pages_server.py PORT PAGES_JSON

PAGES_JSON is a file holding {url: page text}: what fetch_page answers; a "*" entry answers
every other address (the simulated model draws its url from the schema, so a test cannot name
it beforehand).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def build(pages: dict[str, str]) -> MCPServer:
    server = MCPServer("pages")

    @server.tool()
    def fetch_page(url: str) -> str:
        """The text of the page at url."""
        if url not in pages and "*" in pages:
            return pages["*"]
        if url not in pages:
            # A ToolError keeps its text in the result (isError set); any other exception's
            # text stays on the server.
            raise ToolError(f"no page at {url}")
        return pages[url]

    @server.tool()
    def add(a: int, b: int) -> int:
        """a + b."""
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers "done" after seconds: for the caller's timeout."""
        await asyncio.sleep(seconds)
        return "done"

    return server


def main() -> None:
    port, pages_file = int(sys.argv[1]), Path(sys.argv[2])
    pages = json.loads(pages_file.read_text(encoding="utf-8"))
    build(pages).run("streamable-http", host="127.0.0.1", port=port, streamable_http_path="/mcp")


if __name__ == "__main__":
    main()
