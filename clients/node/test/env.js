// The idemd servers tests/clients.sh started (see its header).
import { randomBytes } from 'node:crypto';
import { Client } from 'idemd';

export const URL = process.env.IDEMD_URL;
export const LIMITED_URL = process.env.IDEMD_LIMITED_URL;
export const API_KEY = process.env.IDEMD_API_KEY;
export const API_KEY_2 = process.env.IDEMD_API_KEY_2;
if (!URL || !API_KEY) throw new Error('IDEMD_URL and IDEMD_API_KEY are not set (run tests/clients.sh)');

export const POLICY = { token_ttl_seconds: 3600, retention_seconds: 86400, lease_seconds: 30 };
export const uniq = (p) => `${p}.${randomBytes(5).toString('hex')}`;
export const client = (opts = {}) =>
  new Client({ baseUrl: URL, apiKey: API_KEY, retry: { attempts: 3, baseDelayMs: 50 }, ...opts });

export async function newOperation(c = client(), policy = {}) {
  const name = uniq('op');
  await c.putOperation(name, { ...POLICY, ...policy });
  return name;
}
