"""Peak RSS of jetrelay's service source under a flood of large requests against a slow
app (30 s per request, max_in_flight = 4): 1500 requests of 256 KiB published at once,
each with a reply subject; prints, per wait bound, how many were shed (503 at once) and
jetrelay's peak and current RSS. Loopback only.

    python bench/py_service_flood.py <jetrelay binary> <nats-server binary> [labels...]

FLOOD_N and FLOOD_KIB change the count and size (1500 and 256 by default).
"""
import asyncio, os, subprocess, sys, tempfile, time
import natsio as nats
from natsio.errors import NoRespondersError
from aiohttp import web

BIN, NATS = sys.argv[1], sys.argv[2]
N = int(os.environ.get("FLOOD_N", "1500"))
SIZE = int(os.environ.get("FLOOD_KIB", "256")) * 1024

async def slow(req):
    await req.read()
    await asyncio.sleep(30)
    return web.Response(text="ok")

async def run(label, extra):
    d = tempfile.mkdtemp()
    ns = subprocess.Popen([NATS, "-p", "14299", "-a", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    app = web.Application(); app.router.add_post("/{t:.*}", slow)
    runner = web.AppRunner(app); await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 18299).start()
    await asyncio.sleep(0.5)
    cfg = os.path.join(d, "c.toml")
    open(cfg, "w").write(f"""
[nats]
servers = "nats://127.0.0.1:14299"
[http]
url = "http://127.0.0.1:18299"
timeout_ms = 60000
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
[delivery]
max_in_flight = 4
{extra}
[sources.rpc]
kind = "service"
service = "flood"
endpoints = [{{ name = "e", subject = "flood.e", path = "/e" }}]
""")
    jr = subprocess.Popen([BIN, "run", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nc = await nats.connect("nats://127.0.0.1:14299")
    # ready: one request gets through to the app (no "no responders")
    while True:
        try:
            await nc.request("flood.e", b"x", timeout=0.2)
        except NoRespondersError:
            await asyncio.sleep(0.2); continue
        except Exception:
            break
        break
    shed = 0
    sub = nc.subscribe("back.>", pending_msgs_limit=100000, pending_bytes_limit=1<<30)
    payload = b"p" * SIZE
    for i in range(N):
        await nc.publish("flood.e", payload, reply=f"back.{i}")
    await nc.flush()
    t0 = time.time()
    while time.time() - t0 < 6:
        try:
            m = await sub.next_msg(timeout=0.5)
            if m.headers and str(m.headers.get("Nats-Service-Error-Code")) == "503":
                shed += 1
        except Exception:
            pass
    hwm = [l for l in open(f"/proc/{jr.pid}/status") if l.startswith(("VmHWM", "VmRSS"))]
    print(f"{label:28} {N} x {SIZE//1024} KiB  shed(503)={shed:5}  " + "  ".join(x.split()[0] + x.split()[1] + "kB" for x in hwm), flush=True)
    await nc.close()
    jr.kill(); jr.wait(); ns.kill(); ns.wait(); await runner.cleanup()

CASES = {
    "default": ("bound (defaults 256/64MiB)", ""),
    "small": ("bound 32 / 8 MiB", "max_buffered = 32\nmax_buffered_bytes = 8388608"),
    "bytes": ("bound 100000 / 64 MiB", "max_buffered = 100000\nmax_buffered_bytes = 67108864"),
    "none": ("no bound (100000 / huge)", "max_buffered = 100000\nmax_buffered_bytes = 4294967296"),
}


async def main():
    for name in sys.argv[3:] or list(CASES):
        await run(*CASES[name])

asyncio.run(main())
