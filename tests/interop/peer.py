"""The interop peer: natsio-pcgroups (the Python implementation of partitioned
consumer groups) driven from the Rust integration tests.

    peer.py URL create-static STREAM GROUP N MEMBER...
    peer.py URL create-elastic STREAM GROUP N FILTER WILDCARDS   (WILDCARDS: 1,2 or -)
    peer.py URL add|drop STREAM GROUP MEMBER...
    peer.py URL config static|elastic STREAM GROUP     -> the config as Python reads it
    peer.py URL consume static|elastic STREAM GROUP MEMBER ACK_WAIT_MS MAX_ACK_PENDING MAX_DELIVER

`consume` prints one JSON line per message ({"subject", "body", "partition"}) after
acking it, and "ready" once joined; it runs until killed.
"""

import asyncio
import json
import sys
from datetime import timedelta

import natsio
from natsio.jetstream import ConsumerConfig
from natsio.pcgroups import (
    PartitioningFilter,
    add_members,
    create_elastic,
    create_static,
    delete_members,
    elastic_consume,
    get_elastic_config,
    get_static_config,
    static_consume,
)


def out(obj):
    print(json.dumps(obj) if not isinstance(obj, str) else obj, flush=True)


async def main(url, cmd, *args):
    nc = await natsio.connect(url)
    js = nc.jetstream()
    if cmd == "create-static":
        stream, group, n, *members = args
        await create_static(js, stream, group, int(n), None, members)
        out("ok")
    elif cmd == "create-elastic":
        stream, group, n, flt, wildcards = args
        w = [] if wildcards == "-" else [int(x) for x in wildcards.split(",")]
        await create_elastic(js, stream, group, int(n), [PartitioningFilter(filter=flt, partitioning_wildcards=w)])
        out("ok")
    elif cmd == "add":
        stream, group, *members = args
        out(await add_members(js, stream, group, members))
    elif cmd == "drop":
        stream, group, *members = args
        out(await delete_members(js, stream, group, members))
    elif cmd == "config":
        flavour, stream, group = args
        get = get_static_config if flavour == "static" else get_elastic_config
        config = await get(js, stream, group)
        out({"max_members": config.max_members, "members": list(config.members or [])})
    elif cmd == "consume":
        flavour, stream, group, member, ack_wait_ms, max_ack_pending, max_deliver = args
        template = ConsumerConfig(
            ack_wait=timedelta(milliseconds=int(ack_wait_ms)),
            max_ack_pending=int(max_ack_pending),
            max_deliver=int(max_deliver),
        )

        async def handle(msg):
            await msg.ack()
            out({"subject": msg.subject, "body": msg.data.decode(), "partition": msg.partition})

        consume = static_consume if flavour == "static" else elastic_consume
        ctx = await consume(js, stream, group, member, handle, template)
        out("ready")
        await ctx.wait()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
