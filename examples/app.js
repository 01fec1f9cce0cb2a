// The smallest app jetrelay can deliver to, in Node.js: node:http only, no packages.
//
// As examples/app.py: it prints each message it is given and answers 200; 400 for a
// body that says "bad" (jetrelay dead-letters it); 503 with `Retry-After: 1` on the
// first delivery of a body that says "flaky" (jetrelay retries it a second later).
// A request with a `Jetrelay-Batch-Size` header is the batch form
// (`delivery.batch_size` > 1): the same verdicts, one per message, as `results`.
// GET /health answers 200 once it listens. `node examples/app.js` listens on
// 127.0.0.1:8080, where config/quickstart.toml sends (PORT changes the port).
// With WEBHOOK_SECRET set (the `whsec_...` secret of jetrelay's `[http.signing]`), a
// request whose Standard Webhooks signature does not verify is refused with 401: the
// specification's algorithm in a few lines of node:crypto (the `standardwebhooks`
// package does the same, for an app that has packages).
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');

const SECRET = process.env.WEBHOOK_SECRET;

// Whether the request carries a valid signature (always, without a secret).
function signed(req, raw) {
  if (!SECRET) return true;
  const id = req.headers['webhook-id'] ?? '';
  const ts = req.headers['webhook-timestamp'] ?? '';
  if (Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false;
  const key = Buffer.from(SECRET.replace(/^whsec_/, ''), 'base64');
  const mac = crypto.createHmac('sha256', key).update(`${id}.${ts}.`).update(raw).digest();
  const want = Buffer.from(`v1,${mac.toString('base64')}`);
  return (req.headers['webhook-signature'] ?? '').split(' ').some((s) => {
    const got = Buffer.from(s);
    return got.length === want.length && crypto.timingSafeEqual(got, want);
  });
}

// Above `delivery.batch_max_bytes` (1 MiB by default) plus the batch's JSON.
const MAX_BODY = 16 * 1024 * 1024;

// One message's verdict: its status alone, its result in a batch.
function verdict(body, delivered) {
  if (body.includes('bad')) return { status: 400, result: { action: 'term' } };
  if (body.includes('flaky') && delivered === 1) {
    return { status: 503, result: { action: 'retry', retry_after_ms: 1000 } };
  }
  return { status: 200, result: { action: 'ack' } };
}

function show(subject, seq, delivered, body, outcome) {
  console.log(`app <- ${subject} seq=${seq} delivered=${delivered} body='${body}' -> ${outcome}`);
}

function one(req, res, body) {
  const delivered = Number(req.headers['nats-delivered'] ?? '1');
  const { status } = verdict(body, delivered);
  show(req.headers['nats-subject'], req.headers['nats-sequence'], delivered, body, status);
  if (status === 503) res.setHeader('Retry-After', '1');
  res.writeHead(status, { 'Content-Length': '0' }).end();
}

function batch(res, body) {
  let messages;
  try {
    ({ messages } = JSON.parse(body));
    if (!Array.isArray(messages)) throw new Error('no "messages" list');
  } catch (e) {
    res.writeHead(400).end(`not a batch: ${e.message}`);
    return;
  }
  const results = messages.map((m) => {
    const data = m.data ?? Buffer.from(m.data_base64 ?? '', 'base64').toString();
    const { result } = verdict(data, m.delivered);
    show(m.subject, m.sequence, m.delivered, data, result.action);
    return { id: m.id, ...result };
  });
  res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ results }));
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(req.url === '/health' ? 200 : 404, { 'Content-Length': '0' }).end();
    return;
  }
  const chunks = [];
  let size = 0;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) {
      res.writeHead(413, { Connection: 'close' }).end();
      req.destroy();
      return;
    }
    chunks.push(chunk);
  });
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    if (!signed(req, raw)) {
      console.log('app <- a request without a valid signature -> 401');
      res.writeHead(401, { 'Content-Length': '0' }).end();
      return;
    }
    const body = raw.toString();
    if (req.headers['jetrelay-batch-size'] !== undefined) batch(res, body);
    else one(req, res, body);
  });
});
server.listen(Number(process.env.PORT ?? 8080), '127.0.0.1');
