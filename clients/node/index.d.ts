// Types of the idemd client (src/index.js, src/errors.js).

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  /** A JSON body; null when empty. Absent when body_base64 is present. */
  body?: Json;
  /** Raw body bytes, standard base64. */
  body_base64?: string;
}

export interface IssuedToken {
  token: string;
  id: string;
  operation: string;
  subject: string;
  expires_at: string;
  version?: number;
}

export type RecordState = 'issued' | 'in_progress' | 'completed' | 'revoked' | 'expired';

export interface TokenInfo {
  id: string;
  operation: string;
  subject: string;
  state: RecordState;
  expires_at: string;
  attempt: number;
  lease_expires_at?: string;
  response?: StoredResponse;
  checkpoint?: Checkpoint;
}

/** The latest recovery point of a record. */
export interface Checkpoint {
  phase: string;
  /** The data sent with it, or null. */
  data: Json;
  /** The attempt that left it. */
  attempt: number;
}

export interface ExtendResult {
  state?: 'in_progress';
  attempt?: number;
  lease_expires_at: string;
}

export interface CheckpointResult {
  state: 'in_progress';
  checkpoint: Checkpoint;
}

/** GET /v1/records/{id}: introspection plus operation; replays may lag by up to 10 s. */
export interface IdemdRecord {
  id: string;
  operation: string;
  key?: string;
  subject?: string;
  state: 'issued' | 'in_progress' | 'lease_expired' | 'completed' | 'revoked';
  expires_at: string;
  attempt: number;
  lease_expires_at?: string;
  response?: StoredResponse;
  checkpoint?: Checkpoint;
  replays?: number;
}

/** One row of GET /v1/records (no stored response). */
export interface RecordRow {
  id: string;
  operation: string;
  state: string;
  subject?: string;
  attempt: number;
  claimed_at: string;
  lease_expires_at?: string;
  expires_at: string;
}

export interface RecordPage {
  records: RecordRow[];
  /** Pass as `cursor` for the next page; null on the last. */
  next_cursor: string | null;
}

export interface RecordFilters {
  operation?: string;
  state?: 'issued' | 'in_progress' | 'completed' | 'revoked';
  subject?: string;
  /** Seconds since the first claim. */
  olderThan?: number;
}

export interface RecordEvent {
  at: string;
  event: 'claimed' | 'taken_over' | 'extended' | 'checkpoint' | 'completed' | 'released' | 'revoked' | 'expired';
  attempt?: number;
  status?: number;
  phase?: string;
  /** api_key:<id>, route:<METHOD> <path>, or sweeper. */
  by: string;
}

export interface KeyRecord {
  id: string;
  operation: string;
  key: string;
  subject?: string;
  state: 'issued' | 'in_progress' | 'completed';
  expires_at: string;
  attempt: number;
  lease_expires_at?: string;
  response?: StoredResponse;
  checkpoint?: Checkpoint;
}

/** The answer to a claim. replayed: the key was already completed and
 * `response` is the stored outcome (do not run the work again); otherwise
 * the caller holds `attempt` until `lease_expires_at`. */
export interface Claimed {
  state: 'in_progress' | 'completed';
  replayed: boolean;
  id?: string;
  attempt?: number;
  lease_expires_at?: string;
  response?: StoredResponse;
  /** A takeover's last checkpoint, left by an earlier attempt. */
  checkpoint?: Checkpoint;
}

export interface CompleteResult {
  state: 'completed';
  response: StoredResponse;
  expires_at: string;
}

export interface ReleaseResult {
  state: 'issued';
  attempt: number;
}

export interface Version { key: string; version: number }

export interface OperationPolicy {
  token_ttl_seconds: number;
  retention_seconds: number;
  lease_seconds: number;
  version_key?: string;
  require_version?: boolean;
  [field: string]: Json | undefined;
}

export interface Operation extends OperationPolicy {
  name: string;
  require_version: boolean;
}

export interface Health { status: string; reason?: string }

export interface ClaimOptions {
  /** Identifies the request (hashed canonically); the same key with another request is 422. */
  request?: Json;
  /** An opaque fingerprint; wins over `request`. */
  fingerprint?: string;
  /** Caller keys only: 1..128 bytes, fills the operation's version_key. */
  subject?: string;
  /** Version precondition: a number or a strong ETag ("7"). */
  ifMatch?: number | string;
  /** Seconds to wait for an in-progress duplicate (Prefer: wait=N). */
  wait?: number;
  /** Retry 409 request_in_progress per the client's retry policy (default true). */
  retryInProgress?: boolean;
}

export interface OutcomeInit {
  status?: number;
  body?: Json;
  headers?: Record<string, string>;
  /** Raw body bytes (stored as body_base64). */
  content?: Uint8Array;
}

export class Outcome implements OutcomeInit {
  constructor(status?: number, body?: Json, headers?: Record<string, string>, content?: Uint8Array);
  status: number;
  body: Json;
  headers?: Record<string, string>;
  content?: Uint8Array;
}

export function asOutcome(value: unknown): Outcome;
export function responseBytes(response: StoredResponse): Uint8Array;
/** Returns KEY if idemd would accept it as a caller key (1..255 bytes of 0x21-0x7E), else throws IdempotencyKeyInvalidError (400) without sending. */
export function checkKey(key: string): string;
/** Returns ATTEMPT if it is an integer 1..2147483647, else throws InvalidRequestError (400) without sending. */
export function checkAttempt(attempt: number | null | undefined): number;

export interface BatchClaimItem {
  key: string;
  fingerprint?: string;
  request?: Json;
  subject?: string;
}

export interface BatchClaimResult {
  key: string;
  /** What a single claim would have answered: 201, 200 (replay), 409, 412, 422, ... */
  status: number;
  code?: string;
  id?: string;
  attempt?: number;
  lease_expires_at?: string;
  response?: StoredResponse;
  checkpoint?: Checkpoint;
}

export type BatchCompleteItem =
  | { key: string; attempt: number; outcome: OutcomeInit }
  | { key: string; attempt: number; status: number; headers?: Record<string, string>; body?: Json; body_base64?: string };

export interface BatchCompleteResult { key: string; status: number; code?: string }

export interface RetryOptions {
  /** Total tries, the first included (1: never retry). Default 4. */
  attempts?: number;
  /** Jitter window of the first retry, doubling each time. Default 200. */
  baseDelayMs?: number;
  /** Largest jitter window. Default 5000. */
  maxDelayMs?: number;
}

export interface ClientOptions {
  baseUrl: string;
  apiKey?: string;
  timeoutMs?: number;
  retry?: RetryOptions;
  /** A fetch implementation (default: the global fetch). */
  fetch?: (input: string, init?: any) => Promise<any>;
}

export type ClaimTarget = { operation: string; key: string } | { token: string };

export interface RunOnceOptions extends ClaimOptions {
  /** Which errors release the claim (default: all); others store a 500 as final. */
  releaseOn?: (err: unknown) => boolean;
}

export type RunOnceResult<T> =
  | { replayed: true; response: StoredResponse; claim: Claimed }
  | { replayed: false; response: StoredResponse; value: T; claim: Claimed };

export type MessageOutcomeKind = 'processed' | 'replayed' | 'in_progress' | 'failed' | 'rejected' | 'lost';

export interface MessageOutcome<M> {
  message: M;
  key: string;
  outcome: MessageOutcomeKind;
  /** Deliver the message again (in_progress, released failures, 429/503 items). */
  retry: boolean;
  result?: unknown;
  response?: StoredResponse;
  error?: unknown;
  status?: number;
  code?: string;
  attempt?: number;
}

export interface ConsumeOptions<M> {
  key: (message: M) => string;
  /** Runs for new messages only; `claim` carries the record's id (forward it
   * downstream as the idempotency key) and the attempt (extend, checkpoint). */
  handler: (message: M, claim: BatchClaimResult) => unknown;
  request?: (message: M) => Json;
  fingerprint?: (message: M) => string;
  subject?: (message: M) => string;
  releaseOn?: (err: unknown) => boolean;
  /** Handlers run at once (default 8). */
  concurrency?: number;
}

export interface RawResponse { status: number; headers: Record<string, string>; json: unknown }

export class Client {
  constructor(options: ClientOptions);
  readonly baseUrl: string;
  apiKey?: string;
  timeoutMs: number;
  retry: Required<RetryOptions>;
  static retryable(err: unknown): boolean;
  delayMs(tries: number, err: IdemdError): number;
  request(method: string, path: string, options?: {
    body?: Json; headers?: Record<string, string>; ok?: number[]; auth?: boolean; retry?: boolean;
    retryInProgress?: boolean;
  }): Promise<RawResponse>;

  issue(operation: string, subject: string, options?: { ttlSeconds?: number }): Promise<IssuedToken>;
  issueMany(operation: string, subject: string, count: number, options?: { ttlSeconds?: number }): Promise<IssuedToken[]>;
  introspect(token: string): Promise<TokenInfo>;
  revoke(token: string): Promise<void>;
  claimToken(token: string, options?: ClaimOptions): Promise<Claimed>;
  completeToken(token: string, attempt: number, outcome?: OutcomeInit): Promise<CompleteResult>;
  releaseToken(token: string, attempt: number): Promise<ReleaseResult>;
  extendToken(token: string, attempt: number, options?: { leaseSeconds?: number }): Promise<ExtendResult>;
  checkpointToken(token: string, attempt: number, phase: string, data?: Json): Promise<CheckpointResult>;

  claimKey(operation: string, key: string, options?: ClaimOptions): Promise<Claimed>;
  completeKey(operation: string, key: string, attempt: number, outcome?: OutcomeInit): Promise<CompleteResult>;
  releaseKey(operation: string, key: string, attempt: number): Promise<ReleaseResult>;
  getKey(operation: string, key: string): Promise<KeyRecord>;
  extendKey(operation: string, key: string, attempt: number, options?: { leaseSeconds?: number }): Promise<ExtendResult>;
  checkpointKey(operation: string, key: string, attempt: number, phase: string, data?: Json): Promise<CheckpointResult>;
  claimBatch(operation: string, items: BatchClaimItem[]): Promise<BatchClaimResult[]>;
  completeBatch(operation: string, items: BatchCompleteItem[]): Promise<BatchCompleteResult[]>;

  getRecord(id: string): Promise<IdemdRecord>;
  recordEvents(id: string): Promise<RecordEvent[]>;
  listRecords(options?: RecordFilters & { limit?: number; cursor?: string | null }): Promise<RecordPage>;
  iterRecords(options?: RecordFilters & { pageSize?: number }): AsyncGenerator<RecordRow, void, undefined>;

  getVersion(key: string): Promise<Version>;
  bumpVersion(key: string, ifMatch: number | string): Promise<number>;
  putOperation(name: string, policy: OperationPolicy): Promise<Operation>;
  getOperation(name: string): Promise<Operation>;
  listOperations(): Promise<Operation[]>;
  health(): Promise<Health>;
  ready(): Promise<Health>;

  runOnce<T>(target: ClaimTarget, fn: (claim: Claimed) => T | Promise<T>, options?: RunOnceOptions): Promise<RunOnceResult<T>>;
  consume<M>(operation: string, messages: readonly M[], options: ConsumeOptions<M>): Promise<MessageOutcome<M>[]>;
}

export const defaultRetry: Readonly<Required<RetryOptions>>;

// ---- errors

export type ProblemCode =
  | 'invalid_request' | 'idempotency_key_missing' | 'token_malformed' | 'unauthorized'
  | 'token_invalid' | 'token_scope_mismatch' | 'not_found' | 'method_not_allowed'
  | 'request_in_progress' | 'lease_lost' | 'not_in_progress' | 'idempotency_key_invalid'
  | 'record_not_found' | 'completion_conflict' | 'token_in_use' | 'token_expired'
  | 'token_revoked' | 'version_mismatch' | 'payload_too_large' | 'unsupported_media_type'
  | 'fingerprint_mismatch' | 'operation_unknown' | 'version_required' | 'rate_limited'
  | 'unavailable' | 'cors_origin_denied' | 'upstream_unavailable' | 'upstream_invalid'
  | 'upstream_timeout' | 'internal';

/** The title idemd gives a problem of this status (RFC 9110's reason phrase). */
export function problemTitle(status: number): string;

export class IdemdError extends Error {
  constructor(status: number | null, code: string | null, detail: string,
    options?: { retryAfter?: number | null; problem?: Record<string, unknown>; headers?: Record<string, string> });
  /** HTTP status; null when no answer came. */
  status: number | null;
  /** Problem code; null when the answer was not a problem. */
  code: string | null;
  detail: string;
  /** Retry-After in seconds, or null. */
  retryAfter: number | null;
  problem: Record<string, unknown>;
  headers: Record<string, string>;
}

export class TransportError extends IdemdError {
  constructor(detail: string, options?: { sent?: boolean; cause?: unknown });
  /** False when the request certainly never reached idemd (then it is retried). */
  sent: boolean;
}

export interface ProblemErrorClass {
  new (status: number | null, code: string | null, detail: string,
    options?: { retryAfter?: number | null; problem?: Record<string, unknown>; headers?: Record<string, string> }): IdemdError;
  readonly code: ProblemCode;
}

export const errorClasses: Record<ProblemCode, ProblemErrorClass>;

declare class ProblemError extends IdemdError { static readonly code: ProblemCode }
export class InvalidRequestError extends ProblemError {}
export class IdempotencyKeyMissingError extends ProblemError {}
export class TokenMalformedError extends ProblemError {}
export class UnauthorizedError extends ProblemError {}
export class TokenInvalidError extends ProblemError {}
export class TokenScopeMismatchError extends ProblemError {}
export class NotFoundError extends ProblemError {}
export class MethodNotAllowedError extends ProblemError {}
export class RequestInProgressError extends ProblemError {}
export class LeaseLostError extends ProblemError {}
export class NotInProgressError extends ProblemError {}
export class IdempotencyKeyInvalidError extends ProblemError {}
export class RecordNotFoundError extends ProblemError {}
export class CompletionConflictError extends ProblemError {}
export class TokenInUseError extends ProblemError {}
export class TokenExpiredError extends ProblemError {}
export class TokenRevokedError extends ProblemError {}
export class VersionMismatchError extends ProblemError {
  /** The counter's current value, from the answer's ETag. */
  readonly currentVersion: number | null;
}
export class PayloadTooLargeError extends ProblemError {}
export class UnsupportedMediaTypeError extends ProblemError {}
export class FingerprintMismatchError extends ProblemError {}
export class OperationUnknownError extends ProblemError {}
export class VersionRequiredError extends ProblemError {}
export class RateLimitedError extends ProblemError {}
export class UnavailableError extends ProblemError {}
export class CorsOriginDeniedError extends ProblemError {}
export class UpstreamUnavailableError extends ProblemError {}
export class UpstreamInvalidError extends ProblemError {}
export class UpstreamTimeoutError extends ProblemError {}
export class InternalError extends ProblemError {}

export function parseEtag(value: string | null | undefined): number | null;
export function parseRetryAfter(value: string | null | undefined): number | null;
export function errorFor(status: number, headers: Record<string, string>, text: string): IdemdError;
