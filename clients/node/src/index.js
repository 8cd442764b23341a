// Client for idemd (Node 20+, global fetch). See ../README.md and ../index.d.ts.
import {
  IdemdError, TransportError, errorFor, errorClasses, IdempotencyKeyInvalidError, InvalidRequestError,
} from './errors.js';

export * from './errors.js';

const USER_AGENT = 'idemd-node/0.1.0';

/** What to store for a claim: a status, headers and a body (JSON) or raw bytes (content). */
export class Outcome {
  constructor(status = 200, body = null, headers = undefined, content = undefined) {
    this.status = status;
    this.body = body;
    this.headers = headers;
    this.content = content;
  }
}

/** A handler's return value as an Outcome: an Outcome as it is, anything else a 200 JSON body. */
export function asOutcome(value) {
  return value instanceof Outcome ? value : new Outcome(200, value === undefined ? null : value);
}

function outcomeJson(o) {
  const out = { status: o.status };
  if (o.headers && Object.keys(o.headers).length) out.headers = { ...o.headers };
  if (o.content != null) out.body_base64 = Buffer.from(o.content).toString('base64');
  else if (o.body !== undefined && o.body !== null) out.body = o.body;
  return out;
}

/** The bytes of a stored response (JSON bodies compact UTF-8; empty → empty). */
export function responseBytes(response) {
  if (response.body_base64 != null) return Buffer.from(response.body_base64, 'base64');
  if (response.body === undefined || response.body === null) return Buffer.alloc(0);
  return Buffer.from(JSON.stringify(response.body), 'utf8');
}

const seg = (s) => {
  if (typeof s !== 'string' || s === '') throw new TypeError('a path segment must be a non-empty string');
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
};
/**
 * A caller key idemd would accept (1..255 bytes of 0x21-0x7E); anything else
 * throws the 400 idempotency_key_invalid idemd would answer, before sending.
 */
export function checkKey(key) {
  if (typeof key !== 'string') {
    throw new IdempotencyKeyInvalidError(400, 'idempotency_key_invalid', 'a caller key must be a string');
  }
  const n = Buffer.byteLength(key, 'utf8');
  if (n < 1 || n > 255) {
    throw new IdempotencyKeyInvalidError(400, 'idempotency_key_invalid', `a caller key is 1..255 bytes, got ${n}`);
  }
  if (!/^[\x21-\x7e]+$/.test(key)) {
    throw new IdempotencyKeyInvalidError(400, 'idempotency_key_invalid',
      'a caller key holds only visible ASCII (0x21-0x7E)');
  }
  return key;
}

/** The attempt of a complete/release/extend/checkpoint, else the 400 invalid_request idemd would answer. */
export function checkAttempt(attempt) {
  if (attempt === undefined || attempt === null) {
    throw new InvalidRequestError(400, 'invalid_request', 'field attempt is required (the attempt of the claim being finished)');
  }
  if (!Number.isInteger(attempt) || attempt < 1 || attempt > 2147483647) {
    throw new InvalidRequestError(400, 'invalid_request', 'field attempt must be an integer from 1 to 2147483647');
  }
  return attempt;
}

const etag = (v) => (typeof v === 'number' ? `"${v}"` : v);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Exceptions that are not Error instances (and AbortError) always release. */
function releases(err, releaseOn) {
  if (!(err instanceof Error) || err.name === 'AbortError') return true;
  return releaseOn(err);
}

function failureOutcome(err) {
  const name = err?.name && err.name !== 'Error' ? err.name : (err?.constructor?.name ?? 'Error');
  return new Outcome(500, { error: name });
}

export const defaultRetry = Object.freeze({ attempts: 4, baseDelayMs: 200, maxDelayMs: 5000 });

export class Client {
  /**
   * @param {object} options baseUrl, apiKey, timeoutMs (10000), retry
   *   ({attempts, baseDelayMs, maxDelayMs}), fetch (defaults to global fetch)
   */
  constructor({ baseUrl, apiKey, timeoutMs = 10000, retry = {}, fetch: fetchFn } = {}) {
    if (!baseUrl) throw new TypeError('baseUrl is required');
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.apiKey = apiKey;
    this.timeoutMs = timeoutMs;
    this.retry = { ...defaultRetry, ...retry };
    this.fetch = fetchFn ?? globalThis.fetch;
  }

  /** Whether ERR is retried: 409 request_in_progress, 429, 503, refused connection. */
  static retryable(err) {
    if (err instanceof TransportError) return !err.sent;
    return err instanceof IdemdError &&
      (err.status === 429 || err.status === 503 || err.code === 'request_in_progress');
  }

  /** Milliseconds to wait after the TRIES-th failed try: Retry-After plus full jitter. */
  delayMs(tries, err) {
    const window = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (tries - 1));
    return (err.retryAfter ?? 0) * 1000 + Math.random() * window;
  }

  async #exchange(method, path, { body, headers = {}, auth = true }) {
    const h = { 'user-agent': USER_AGENT, accept: 'application/json', ...headers };
    if (auth && this.apiKey) h.authorization = `Bearer ${this.apiKey}`;
    let payload;
    if (body !== undefined) {
      h['content-type'] = 'application/json';
      payload = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await this.fetch(this.baseUrl + path, {
        method, headers: h, body: payload, signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      const code = e?.cause?.code;
      throw new TransportError(`${method} ${path}: ${e?.cause?.message ?? e?.message ?? e}`,
        { sent: code !== 'ECONNREFUSED' && code !== 'ENOTFOUND', cause: e });
    }
    let text;
    try {
      text = await resp.text();
    } catch (e) {
      throw new TransportError(`${method} ${path}: reading the answer: ${e?.message}`, { cause: e });
    }
    const rh = {};
    resp.headers.forEach((v, k) => { rh[k] = v; });
    return { status: resp.status, headers: rh, text };
  }

  /** One API call with retries; returns {status, headers, json}. */
  async request(method, path, { body, headers, ok = [200], auth = true, retry = true, retryInProgress = true } = {}) {
    for (let tries = 1; ; tries++) {
      try {
        const r = await this.#exchange(method, path, { body, headers, auth });
        if (!ok.includes(r.status)) throw errorFor(r.status, r.headers, r.text);
        return { status: r.status, headers: r.headers, json: r.text ? JSON.parse(r.text) : null };
      } catch (err) {
        if (!retry || tries >= this.retry.attempts || !Client.retryable(err)) throw err;
        if (!retryInProgress && err.code === 'request_in_progress') throw err;
        await sleep(this.delayMs(tries, err));
      }
    }
  }

  async #json(method, path, opts) { return (await this.request(method, path, opts)).json; }

  // ---- tokens
  issue(operation, subject, { ttlSeconds } = {}) {
    return this.#json('POST', '/v1/tokens', { body: { operation, subject, ttl_seconds: ttlSeconds }, ok: [201] });
  }

  async issueMany(operation, subject, count, { ttlSeconds } = {}) {
    const r = await this.#json('POST', '/v1/tokens',
      { body: { operation, subject, ttl_seconds: ttlSeconds, count }, ok: [201] });
    return r.tokens;
  }

  introspect(token) { return this.#json('GET', `/v1/tokens/${seg(token)}`); }

  async revoke(token) { await this.request('DELETE', `/v1/tokens/${seg(token)}`, { ok: [204] }); }

  #claimed(r) {
    return { ...r.json, replayed: r.json?.state === 'completed' || r.headers['idempotent-replayed'] === 'true' };
  }

  static #claimArgs({ request, fingerprint, subject, ifMatch, wait, retryInProgress = true } = {}) {
    const body = {};
    if (request !== undefined) body.request = request;
    if (fingerprint !== undefined) body.fingerprint = fingerprint;
    if (subject !== undefined) body.subject = subject;
    const headers = {};
    if (ifMatch !== undefined && ifMatch !== null) headers['if-match'] = etag(ifMatch);
    if (wait !== undefined && wait !== null) headers.prefer = `wait=${wait}`;
    return { body, headers, ok: [200, 201], retryInProgress };
  }

  async claimToken(token, options = {}) {
    const { subject, ...rest } = options; // tokens carry their subject
    return this.#claimed(await this.request('POST', `/v1/tokens/${seg(token)}/claim`, Client.#claimArgs(rest)));
  }

  completeToken(token, attempt, outcome = {}) {
    return this.#json('POST', `/v1/tokens/${seg(token)}/complete`,
      { body: { attempt: checkAttempt(attempt), ...outcomeJson(toOutcome(outcome)) } });
  }

  releaseToken(token, attempt) {
    return this.#json('POST', `/v1/tokens/${seg(token)}/release`, { body: { attempt: checkAttempt(attempt) } });
  }

  /** A new lease for the current ATTEMPT (lease_seconds: at most, and by default, the operation's). */
  extendToken(token, attempt, { leaseSeconds } = {}) {
    return this.#json('POST', `/v1/tokens/${seg(token)}/extend`, { body: extendBody(attempt, leaseSeconds) });
  }

  /** Leaves a recovery point (phase [a-z0-9._-]{1,64}, data any JSON) for the next attempt. */
  checkpointToken(token, attempt, phase, data) {
    return this.#json('POST', `/v1/tokens/${seg(token)}/checkpoint`, { body: checkpointBody(attempt, phase, data) });
  }

  // ---- caller keys
  #keyPath(operation, key) { return `/v1/operations/${seg(operation)}/keys/${seg(checkKey(key))}`; }

  async claimKey(operation, key, options = {}) {
    return this.#claimed(await this.request('POST', this.#keyPath(operation, key) + '/claim',
      Client.#claimArgs(options)));
  }

  completeKey(operation, key, attempt, outcome = {}) {
    return this.#json('POST', this.#keyPath(operation, key) + '/complete',
      { body: { attempt: checkAttempt(attempt), ...outcomeJson(toOutcome(outcome)) } });
  }

  releaseKey(operation, key, attempt) {
    return this.#json('POST', this.#keyPath(operation, key) + '/release', { body: { attempt: checkAttempt(attempt) } });
  }

  getKey(operation, key) { return this.#json('GET', this.#keyPath(operation, key)); }

  extendKey(operation, key, attempt, { leaseSeconds } = {}) {
    return this.#json('POST', this.#keyPath(operation, key) + '/extend', { body: extendBody(attempt, leaseSeconds) });
  }

  checkpointKey(operation, key, attempt, phase, data) {
    return this.#json('POST', this.#keyPath(operation, key) + '/checkpoint',
      { body: checkpointBody(attempt, phase, data) });
  }

  async claimBatch(operation, items) {
    const r = await this.#json('POST', `/v1/operations/${seg(operation)}/claims`, { body: { items } });
    return r.items;
  }

  async completeBatch(operation, items) {
    const body = items.map((i) => (i.outcome
      ? { key: i.key, attempt: i.attempt, ...outcomeJson(toOutcome(i.outcome)) } : i));
    const r = await this.#json('POST', `/v1/operations/${seg(operation)}/completions`, { body: { items: body } });
    return r.items;
  }

  // ---- records

  /** A record by its 32-hex id (a claim's id, a token's id, a gateway's forwarded Idempotency-Key). */
  getRecord(id) { return this.#json('GET', `/v1/records/${seg(id)}`); }

  /** The record's audit trail, oldest first. */
  async recordEvents(id) { return (await this.#json('GET', `/v1/records/${seg(id)}/events`)).events; }

  /**
   * One page of records, newest claim first: {records, next_cursor}. Filters:
   * operation, state, subject, olderThan (seconds since the claim), limit
   * (1..500), cursor (a page's next_cursor; null on the last page).
   */
  listRecords({ operation, state, subject, olderThan, limit, cursor } = {}) {
    const q = new URLSearchParams();
    for (const [k, v] of [['operation', operation], ['state', state], ['subject', subject],
      ['older_than', olderThan], ['limit', limit], ['cursor', cursor]]) {
      if (v !== undefined && v !== null) q.append(k, String(v));
    }
    const qs = q.toString().replace(/\+/g, '%20');
    return this.#json('GET', '/v1/records' + (qs ? '?' + qs : ''));
  }

  /** Every record matching the filters, following the cursor page by page (pageSize per call). */
  async * iterRecords({ pageSize, ...filters } = {}) {
    let cursor = null;
    do {
      const page = await this.listRecords({ ...filters, limit: pageSize, cursor });
      yield* page.records;
      cursor = page.next_cursor;
    } while (cursor);
  }

  // ---- versions, operations, health
  getVersion(key) { return this.#json('GET', `/v1/versions/${seg(key)}`); }

  async bumpVersion(key, ifMatch) {
    const r = await this.#json('POST', `/v1/versions/${seg(key)}`, { headers: { 'if-match': etag(ifMatch) } });
    return r.version;
  }

  putOperation(name, policy) {
    return this.#json('PUT', `/v1/operations/${seg(name)}`, { body: policy, ok: [200, 201] });
  }

  getOperation(name) { return this.#json('GET', `/v1/operations/${seg(name)}`); }

  async listOperations() { return (await this.#json('GET', '/v1/operations')).operations; }

  health() { return this.#json('GET', '/healthz', { auth: false }); }

  ready() { return this.#json('GET', '/readyz', { auth: false, ok: [200, 503], retry: false }); }

  // ---- helpers

  /**
   * Runs FN at most once for a caller key ({operation, key}) or a token
   * ({token}). New claim: FN(claim) runs; its return value is stored (an
   * Outcome, or any JSON value as a 200 body) and the result is
   * {replayed: false, response, value}. Duplicate: FN does not run and the
   * result is {replayed: true, response} with the stored response. A
   * rejection for which releaseOn(err) is true (default: every Error)
   * releases the claim; any other stores a 500 {"error": name} as final.
   * Either way the error is rethrown.
   */
  async runOnce(target, fn, options = {}) {
    const { releaseOn = () => true, ...claimOptions } = options;
    const byToken = target.token !== undefined;
    const claim = byToken
      ? await this.claimToken(target.token, claimOptions)
      : await this.claimKey(target.operation, target.key, claimOptions);
    if (claim.replayed) return { replayed: true, response: claim.response, claim };
    const complete = (o) => (byToken ? this.completeToken(target.token, claim.attempt, o)
      : this.completeKey(target.operation, target.key, claim.attempt, o));
    const release = () => (byToken ? this.releaseToken(target.token, claim.attempt)
      : this.releaseKey(target.operation, target.key, claim.attempt));
    let value;
    try {
      value = await fn(claim);
    } catch (err) {
      try {
        if (releases(err, releaseOn)) await release();
        else await complete(failureOutcome(err));
      } catch { /* the error that matters is the handler's; the lease runs out */ }
      throw err;
    }
    const done = await complete(asOutcome(value));
    return { replayed: false, response: done.response, value, claim };
  }

  /**
   * Processes a batch of at-least-once messages exactly once each: one batch
   * claim of every message's key, HANDLER(message, claim) only for the new
   * ones (claim: the batch item, with the record's id to forward downstream
   * and the attempt for extend and checkpoint) (up to
   * `concurrency` at once), one batch completion, a release for each handler
   * that failed with releaseOn(err) true. Returns one outcome per message:
   * {message, key, outcome, retry, result?, response?, error?, status?, code?}
   * with outcome processed | replayed | in_progress | failed | rejected | lost.
   */
  async consume(operation, messages, { key, handler, request, fingerprint, subject,
    releaseOn = () => true, concurrency = 8 }) {
    if (!messages.length) return [];
    const keys = messages.map((m) => {
      const k = key(m);
      if (typeof k !== 'string') throw new TypeError('the key function must return a string');
      return k;
    });
    const first = new Map();
    const items = [];
    messages.forEach((m, i) => {
      if (first.has(keys[i])) return;
      first.set(keys[i], i);
      const item = { key: keys[i] };
      if (request) item.request = request(m);
      if (fingerprint) item.fingerprint = fingerprint(m);
      if (subject) item.subject = subject(m);
      items.push(item);
    });
    const claims = await this.claimBatch(operation, items);
    const done = new Map();
    const todo = [];
    for (const res of claims) {
      const i = first.get(res.key);
      const m = messages[i];
      if (res.status === 201) todo.push([i, res]);
      else if (res.status === 200) done.set(i, { message: m, key: res.key, outcome: 'replayed', retry: false, response: res.response, status: 200 });
      else if (res.code === 'request_in_progress') done.set(i, { message: m, key: res.key, outcome: 'in_progress', retry: true, status: res.status, code: res.code });
      else {
        const Cls = errorClasses[res.code] ?? IdemdError;
        done.set(i, { message: m, key: res.key, outcome: 'rejected', retry: res.status === 429 || res.status === 503,
          status: res.status, code: res.code, error: new Cls(res.status, res.code ?? null, 'batch claim item refused', { problem: res }) });
      }
    }
    const completions = [];
    const pending = new Map();
    const toRelease = [];
    let next = 0;
    const worker = async () => {
      while (next < todo.length) {
        const [i, res] = todo[next++];
        const m = messages[i];
        let o;
        try {
          const value = await handler(m, res);
          o = asOutcome(value);
          done.set(i, { message: m, key: res.key, outcome: 'processed', retry: false, result: value, attempt: res.attempt, status: 201 });
        } catch (err) {
          if (releases(err, releaseOn)) {
            done.set(i, { message: m, key: res.key, outcome: 'failed', retry: true, error: err, attempt: res.attempt, status: 201 });
            toRelease.push([res.key, res.attempt]);
            continue;
          }
          o = failureOutcome(err);
          done.set(i, { message: m, key: res.key, outcome: 'failed', retry: false, error: err, attempt: res.attempt, status: 201 });
        }
        completions.push({ key: res.key, attempt: res.attempt, outcome: o });
        pending.set(res.key, done.get(i));
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, todo.length)) }, worker));
    await Promise.all(toRelease.map(([k, a]) => this.releaseKey(operation, k, a).catch(() => {})));
    if (completions.length) {
      for (const r of await this.completeBatch(operation, completions)) {
        if (r.status !== 200 && pending.has(r.key)) {
          Object.assign(pending.get(r.key), { outcome: 'lost', retry: false, status: r.status, code: r.code });
        }
      }
    }
    return messages.map((m, i) => {
      const f = first.get(keys[i]);
      return f === i ? done.get(i) : { ...done.get(f), message: m };
    });
  }
}

function extendBody(attempt, leaseSeconds) {
  checkAttempt(attempt);
  return leaseSeconds === undefined || leaseSeconds === null ? { attempt } : { attempt, lease_seconds: leaseSeconds };
}

function checkpointBody(attempt, phase, data) {
  checkAttempt(attempt);
  return data === undefined ? { attempt, phase } : { attempt, phase, data };
}

function toOutcome(o) {
  if (o instanceof Outcome) return o;
  return new Outcome(o.status ?? 200, o.body ?? null, o.headers, o.content);
}
