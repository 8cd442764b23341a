// Errors of the idemd client: one class per problem code, all subclasses of
// IdemdError (status, code, detail, retryAfter, problem, headers).

export class IdemdError extends Error {
  constructor(status, code, detail, { retryAfter = null, problem = {}, headers = {} } = {}) {
    super(`${status ?? 'no answer'}${code ? ' ' + code : ''}: ${detail}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.retryAfter = retryAfter;
    this.problem = problem;
    this.headers = headers;
  }
}

/** No HTTP answer (connection refused or reset, timeout). `sent` is false
 * when the request certainly never reached idemd: only then is it retried. */
export class TransportError extends IdemdError {
  constructor(detail, { sent = true, cause } = {}) {
    super(null, null, detail);
    this.sent = sent;
    if (cause) this.cause = cause;
  }
}

const TITLES = {
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found',
  405: 'Method Not Allowed', 408: 'Request Timeout', 409: 'Conflict', 410: 'Gone',
  412: 'Precondition Failed', 413: 'Content Too Large', 415: 'Unsupported Media Type',
  422: 'Unprocessable Content', 428: 'Precondition Required', 429: 'Too Many Requests',
  500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

/** The title idemd gives a problem of STATUS (RFC 9110's reason phrase),
 * for the problems the client makes itself; idemd's own are passed on
 * unchanged. */
export const problemTitle = (status) => TITLES[status] ?? 'Error';

const CODES = [
  'invalid_request', 'idempotency_key_missing', 'token_malformed', 'unauthorized',
  'token_invalid', 'token_scope_mismatch', 'not_found', 'method_not_allowed',
  'request_in_progress', 'lease_lost', 'not_in_progress', 'idempotency_key_invalid',
  'record_not_found', 'completion_conflict', 'token_in_use', 'token_expired',
  'token_revoked', 'version_mismatch', 'payload_too_large', 'unsupported_media_type',
  'fingerprint_mismatch', 'operation_unknown', 'version_required', 'rate_limited',
  'unavailable', 'cors_origin_denied', 'upstream_unavailable', 'upstream_invalid',
  'upstream_timeout', 'internal',
];

const className = (code) =>
  code.split('_').map((w) => w[0].toUpperCase() + w.slice(1)).join('') + 'Error';

/** Problem code → error class. */
export const errorClasses = {};
for (const code of CODES) {
  const name = className(code);
  const cls = { [name]: class extends IdemdError {} }[name];
  Object.defineProperty(cls, 'code', { value: code });
  errorClasses[code] = cls;
}

export const {
  InvalidRequestError, IdempotencyKeyMissingError, TokenMalformedError, UnauthorizedError,
  TokenInvalidError, TokenScopeMismatchError, NotFoundError, MethodNotAllowedError,
  RequestInProgressError, LeaseLostError, NotInProgressError, IdempotencyKeyInvalidError,
  RecordNotFoundError, CompletionConflictError, TokenInUseError, TokenExpiredError,
  TokenRevokedError, PayloadTooLargeError, UnsupportedMediaTypeError,
  FingerprintMismatchError, OperationUnknownError, VersionRequiredError, RateLimitedError,
  UnavailableError, CorsOriginDeniedError, UpstreamUnavailableError, UpstreamInvalidError,
  UpstreamTimeoutError, InternalError,
} = Object.fromEntries(Object.values(errorClasses).map((c) => [c.name, c]));

/** 412: `currentVersion` is the counter's value from the answer's ETag. */
export class VersionMismatchError extends IdemdError {
  get currentVersion() { return parseEtag(this.headers.etag); }
}
Object.defineProperty(VersionMismatchError, 'code', { value: 'version_mismatch' });
errorClasses.version_mismatch = VersionMismatchError;

export function parseEtag(value) {
  const m = /^\s*"(\d+)"\s*$/.exec(value ?? '');
  return m ? Number(m[1]) : null;
}

export function parseRetryAfter(value) {
  if (value == null) return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : Math.max(0, (t - Date.now()) / 1000);
}

/** The error for a non-2xx answer (headers: lower-case names → values). */
export function errorFor(status, headers, text) {
  let problem = {};
  try {
    const p = text ? JSON.parse(text) : null;
    if (p && typeof p === 'object' && !Array.isArray(p)) problem = p;
  } catch { /* not JSON */ }
  const code = typeof problem.code === 'string' ? problem.code : null;
  const detail = typeof problem.detail === 'string' ? problem.detail
    : (text && !problem.code ? text.slice(0, 200) : `HTTP ${status}`);
  const Cls = (code && errorClasses[code]) || IdemdError;
  return new Cls(status, code, detail,
    { retryAfter: parseRetryAfter(headers['retry-after']), problem, headers });
}
