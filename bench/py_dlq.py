"""The obvious script for dead letters, as a user writes it with nats-py (`bench/dlq`).

    py_dlq.py read   URL STREAM SUBJECT FIRST COUNT   # list COUNT letters from FIRST
    py_dlq.py replay URL STREAM SUBJECT FIRST COUNT   # republish them one by one

An ordered consumer reads the DLQ stream from sequence FIRST. `read` keeps what each
letter says (its Jetrelay-Dlq-* headers) and renders the list as JSON, as
`jetrelay dlq ls --json` does; `replay` republishes each letter's payload and original
headers (without Jetrelay-Dlq-* and Nats-*) to its original subject
(Jetrelay-Dlq-Subject) with a Nats-Msg-Id of its own, awaiting each PubAck. Prints one
JSON line: {"count": N, "connect_secs": S, "loop_secs": S} (the loop from creating the
consumer to the last letter handled).
"""

import asyncio
import json
import sys
import time

import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

DLQ_PREFIX = "jetrelay-dlq-"


async def main() -> None:
    mode, url, stream, subject, first, count = sys.argv[1:7]
    first, count = int(first), int(count)
    t0 = time.perf_counter()
    nc = await nats.connect(url)
    js = nc.jetstream()
    t1 = time.perf_counter()
    sub = await js.subscribe(
        subject,
        stream=stream,
        ordered_consumer=True,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first
        ),
    )
    done, entries = 0, []
    async for msg in sub.messages:
        headers = msg.headers or {}
        seq = msg.metadata.sequence.stream
        if mode == "read":
            entries.append(
                {
                    "dlq_seq": seq,
                    "stream": headers.get("Jetrelay-Dlq-Stream"),
                    "sequence": headers.get("Jetrelay-Dlq-Sequence"),
                    "subject": headers.get("Jetrelay-Dlq-Subject", msg.subject),
                    "status": headers.get("Jetrelay-Dlq-Status"),
                    "reason": headers.get("Jetrelay-Dlq-Reason"),
                    "time": headers.get("Jetrelay-Dlq-Time"),
                    "bytes": len(msg.data),
                }
            )
        else:
            own = {
                k: v
                for k, v in headers.items()
                if not k.lower().startswith((DLQ_PREFIX, "nats-"))
            }
            own["Nats-Msg-Id"] = f"replay:{stream}:{seq}"
            await js.publish(
                headers.get("Jetrelay-Dlq-Subject", msg.subject), msg.data, headers=own
            )
        done += 1
        if done == count:
            break
    if mode == "read":
        json.dumps(entries)
    t2 = time.perf_counter()
    await sub.unsubscribe()
    await nc.close()
    print(
        json.dumps({"count": done, "connect_secs": t1 - t0, "loop_secs": t2 - t1}),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
