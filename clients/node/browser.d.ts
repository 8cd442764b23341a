// Types of the browser helper (src/browser.js, `idemd/browser`). Structural
// types only, so that neither the DOM library nor a bundler's types are
// needed to type-check against it.

/** A form element (anything with the fields the helper reads), or a request of your own. */
export type SubmitTarget =
  | { readonly tagName?: string; readonly action?: string; readonly method?: string; readonly [k: string]: unknown }
  | { url: string; method?: string; body?: unknown; headers?: Record<string, string> };

export interface SubmitResult {
  ok: boolean;
  status: number;
  replayed: boolean;
  stored: boolean;
  stale: boolean;
  body: unknown;
  problem: { type?: string; title?: string; status?: number; detail?: string; code?: string } | null;
  headers: unknown;
  attempts: number;
  response: unknown;
}

export interface SubmitOptions {
  token?: string;
  waitSeconds?: number;
  retries?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  retryOn?: readonly number[];
  maxRetryAfterMs?: number;
  timeoutMs?: number;
  as?: 'form' | 'json';
  url?: string;
  method?: string;
  headers?: Record<string, string>;
  submitter?: unknown;
  credentials?: 'omit' | 'same-origin' | 'include';
  signal?: unknown;
  reenable?: boolean;
  onStale?: (result: SubmitResult) => void;
  onReplay?: (result: SubmitResult) => void;
  onRetry?: (info: { attempt: number; delayMs: number; status?: number; error?: unknown }) => void;
  fetch?: (...args: any[]) => Promise<any>;
}

export class IdemdSubmitError extends Error {
  attempts: number;
  result?: SubmitResult;
  cause?: unknown;
  aborted?: boolean;
}

export const DEFAULT_RETRY_ON: readonly number[];
export function parseRetryAfter(value: string | null | undefined, now?: number): number | null;
export function backoffDelay(attempt: number, baseMs: number, maxMs: number, random?: () => number): number;
export function submitWithToken(target: SubmitTarget, options?: SubmitOptions): Promise<SubmitResult>;
