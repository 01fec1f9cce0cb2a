"""The smallest app jetrelay can deliver to: Python's standard library only.

It prints each message it is given and answers 200; 400 for a body that says "bad"
(jetrelay dead-letters it); 503 on the first delivery of a body that says "flaky"
(jetrelay retries it after a delay). GET /health answers 200 once it listens, so
jetrelay (`http.health_url`) waits for it before the first pull. `python3
examples/app.py` listens on 127.0.0.1:8080, where config/quickstart.toml sends (PORT
changes the port).

With WEBHOOK_SECRET set (the `whsec_...` secret of jetrelay's `[http.signing]`), a
request whose Standard Webhooks signature does not verify is refused with 401: by the
specification's `standardwebhooks` package when it is installed, else by the few
lines of HMAC below.
"""

import base64
import hashlib
import hmac
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ.get("WEBHOOK_SECRET")


def signed(body: bytes, headers) -> bool:
    """Whether the request carries a valid signature (always, without a secret)."""
    if not SECRET:
        return True
    wanted = {n: headers.get(n, "") for n in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    try:
        from standardwebhooks import Webhook
    except ImportError:
        key = base64.b64decode(SECRET.removeprefix("whsec_"))
        if abs(time.time() - int(wanted["webhook-timestamp"] or 0)) > 300:
            return False
        content = f"{wanted['webhook-id']}.{wanted['webhook-timestamp']}.".encode() + body
        mac = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
        return any(hmac.compare_digest(f"v1,{mac}", s) for s in wanted["webhook-signature"].split())
    try:
        Webhook(SECRET).verify(body, wanted, json_parse=False)
        return True
    except Exception:
        return False


class App(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        delivered = self.headers.get("Nats-Delivered", "1")
        if not signed(body, self.headers):
            print("app <- a request without a valid signature -> 401", flush=True)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if b"bad" in body:
            status = 400
        elif b"flaky" in body and delivered == "1":
            status = 503
        else:
            status = 200
        # A NATS request (a `kind = "service"` source) has an endpoint, no sequence.
        seq = self.headers.get("Nats-Sequence")
        what = (
            f"seq={seq} delivered={delivered}"
            if seq is not None
            else f"request to {self.headers.get('Nats-Service-Endpoint')}"
        )
        # A route's own path (routes), and a CloudEvent in binary mode (http.format,
        # http.unwrap_cloudevents).
        where = "" if self.path in ("/", "/messages") else f" at {self.path}"
        event = "".join(
            f" {h}={self.headers[h]}" for h in ("ce-id", "ce-type") if h in self.headers
        )
        print(
            f"app <- {self.headers['Nats-Subject']} {what}"
            f" body={body.decode(errors='replace')!r} -> {status}{event}{where}",
            flush=True,
        )
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass  # the one line per message above is enough


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8080"))
    ThreadingHTTPServer(("127.0.0.1", port), App).serve_forever()
