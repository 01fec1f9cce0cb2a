"""The service benchmark's Python contender: what a user would write to answer NATS
requests from an HTTP app without jetrelay, with the installed natsio (the tools
venv's NATS client) and aiohttp: a queue subscription, each request POSTed to the app
in a task of its own (at most <in-flight> at once), the answer's body and
Content-Type sent back as the reply.

    py_service.py <nats-url> <subject> <http-url> <in-flight>
"""

import asyncio
import sys

import aiohttp
import natsio


async def main(url, subject, target, in_flight):
    nc = await natsio.connect(url)
    slots = asyncio.Semaphore(int(in_flight))
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=int(in_flight))
    ) as http:

        async def answer(msg):
            try:
                async with http.post(target, data=msg.data) as resp:
                    body = await resp.read()
                    headers = {}
                    if "Content-Type" in resp.headers:
                        headers["Content-Type"] = resp.headers["Content-Type"]
                    await msg.respond(body, headers=headers or None)
            finally:
                slots.release()

        sub = nc.subscribe(subject, queue="q")
        await nc.flush()
        print("ready", flush=True)
        tasks = set()
        async for msg in sub:
            if not msg.reply:
                continue
            await slots.acquire()
            t = asyncio.create_task(answer(msg))
            tasks.add(t)
            t.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
