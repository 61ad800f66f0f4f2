"""The two minimal SSE-forwarding reverse proxies that ``bench_http_stack.py`` compares.

Not a benchmark itself; each runs in its own process::

    python bench/_proxies.py aiohttp --upstream URL --port PORT
    python bench/_proxies.py starlette --upstream URL --port PORT [--uvicorn-http auto|httptools|h11]

Both do the same: read the request body, forward it (method, path, query, content type)
to the upstream over one pooled client, and answer with the upstream's status and content
type; an SSE reply is written back chunk by chunk as it arrives (no buffering, no
compression, ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no``), anything else
whole.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

LOOPBACK = "127.0.0.1"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# -- (a) aiohttp server + aiohttp client ---------------------------------------------------


def serve_aiohttp(port: int, upstream: str) -> None:
    from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

    async def on_startup(app: web.Application) -> None:
        app["client"] = ClientSession(
            connector=TCPConnector(limit=0),
            timeout=ClientTimeout(total=None),
            auto_decompress=False,
        )

    async def on_cleanup(app: web.Application) -> None:
        await app["client"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        client: ClientSession = request.app["client"]
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with client.request(
            request.method, upstream + request.rel_url.path_qs, data=body, headers=headers
        ) as up:
            kind = up.headers.get("Content-Type", "application/octet-stream")
            if not kind.startswith("text/event-stream"):
                data = await up.read()
                return web.Response(body=data, status=up.status, headers={"Content-Type": kind})
            reply = web.StreamResponse(
                status=up.status, headers={"Content-Type": kind, **SSE_HEADERS}
            )
            await reply.prepare(request)
            async for chunk in up.content.iter_any():
                await reply.write(chunk)
            await reply.write_eof()
            return reply

    app = web.Application()
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", forward)
    web.run_app(
        app, host=LOOPBACK, port=port, access_log=None, print=None, handler_cancellation=True
    )


# -- (b) starlette/uvicorn + httpx -----------------------------------------------------------


def serve_starlette(port: int, upstream: str, http: str) -> None:
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    clients: list[httpx.AsyncClient] = []

    def client() -> httpx.AsyncClient:
        if not clients:
            clients.append(
                httpx.AsyncClient(
                    base_url=upstream,
                    timeout=None,
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                    trust_env=False,
                )
            )
        return clients[0]

    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = {"Content-Type": request.headers.get("content-type", "application/json")}
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        sent = client().build_request(request.method, path, content=body, headers=headers)
        up = await client().send(sent, stream=True)
        kind = up.headers.get("content-type", "application/octet-stream")
        if not kind.startswith("text/event-stream"):
            data = await up.aread()
            await up.aclose()
            return Response(data, status_code=up.status_code, headers={"Content-Type": kind})

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in up.aiter_raw():
                    yield chunk
            finally:
                await up.aclose()

        return StreamingResponse(
            chunks(),
            status_code=up.status_code,
            headers={"Content-Type": kind, **SSE_HEADERS},
        )

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])
    uvicorn.run(
        app,
        host=LOOPBACK,
        port=port,
        http=http,
        loop="asyncio",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )


def uvicorn_http(choice: str) -> str:
    if choice != "auto":
        return choice
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stack", choices=["aiohttp", "starlette"])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--uvicorn-http", default="auto", choices=["auto", "httptools", "h11"])
    args = parser.parse_args()
    if args.stack == "aiohttp":
        serve_aiohttp(args.port, args.upstream)
    else:
        serve_starlette(args.port, args.upstream, uvicorn_http(args.uvicorn_http))


if __name__ == "__main__":
    main()
