// Express middleware: makes a route idempotent by token or by caller key,
// both taken from the Idempotency-Key header. Works with Express 4 and 5 (it
// uses only Node's request/response API).
import { createHash } from 'node:crypto';
import { IdemdError, IdempotencyKeyInvalidError, problemTitle } from './errors.js';
import { checkKey } from './index.js';

/** The headers that tell callers apart by default, as on the gateway's routes. */
export const DEFAULT_SCOPE_HEADERS = Object.freeze(['authorization', 'cookie']);

/** 32 hex digits naming the caller: SHA-256 over `name LF value LF` for each
 * of NAMES (lower-case, in order; an absent header has an empty value). */
export function callerScope(headers, names) {
  const h = createHash('sha256');
  for (const name of names) {
    const n = name.toLowerCase();
    let v = headers[n] ?? '';
    if (Array.isArray(v)) v = v.join(', ');
    h.update(Buffer.from(`${n}\n${v}\n`, 'latin1'));
  }
  return h.digest('hex').slice(0, 32);
}

/** KEY within the caller's scope: `<callerScope>:<key>`, so that the same key
 * from two callers is two records (NAMES empty: KEY as it is). */
export function scopedKey(key, headers, names = DEFAULT_SCOPE_HEADERS) {
  checkKey(key);
  if (!names.length) return key;
  const scoped = `${callerScope(headers, names)}:${key}`;
  if (scoped.length > 255) {
    throw new IdempotencyKeyInvalidError(400, 'idempotency_key_invalid',
      `a key is at most 222 bytes when scoped per caller (got ${key.length})`);
  }
  return scoped;
}

/** The refusal of a middleware that can never fill a guarded operation's
 * subject, or null. */
export function guardRefusal(policy, hasSubject) {
  const vk = policy?.version_key;
  if (hasSubject || typeof vk !== 'string' || !vk.includes('{subject}')) return null;
  return `idemd: operation ${policy.name} guards the version counter ${vk}, and this middleware ` +
    'has no subject: pass subject (a function of the request returning the caller\'s user id, ' +
    "from req.user, a header or a path parameter), or use by: 'token' (a token carries its subject)";
}

// Never stored: hop-by-hop, framing, CORS grants, cookies, and the headers
// idemd sets itself (it refuses them in a completion).
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization',
  'proxy-connection', 'te', 'trailer', 'trailers', 'transfer-encoding', 'upgrade']);
const NEVER = new Set(['content-length', 'set-cookie', 'idempotent-replayed', 'x-request-id', 'date']);

/** The headers of RES that may be stored and replayed. */
export function storableHeaders(headers) {
  const conn = Object.entries(headers).find(([k]) => k.toLowerCase() === 'connection');
  const named = String(conn?.[1] ?? '').toLowerCase().split(',').map((s) => s.trim()).filter(Boolean);
  const out = {};
  for (const [rawName, rawValue] of Object.entries(headers)) {
    const name = rawName.toLowerCase();
    if (HOP_BY_HOP.has(name) || NEVER.has(name) || name.startsWith('access-control-') || named.includes(name)) continue;
    if (rawValue === undefined) continue;
    const value = Array.isArray(rawValue) ? rawValue.join(', ') : String(rawValue);
    if (/[\x00-\x08\x0a-\x1f\x7f]/.test(value)) continue;
    out[name] = value;
  }
  return out;
}

/** The key of an Idempotency-Key header: bare, or an sf-string ("..."). */
export function parseIdempotencyKey(value) {
  if (value == null) return null;
  const v = String(value).trim();
  if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) {
    return v.slice(1, -1).replace(/\\(["\\])/g, '$1');
  }
  return v === '' ? null : v;
}

const isJson = (ct) => /^application\/([a-z0-9.+-]*\+)?json\b/i.test(ct ?? '');

function sendProblem(res, status, code, detail, headers = {}, problem = null) {
  const body = JSON.stringify(problem && problem.code === code ? problem
    : { type: `https://idemd.dev/problems/${code}`, title: problemTitle(status), status, detail, code });
  res.statusCode = status;
  for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
  res.setHeader('content-type', 'application/problem+json');
  res.setHeader('content-length', Buffer.byteLength(body));
  res.end(body);
}

/** Sends a stored response, marked Idempotent-Replayed: true. */
export function replay(res, stored) {
  res.statusCode = stored.status;
  for (const [k, v] of Object.entries(stored.headers ?? {})) res.setHeader(k, v);
  let body;
  if (stored.body_base64 != null) body = Buffer.from(stored.body_base64, 'base64');
  else if (stored.body !== undefined && stored.body !== null) {
    body = Buffer.from(JSON.stringify(stored.body), 'utf8');
    if (!res.getHeader('content-type')) res.setHeader('content-type', 'application/json; charset=utf-8');
  } else body = Buffer.alloc(0);
  res.setHeader('Idempotent-Replayed', 'true');
  res.setHeader('content-length', body.length);
  res.end(body);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function bytesIdentity(id, buf) {
  if (buf.length === 0) { id.body = null; return id; }
  const text = (() => { try { return utf8.decode(buf); } catch { return null; } })();
  if (text !== null) {
    try { id.json = JSON.parse(text); return id; } catch { /* not JSON */ }
    id.body = text;
  } else id.body_sha256 = createHash('sha256').update(buf).digest('hex');
  return id;
}

/**
 * What the middleware sends as a request's `request` (idemd fingerprints its
 * canonical JSON), the same shape as Go's and Spring's: method, path, query
 * (without the "?"), and the body: `json` when a parser left a JSON value in
 * req.body (express.json(), express.urlencoded()) or the raw body
 * (express.raw(), express.text()) is JSON, else `body` (the text, or null
 * when there is none) or `body_sha256` (bytes that are not UTF-8). So the
 * same JSON meaning is the same request, and another query is another one.
 */
export function requestIdentity(req) {
  const url = req.originalUrl ?? req.url ?? '/';
  const q = url.indexOf('?');
  const id = { method: req.method, path: q < 0 ? url : url.slice(0, q), query: q < 0 ? '' : url.slice(q + 1) };
  const b = req.body;
  if (Buffer.isBuffer(b) || b instanceof Uint8Array) return bytesIdentity(id, Buffer.from(b));
  if (typeof b === 'string') return bytesIdentity(id, Buffer.from(b, 'utf8'));
  // Express 4's body parsers leave {} when they parsed nothing (req._body unset)
  const placeholder = b !== null && typeof b === 'object' && !Array.isArray(b)
    && Object.keys(b).length === 0 && req._body !== true;
  if (b === undefined || b === null || placeholder) id.body = null;
  else id.json = b;
  return id;
}

/**
 * idempotent(client, options) → Express middleware.
 *
 * options.operation: the idemd operation (required with by: 'key').
 * options.by: 'key' (default; the Idempotency-Key value is a caller key) or
 *   'token' (it is an idemd token the backend issued).
 * options.header: where the key is ('Idempotency-Key').
 * options.request(req): what identifies the request (its fingerprint);
 *   default requestIdentity(req): method, path, query and body, as every
 *   middleware sends it; the same key with another request is 422.
 * options.subject(req): the subject (fills the operation's version_key;
 *   required for a guarded operation: see createIdempotent).
 * options.scopeHeaders: headers whose values, hashed, scope the key per
 *   caller (default ['authorization', 'cookie']; [] keeps the key as sent).
 * options.required: refuse a request without the header (400
 *   idempotency_key_missing; default true) or let it through unprotected.
 * options.wait: seconds a duplicate waits for the first (Prefer: wait).
 * options.onError(err, req): called when a completion or release failed
 *   (the response is sent anyway).
 */
export function idempotent(client, options = {}) {
  const { operation, by = 'key', header = 'Idempotency-Key', required = true, wait,
    request = requestIdentity,
    subject, scopeHeaders = DEFAULT_SCOPE_HEADERS, onError = () => {} } = options;
  if (by !== 'key' && by !== 'token') throw new TypeError("by must be 'key' or 'token'");
  if (by === 'key' && !operation) throw new TypeError('operation is required with by: key');
  const headerName = header.toLowerCase();

  return async function idempotentMiddleware(req, res, next) {
    const raw = parseIdempotencyKey(req.headers[headerName]);
    if (raw === null) {
      if (!required) return next();
      return sendProblem(res, 400, 'idempotency_key_missing', `the ${header} header is required`);
    }
    let key = raw;
    if (by === 'key') {
      try {
        key = scopedKey(raw, req.headers, scopeHeaders);
      } catch (err) {
        return sendProblem(res, err.status, err.code, err.detail);
      }
    }
    // A duplicate in progress is answered 409 at once (the caller retries),
    // unless `wait` asks idemd to hold it until the first one finishes.
    const claimOptions = { request: request(req), wait, retryInProgress: false };
    if (subject) claimOptions.subject = subject(req);
    let claim;
    try {
      claim = by === 'token' ? await client.claimToken(key, claimOptions)
        : await client.claimKey(operation, key, claimOptions);
    } catch (err) {
      if (err instanceof IdemdError && err.status && err.code) {
        const h = {};
        if (err.headers['retry-after']) h['retry-after'] = err.headers['retry-after'];
        if (err.headers.etag) h.etag = err.headers.etag;
        return sendProblem(res, err.status, err.code, err.detail, h, err.problem);
      }
      return next(err);
    }
    if (claim.replayed) return replay(res, claim.response);

    const settle = (o) => (by === 'token' ? client.completeToken(key, claim.attempt, o)
      : client.completeKey(operation, key, claim.attempt, o));
    const release = () => (by === 'token' ? client.releaseToken(key, claim.attempt)
      : client.releaseKey(operation, key, claim.attempt));

    // Hold the route's answer until idemd has stored it.
    const chunks = [];
    const { write, end, writeHead } = res;
    let finished = false;
    const restore = () => { res.write = write; res.end = end; res.writeHead = writeHead; };
    res.writeHead = function (status, reason, headers) {
      if (typeof reason !== 'string') headers = reason;
      res.statusCode = status;
      if (Array.isArray(headers)) {
        for (let i = 0; i + 1 < headers.length; i += 2) res.setHeader(headers[i], headers[i + 1]);
      } else if (headers) for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
      return res;
    };
    res.write = function (chunk, encoding, cb) {
      if (typeof encoding === 'function') { cb = encoding; encoding = undefined; }
      if (chunk != null) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding));
      if (cb) process.nextTick(cb);
      return true;
    };
    res.end = function (chunk, encoding, cb) {
      if (typeof chunk === 'function') { cb = chunk; chunk = undefined; }
      if (typeof encoding === 'function') { cb = encoding; encoding = undefined; }
      if (chunk != null) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding));
      if (finished) return res;
      finished = true;
      const body = Buffer.concat(chunks);
      const status = res.statusCode;
      (async () => {
        try {
          if (status >= 500) await release();
          else {
            const headers = storableHeaders(res.getHeaders());
            const o = { status, headers };
            if (body.length) {
              let parsed;
              if (isJson(headers['content-type'])) {
                try { parsed = JSON.parse(body.toString('utf8')); } catch { /* stored as bytes */ }
              }
              if (parsed !== undefined && parsed !== null) o.body = parsed;
              else o.content = body;
            }
            await settle(o);
          }
        } catch (err) {
          onError(err, req);
        }
        restore();
        if (!res.headersSent) {
          res.setHeader('Idempotent-Replayed', 'false');
          if (!res.hasHeader('transfer-encoding')) res.setHeader('content-length', body.length);
        }
        end.call(res, body, cb);
      })();
      return res;
    };
    // The client went away, or the route never answered: give the claim back.
    res.on('close', () => {
      if (!finished) {
        finished = true;
        restore();
        release().catch((err) => onError(err, req));
      }
    });
    next();
  };
}

/**
 * createIdempotent(client, options) → Promise of the middleware: reads the
 * operation's policy first and rejects when the operation guards a counter
 * by {subject} and options.subject is missing (with by: 'key'), so that a
 * misconfigured route stops the app at start, not at its first request.
 */
export async function createIdempotent(client, options = {}) {
  if ((options.by ?? 'key') === 'key' && options.operation) {
    let policy = null;
    try {
      policy = await client.getOperation(options.operation);
    } catch (err) {
      if (!(err instanceof IdemdError) || (err.status !== 404 && err.code !== 'operation_unknown'
          && err.status != null)) throw err;
    }
    const refusal = guardRefusal(policy, typeof options.subject === 'function');
    if (refusal) throw new TypeError(refusal);
  }
  return idempotent(client, options);
}

export default idempotent;
