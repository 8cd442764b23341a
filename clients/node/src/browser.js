/**
 * idemd/browser: submit a browser form (or any request) through an idemd gateway
 * route with an idempotency token, so that a double click, a flaky network
 * or an impatient retry still performs the operation once.
 *
 * A dependency-free ES module; it needs only fetch (every current browser,
 * and Node.js 18 or later for the object form of the target).
 *
 *   import { submitWithToken } from 'idemd/browser';   // or a copy of this file
 *
 *   form.addEventListener('submit', async (event) => {
 *     event.preventDefault();
 *     const result = await submitWithToken(form, {
 *       token: form.dataset.idempotencyToken,
 *       as: 'json',
 *       onStale: () => showReloadMessage(),
 *     });
 *     if (result.ok) showConfirmation(result.body);
 *   });
 *
 * What it does, in order:
 *   - reads the body once (a snapshot: every attempt sends the very same
 *     bytes, so idemd sees the same request fingerprint on a retry);
 *   - disables the form's submit controls and sets aria-busy while the
 *     request is in flight; a second call for the same form while the first
 *     is in flight returns the first call's promise (no second request);
 *   - sends the token in `Idempotency-Key` as an RFC 8941 sf-string, and
 *     `Prefer: wait=10` (option `waitSeconds`; 0: none), so that a duplicate
 *     of a submit still in flight waits for its answer instead of a 409;
 *   - retries network failures, per-attempt timeouts and the statuses of
 *     `retryOn` (409 request_in_progress, 429, 502, 503, 504) with
 *     exponential backoff and jitter, never sooner than the answer's
 *     `Retry-After`, always with the same token: idemd either runs the
 *     operation once or replays the stored outcome. An answer carrying
 *     `Idempotent-Replayed` (true or false) is the upstream's stored, final
 *     answer and is never retried, whatever its status;
 *   - reports a replay (`Idempotent-Replayed: true`) as success: the
 *     operation did happen, this answer is its stored response;
 *   - hands 412 (the page was rendered against data that has changed since,
 *     e.g. an order placed in another tab) to `onStale`, so that the page can
 *     ask the user to reload it and get a fresh token.
 *
 * The promise resolves with a {@link SubmitResult} for every final HTTP
 * answer (2xx, 412, other 4xx, 5xx not in retryOn) and rejects with an
 * {@link IdemdSubmitError} when it gives up (retries exhausted or aborted).
 *
 * @module idemd
 */

/** Statuses retried by default (with the same token). */
export const DEFAULT_RETRY_ON = Object.freeze([409, 429, 502, 503, 504]);

const DEFAULTS = Object.freeze({
  retries: 5,
  backoffMs: 250,
  maxBackoffMs: 8000,
  maxRetryAfterMs: 60000,
  timeoutMs: 30000,
  waitSeconds: 10,
});

/** Forms whose submit is in flight: form -> promise of its result. */
const inFlight = new WeakMap();

/**
 * The outcome of a submit that got a final HTTP answer.
 *
 * @typedef {Object} SubmitResult
 * @property {boolean} ok        2xx, a replay included
 * @property {number} status     the HTTP status (for a replay: the stored one)
 * @property {boolean} replayed  `Idempotent-Replayed: true`: the stored
 *                               response of an earlier submit of this token
 * @property {boolean} stored    the answer carries Idempotent-Replayed (true
 *                               or false): the upstream's stored, final
 *                               answer, never retried whatever its status
 * @property {boolean} stale     412: the token's version is stale; reload
 * @property {*} body            parsed JSON when the answer is JSON, else text
 * @property {?Object} problem   the RFC 9457 problem for an
 *                               application/problem+json answer, else null
 * @property {Headers} headers   the answer's headers (those CORS exposes)
 * @property {number} attempts   requests sent, this one included
 * @property {Response} response the final fetch Response (body consumed)
 */

/**
 * Information passed to `onRetry` before each wait.
 *
 * @typedef {Object} RetryInfo
 * @property {number} attempt  the attempt that failed (1 = the first)
 * @property {number} delayMs  how long the helper waits before the next one
 * @property {?number} status  the retried status, or null for a network error
 * @property {*} error         the network error, or null
 */

/**
 * A request described without a form element.
 *
 * @typedef {Object} RequestTarget
 * @property {string} url
 * @property {string} [method='POST']
 * @property {*} [body]  a string, URLSearchParams, FormData, Blob,
 *                       ArrayBuffer or typed array, or any other value (sent
 *                       as JSON with Content-Type: application/json)
 * @property {Object<string,string>|Headers} [headers]
 */

/**
 * Options of {@link submitWithToken}.
 *
 * @typedef {Object} SubmitOptions
 * @property {string} [token]  the idemd token; for a form, defaults to its
 *   `data-idempotency-token` attribute
 * @property {number} [retries=5]  retries after the first attempt
 * @property {number} [backoffMs=250]  base delay: attempt n waits between
 *   half and all of backoffMs * 2^(n-1), capped at maxBackoffMs
 * @property {number} [maxBackoffMs=8000]
 * @property {number} [maxRetryAfterMs=60000]  longest Retry-After honoured
 * @property {number} [timeoutMs=30000]  per attempt; a timed-out attempt is
 *   retried like a network failure (0: no timeout)
 * @property {number[]} [retryOn]  statuses retried (default DEFAULT_RETRY_ON)
 * @property {'form'|'json'} [as]  how a form's fields are sent: 'form' (the
 *   default) as the form itself would (urlencoded, or multipart when its
 *   enctype says so), 'json' as one JSON object (a repeated name gives an
 *   array)
 * @property {string} [url]  overrides the form's action
 * @property {string} [method]  overrides the form's method
 * @property {Object<string,string>} [headers]  extra request headers
 * @property {HTMLElement} [submitter]  the button that submitted the form
 *   (its name=value is sent, as a browser would); default: none
 * @property {RequestCredentials} [credentials='same-origin']  'include' to
 *   send cookies to a gateway on another origin
 * @property {AbortSignal} [signal]  aborts the submit (no further retries)
 * @property {boolean} [reenable=false]  re-enable the submit controls after a
 *   success or a stale answer too (by default they stay disabled: the token
 *   is spent, another click could only replay the outcome)
 * @property {function(SubmitResult):void} [onStale]  called on 412
 * @property {function(SubmitResult):void} [onReplay]  called on a replay
 * @property {function(RetryInfo):void} [onRetry]  called before each wait
 * @property {typeof fetch} [fetch]  the fetch to use (tests, instrumentation)
 * @property {function():number} [random]  Math.random stand-in (tests)
 * @property {function(number):Promise<void>} [sleep]  waiting stand-in (tests)
 */

/**
 * Raised when the helper gives up: every attempt failed on the network, or
 * kept answering a retryable status, or the submit was aborted.
 */
export class IdemdSubmitError extends Error {
  /**
   * @param {string} message
   * @param {{attempts:number, result?:SubmitResult, cause?:*, aborted?:boolean}} info
   */
  constructor(message, info) {
    super(message);
    this.name = 'IdemdSubmitError';
    /** requests sent */
    this.attempts = info.attempts;
    /** the last HTTP answer when there was one (a 409 or 503, say) */
    this.result = info.result || null;
    /** the last network error when there was one */
    this.cause = info.cause;
    /** true when the caller's signal aborted the submit */
    this.aborted = Boolean(info.aborted);
  }
}

/**
 * Milliseconds to wait for a `Retry-After` value (delta-seconds or an HTTP
 * date), or null when absent or unparseable.
 *
 * @param {?string} value
 * @param {number} [now=Date.now()]
 * @returns {?number}
 */
export function parseRetryAfter(value, now = Date.now()) {
  if (value == null) return null;
  const v = String(value).trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  if (Number.isNaN(t)) return null;
  return Math.max(0, t - now);
}

/**
 * Exponential backoff with jitter: for the wait after attempt N (1-based), a
 * random delay between half and all of min(max, base * 2^(N-1)).
 *
 * @param {number} attempt
 * @param {number} baseMs
 * @param {number} maxMs
 * @param {function():number} [random=Math.random]
 * @returns {number}
 */
export function backoffDelay(attempt, baseMs, maxMs, random = Math.random) {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/**
 * Submits FORM_OR_REQUEST with the idempotency token, retrying with the same
 * token until it gets a final answer. See the module documentation.
 *
 * @param {HTMLFormElement|RequestTarget} target
 * @param {SubmitOptions} [options]
 * @returns {Promise<SubmitResult>}
 */
export function submitWithToken(target, options = {}) {
  if (isForm(target)) {
    const running = inFlight.get(target);
    if (running) return running;
    const p = submitForm(target, options);
    inFlight.set(target, p);
    const clear = () => inFlight.delete(target);
    p.then(clear, clear);
    return p;
  }
  return submitRequest(target, options);
}

function isForm(x) {
  return x != null && typeof x === 'object' && typeof x.tagName === 'string' &&
    x.tagName.toUpperCase() === 'FORM';
}

/* ------------------------------------------------------------- forms */

async function submitForm(form, options) {
  const token = options.token ?? form.dataset?.idempotencyToken;
  const method = String(options.method || form.getAttribute('method') || 'GET').toUpperCase();
  let url = options.url || form.action;
  let body;
  const fields = formFields(form, options.submitter);
  if (method === 'GET' || method === 'HEAD') {
    const u = new URL(url, baseURL());
    u.search = new URLSearchParams(fields.filter(([, v]) => typeof v === 'string')).toString();
    url = u.href;
  } else if (options.as === 'json') {
    body = fieldsToObject(fields);
  } else if (/multipart\/form-data/i.test(form.enctype || '')) {
    const fd = new FormData();
    for (const [k, v] of fields) fd.append(k, v);
    body = fd;
  } else {
    body = new URLSearchParams(fields.filter(([, v]) => typeof v === 'string'));
  }
  const controls = submitControls(form);
  const before = controls.map((c) => c.disabled);
  controls.forEach((c) => { c.disabled = true; });
  form.setAttribute('aria-busy', 'true');
  let keepDisabled = false;
  try {
    const result = await submitRequest({ url, method, body, headers: options.headers },
                                       { ...options, token });
    keepDisabled = !options.reenable && (result.ok || result.stale);
    return result;
  } finally {
    form.removeAttribute('aria-busy');
    if (!keepDisabled) controls.forEach((c, i) => { c.disabled = before[i]; });
  }
}

/** The form's [name, value] pairs, as a browser would submit them. */
function formFields(form, submitter) {
  let fd;
  try {
    fd = submitter ? new FormData(form, submitter) : new FormData(form);
  } catch (e) {
    fd = new FormData(form); // a browser without the submitter argument
  }
  return Array.from(fd.entries());
}

function fieldsToObject(fields) {
  const out = {};
  for (const [k, v] of fields) {
    if (typeof v !== 'string') throw new TypeError(`field "${k}" is a file: send the form as 'form'`);
    if (!Object.prototype.hasOwnProperty.call(out, k)) out[k] = v;
    else if (Array.isArray(out[k])) out[k].push(v);
    else out[k] = [out[k], v];
  }
  return out;
}

/** The controls that can submit FORM (buttons outside it with form=ID too). */
function submitControls(form) {
  return Array.from(form.elements || []).filter((el) => {
    const tag = el.tagName;
    const type = (el.getAttribute('type') || '').toLowerCase();
    if (tag === 'BUTTON') return type === '' || type === 'submit';
    if (tag === 'INPUT') return type === 'submit' || type === 'image';
    return false;
  });
}

function baseURL() {
  return (typeof document !== 'undefined' && document.baseURI) ||
    (typeof location !== 'undefined' && location.href) || undefined;
}

/* ------------------------------------------------------------- requests */

/**
 * Turns BODY into something fetch sends identically every time, and the
 * Content-Type it implies (null: let fetch decide, or none).
 */
async function snapshotBody(body) {
  if (body == null) return { bytes: undefined, type: null };
  if (typeof body === 'string') return { bytes: body, type: null };
  if (typeof URLSearchParams !== 'undefined' && body instanceof URLSearchParams) {
    return { bytes: body.toString(), type: 'application/x-www-form-urlencoded;charset=UTF-8' };
  }
  if (typeof FormData !== 'undefined' && body instanceof FormData) {
    // fetch would pick a new multipart boundary per attempt; serialise once
    const blob = await new Response(body).blob();
    return { bytes: blob, type: blob.type };
  }
  if (typeof Blob !== 'undefined' && body instanceof Blob) return { bytes: body, type: null };
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return { bytes: body, type: null };
  return { bytes: JSON.stringify(body), type: 'application/json' };
}

async function submitRequest(target, options) {
  const token = options.token;
  if (typeof token !== 'string' || token === '') {
    throw new TypeError('submitWithToken: no token (pass options.token or set data-idempotency-token)');
  }
  if (!target || !target.url) throw new TypeError('submitWithToken: no url');
  const retries = Math.max(0, options.retries ?? DEFAULTS.retries);
  const baseMs = options.backoffMs ?? DEFAULTS.backoffMs;
  const maxMs = options.maxBackoffMs ?? DEFAULTS.maxBackoffMs;
  const maxRetryAfter = options.maxRetryAfterMs ?? DEFAULTS.maxRetryAfterMs;
  const timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
  const retryOn = new Set(options.retryOn || DEFAULT_RETRY_ON);
  const random = options.random || Math.random;
  const sleep = options.sleep || ((ms) => waitFor(ms, options.signal));
  const doFetch = options.fetch || ((...args) => globalThis.fetch(...args));
  const signal = options.signal;

  const { bytes, type } = await snapshotBody(target.body);
  const headers = new Headers(target.headers || {});
  for (const [k, v] of Object.entries(options.headers || {})) headers.set(k, v);
  if (type && !headers.has('Content-Type')) headers.set('Content-Type', type);
  // an RFC 8941 sf-string: a token is URL-safe base64, nothing to escape
  headers.set('Idempotency-Key', `"${token}"`);
  // a duplicate of a submit still in flight waits for its answer instead of
  // getting 409 (Prefer: wait, RFC 7240); 0 turns it off
  const waitSeconds = Math.min(60, Math.max(0, options.waitSeconds ?? DEFAULTS.waitSeconds));
  if (waitSeconds > 0 && !headers.has('Prefer')) headers.set('Prefer', `wait=${waitSeconds}`);
  const method = String(target.method || 'POST').toUpperCase();

  let lastResult = null;
  let lastError = null;
  for (let attempt = 1; ; attempt++) {
    if (signal?.aborted) throw aborted(attempt - 1, lastResult, signal.reason);
    let response = null;
    let error = null;
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(signal.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = timeoutMs > 0 ? setTimeout(() => ctl.abort(new Error('timeout')), timeoutMs) : null;
    try {
      response = await doFetch(target.url, {
        method,
        headers,
        body: bytes,
        credentials: options.credentials || 'same-origin',
        signal: ctl.signal,
        cache: 'no-store',
      });
    } catch (e) {
      error = e;
    } finally {
      if (timer !== null) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    if (signal?.aborted) throw aborted(attempt, lastResult, signal.reason);

    let wait = null;
    if (response) {
      const result = await readResult(response, attempt);
      // an answer carrying Idempotent-Replayed (true or false) is the
      // upstream's stored, final answer, whatever its status
      if (!retryOn.has(result.status) || result.stored) {
        if (result.stale && options.onStale) options.onStale(result);
        if (result.ok && result.replayed && options.onReplay) options.onReplay(result);
        return result;
      }
      lastResult = result;
      lastError = null;
      const ra = parseRetryAfter(response.headers.get('Retry-After'));
      if (ra !== null) wait = Math.min(ra, maxRetryAfter);
    } else {
      lastError = error;
    }
    if (attempt > retries) {
      const what = lastResult && !lastError
        ? `the server kept answering ${lastResult.status}`
        : `network error: ${lastError && lastError.message ? lastError.message : lastError}`;
      throw new IdemdSubmitError(`submit failed after ${attempt} attempts (${what})`,
        { attempts: attempt, result: lastError ? null : lastResult, cause: lastError || undefined });
    }
    const delay = Math.max(wait ?? 0, backoffDelay(attempt, baseMs, maxMs, random));
    if (options.onRetry) {
      options.onRetry({ attempt, delayMs: delay, status: response ? response.status : null,
                        error: response ? null : error });
    }
    try {
      await sleep(delay);
    } catch (e) {
      throw aborted(attempt, lastResult, e);
    }
  }
}

function aborted(attempts, result, reason) {
  return new IdemdSubmitError('submit aborted', { attempts, result, cause: reason, aborted: true });
}

function waitFor(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) { reject(signal.reason); return; }
    const t = setTimeout(() => { signal?.removeEventListener('abort', stop); resolve(); }, ms);
    function stop() { clearTimeout(t); reject(signal.reason); }
    signal?.addEventListener('abort', stop, { once: true });
  });
}

async function readResult(response, attempts) {
  const ctype = (response.headers.get('Content-Type') || '').toLowerCase();
  let body = await response.text().catch(() => '');
  const isJSON = /^application\/([a-z0-9.+-]*\+)?json\b/.test(ctype);
  if (isJSON && body !== '') {
    try { body = JSON.parse(body); } catch (e) { /* keep the text */ }
  }
  const marker = response.headers.get('Idempotent-Replayed');
  const replayed = (marker || '').trim().toLowerCase() === 'true';
  return {
    ok: response.status >= 200 && response.status < 300,
    status: response.status,
    replayed,
    stored: marker !== null,
    stale: response.status === 412,
    body,
    problem: ctype.startsWith('application/problem+json') && body && typeof body === 'object' ? body : null,
    headers: response.headers,
    attempts,
    response,
  };
}
