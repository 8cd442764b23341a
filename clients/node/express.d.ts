// Types of the Express middleware (src/express.js). Structural types of the
// request and response it uses, so that neither express nor @types/express
// is needed to type-check against it.
import type { Client, StoredResponse, Json } from './index.js';

export interface IdempotentRequest {
  method?: string;
  url?: string;
  originalUrl?: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
}

export interface IdempotentResponse {
  statusCode: number;
  headersSent: boolean;
  setHeader(name: string, value: number | string | readonly string[]): unknown;
  getHeader(name: string): number | string | string[] | undefined;
  getHeaders(): Record<string, number | string | string[] | undefined>;
  hasHeader(name: string): boolean;
  on(event: 'close', listener: () => void): unknown;
  write: (...args: any[]) => boolean;
  end: (...args: any[]) => unknown;
  writeHead: (...args: any[]) => unknown;
}

export type NextFunction = (err?: unknown) => void;

export interface IdempotentOptions<Req extends IdempotentRequest = IdempotentRequest> {
  /** The idemd operation; required with by: 'key'. */
  operation?: string;
  /** 'key' (default): the header's value is a caller key; 'token': an idemd token. */
  by?: 'key' | 'token';
  /** The header carrying the key or token (default Idempotency-Key; bare or an sf-string). */
  header?: string;
  /** Without the header: 400 idempotency_key_missing (true, default) or no protection (false). */
  required?: boolean;
  /** What identifies the request; default requestIdentity: {method, path, query, json | body | body_sha256}. */
  request?: (req: Req) => Json;
  /** The subject (fills the operation's version_key; required for a guarded operation). */
  subject?: (req: Req) => string;
  /** Headers whose values, hashed, scope the key per caller (default ['authorization', 'cookie']; [] keeps the key). */
  scopeHeaders?: readonly string[];
  /** Seconds a duplicate waits for the first one to finish (Prefer: wait). */
  wait?: number;
  /** A completion or release failed (the response is sent anyway). */
  onError?: (err: unknown, req: Req) => void;
}

export function idempotent<Req extends IdempotentRequest = IdempotentRequest>(
  client: Client, options?: IdempotentOptions<Req>,
): (req: Req, res: IdempotentResponse, next: NextFunction) => Promise<void>;
export default idempotent;

/** Reads the operation's policy first; rejects (TypeError naming the fix) for a guarded operation without `subject`. */
export function createIdempotent<Req extends IdempotentRequest = IdempotentRequest>(
  client: Client, options?: IdempotentOptions<Req>,
): Promise<(req: Req, res: IdempotentResponse, next: NextFunction) => Promise<void>>;
/** The request the middleware sends by default: method, path, query and the body (parsed when JSON), as Go and Spring send it. */
export function requestIdentity(req: IdempotentRequest & { _body?: boolean }): Json;
export const DEFAULT_SCOPE_HEADERS: readonly string[];
export function callerScope(headers: Record<string, string | string[] | undefined>, names: readonly string[]): string;
export function scopedKey(key: string, headers: Record<string, string | string[] | undefined>, names?: readonly string[]): string;
export function guardRefusal(policy: { name?: string; version_key?: string } | null, hasSubject: boolean): string | null;

export function storableHeaders(headers: Record<string, number | string | string[] | undefined>): Record<string, string>;
export function parseIdempotencyKey(value: string | string[] | null | undefined): string | null;
export function replay(res: IdempotentResponse, stored: StoredResponse): void;
