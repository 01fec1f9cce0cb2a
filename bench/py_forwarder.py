"""Contender (e): what a user would write in Python: a natsio-pcgroups static member
that POSTs each message to the app with aiohttp and acks after a 2xx.

    py_forwarder.py <nats-url> <stream> <group> <member> <http-url>
"""

import asyncio
import sys
from datetime import timedelta

import aiohttp
import natsio
from natsio.jetstream import ConsumerConfig
from natsio.pcgroups import static_consume


async def main(url, stream, group, member, target):
    nc = await natsio.connect(url)
    js = nc.jetstream()
    async with aiohttp.ClientSession() as http:

        async def handle(msg):
            async with http.post(target, data=msg.data) as resp:
                if 200 <= resp.status < 300:
                    await msg.ack()
                else:
                    await msg.nak(delay=1.0)

        template = ConsumerConfig(ack_wait=timedelta(seconds=30), max_ack_pending=256)
        ctx = await static_consume(js, stream, group, member, handle, template)
        print("ready", flush=True)
        await ctx.wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
