"""ADR-32 interop for a jetrelay service source, from natsio's own micro module.

Usage: micro.py NATS_URL SERVICE SUBJECT

Starts a natsio micro service ("ref", one endpoint like jetrelay's), sends one request
to it and one (with a header) to jetrelay's SUBJECT, asks both services' $SRV PING,
INFO and STATS, decodes jetrelay's answers with natsio's own entity types, and prints
one JSON line: the reply jetrelay sent, the key sets of both answers side by side, and
any field of jetrelay's answers natsio does not know.
"""

import asyncio
import json
import sys

from natsio import connect
from natsio.micro import InfoResponse, PingResponse, StatsResponse, add_service


async def main(url: str, service: str, subject: str) -> None:
    nc = await connect(url)

    async def create(req) -> None:
        await req.respond(b'{"ok":true}')

    ref = add_service(nc, name="ref", version="1.2.3")
    ref.add_endpoint("create", create, subject="ref.create")
    async with ref:
        await nc.request("ref.create", b"x", timeout=5)
        reply = await nc.request(subject, b"py", timeout=5, headers={"X-From": "python"})
        out = {
            "reply": reply.payload.decode(),
            "reply_headers": {k: reply.headers[k] for k in (reply.headers or {})},
            "shapes": {},
            "unknown": {},
        }
        for verb, model in (("PING", PingResponse), ("INFO", InfoResponse), ("STATS", StatsResponse)):
            theirs = json.loads((await nc.request(f"$SRV.{verb}.ref", b"", timeout=5)).payload)
            ours = json.loads((await nc.request(f"$SRV.{verb}.{service}", b"", timeout=5)).payload)
            decoded = model.from_wire(ours)
            out["unknown"][verb] = sorted(decoded.extra)
            shape = {"ref": sorted(theirs), "jetrelay": sorted(ours)}
            if "endpoints" in theirs:
                shape["ref_endpoint"] = sorted(theirs["endpoints"][0])
                shape["jetrelay_endpoint"] = sorted(ours["endpoints"][0])
                out["unknown"][verb + ".endpoint"] = sorted(decoded.endpoints[0].extra)
            out["shapes"][verb] = shape
    print(json.dumps(out), flush=True)
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
