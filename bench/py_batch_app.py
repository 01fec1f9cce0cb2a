"""The app of the batch benchmark (bench/batch): what a user would write in Python, one
aiohttp process answering at once. A batch request (header Jetrelay-Batch-Size) has its
JSON body parsed and gets 200 with an empty body (every message acked); a single
message has its body read and gets 200. GET /stats says how many messages and requests
came, and when the first and the last arrived (monotonic ns).

    py_batch_app.py <port>
"""

import asyncio
import json
import sys
import time

from aiohttp import web

stats = {"count": 0, "requests": 0, "first_count": 0, "first_ns": 0, "last_ns": 0}


async def deliver(request):
    body = await request.read()
    if "Jetrelay-Batch-Size" in request.headers:
        n = len(json.loads(body)["messages"])
    else:
        n = 1
    now = time.monotonic_ns()
    if stats["requests"] == 0:
        stats["first_ns"] = now
        stats["first_count"] = n
    stats["count"] += n
    stats["requests"] += 1
    stats["last_ns"] = now
    return web.Response()


async def get_stats(request):
    return web.json_response(stats)


async def main(port):
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/deliver", deliver)
    app.router.add_get("/stats", get_stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(port)).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
