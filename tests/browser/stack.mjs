// The checkout stack for the browser tests: two fresh databases on the
// runner's throwaway PostgreSQL, idemd (migrated, tenant "shop", operation
// order.create guarding orders:{subject}, the gateway route POST /orders)
// and examples/checkout's shop, each on a free port of 127.0.0.1.
//
// Environment: IDEMD_BIN, CHECKOUT_SHOP_BIN, IDEMD_SOURCE_DIR,
// IDEMD_TEST_PGHOST, IDEMD_TEST_PGUSER (and IDEMD_TEST_PSQL, optional).
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const env = process.env;

function need(name) {
  if (!env[name]) throw new Error(`${name} is not set (run the browser tests through ctest or tests/run.sh)`);
  return env[name];
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

async function waitHealthy(url, proc, logPath, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) {
      throw new Error(`${url}: the process exited with ${proc.exitCode}:\n${fs.readFileSync(logPath, 'utf8')}`);
    }
    try {
      const r = await fetch(url);
      if (r.status === 200) return;
    } catch (e) { /* not listening yet */ }
    await sleep(50);
  }
  throw new Error(`${url} not healthy after ${timeoutMs} ms:\n${fs.readFileSync(logPath, 'utf8')}`);
}

/** The environment for idemd and the shop: no overrides of their config. */
function childEnv() {
  const e = { ...env };
  for (const k of ['IDEMD_LISTEN', 'IDEMD_DATABASE_URL', 'IDEMD_CONFIG', 'SHOP_DATABASE_URL', 'SHOP_IDEMD_API_KEY']) delete e[k];
  return e;
}

export class Stack {
  /** @param {{orderDelayMs?: number}} [o] */
  constructor(o = {}) {
    this.orderDelayMs = o.orderDelayMs ?? 0;
    this.pghost = need('IDEMD_TEST_PGHOST');
    this.pguser = need('IDEMD_TEST_PGUSER');
    this.idemdBin = need('IDEMD_BIN');
    this.shopBin = need('CHECKOUT_SHOP_BIN');
    this.psqlBin = env.IDEMD_TEST_PSQL || 'psql';
    const tag = crypto.randomBytes(5).toString('hex');
    this.idemdDb = `idemd_br_${tag}`;
    this.shopDb = `shop_br_${tag}`;
    this.procs = [];
  }

  conninfo(db) {
    return `host=${this.pghost} dbname=${db} user=${this.pguser}`;
  }

  /** Runs SQL with psql; returns the rows (unaligned, tab-separated). */
  psql(sql, db = 'postgres') {
    const out = execFileSync(this.psqlBin, ['-X', '-q', '-At', '-F', '\t', '-v', 'ON_ERROR_STOP=1', '-d', db, '-c', sql], {
      env: { ...env, PGHOST: this.pghost, PGUSER: this.pguser },
      encoding: 'utf8',
    });
    return out.split('\n').filter((l) => l !== '').map((l) => l.split('\t'));
  }

  /** SQL on the shop's database. */
  shopSql(sql) {
    return this.psql(sql, this.shopDb);
  }

  idemd(...args) {
    return execFileSync(this.idemdBin, ['--config', this.configPath, ...args], {
      cwd: this.tmp, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: childEnv(),
    });
  }

  spawnLogged(name, bin, args) {
    const logPath = path.join(this.tmp, `${name}.log`);
    const fd = fs.openSync(logPath, 'w');
    const proc = spawn(bin, args, { cwd: this.tmp, stdio: ['ignore', fd, fd], env: childEnv() });
    fs.closeSync(fd);
    this.procs.push({ name, proc, logPath });
    return { proc, logPath };
  }

  async start() {
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'idemd-browser-'));
    fs.chmodSync(this.tmp, 0o711);
    this.idemdPort = await freePort();
    this.shopPort = await freePort();
    this.upstreamPort = await freePort();
    this.idemdURL = `http://127.0.0.1:${this.idemdPort}`;
    this.shopURL = `http://127.0.0.1:${this.shopPort}`;
    this.ordersURL = `${this.idemdURL}/orders`;

    this.psql(`CREATE DATABASE "${this.idemdDb}"`);
    this.psql(`CREATE DATABASE "${this.shopDb}"`);

    this.configPath = path.join(this.tmp, 'idemd.json');
    fs.writeFileSync(this.configPath, JSON.stringify({
      listen: `127.0.0.1:${this.idemdPort}`,
      database_url: this.conninfo(this.idemdDb),
      master_key_file: path.join(this.tmp, 'master.key'),
      pool_size: 4,
      threads: 4,
      // the page comes from the shop, another origin than idemd's
      cors_origins: [this.shopURL],
      routes: [{
        method: 'POST', path: '/orders', tenant: 'shop', operation: 'order.create',
        upstream: `http://127.0.0.1:${this.upstreamPort}`, store_headers: ['location'],
        timeout_ms: 10000,
      }],
    }, null, 2));
    this.idemd('migrate');
    this.apiKey = JSON.parse(this.idemd('tenant', 'create', 'shop').trim().split('\n').pop()).api_key;
    const keyFile = path.join(this.tmp, 'shop.key');
    fs.writeFileSync(keyFile, `${this.apiKey}\n`, { mode: 0o600 });

    const idemd = this.spawnLogged('idemd', this.idemdBin, ['--config', this.configPath, 'serve']);
    await waitHealthy(`${this.idemdURL}/healthz`, idemd.proc, idemd.logPath);
    const op = await fetch(`${this.idemdURL}/v1/operations/order.create`, {
      method: 'PUT',
      headers: { Authorization: `Bearer ${this.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ token_ttl_seconds: 3600, retention_seconds: 86400, lease_seconds: 30, version_key: 'orders:{subject}' }),
    });
    if (op.status !== 201) throw new Error(`PUT /v1/operations/order.create: ${op.status} ${await op.text()}`);

    const shop = this.spawnLogged('shop', this.shopBin, [
      '--listen', `127.0.0.1:${this.shopPort}`,
      '--upstream-listen', `127.0.0.1:${this.upstreamPort}`,
      '--database-url', this.conninfo(this.shopDb),
      '--idemd-url', this.idemdURL,
      '--api-key-file', keyFile,
      '--order-delay-ms', String(this.orderDelayMs),
    ]);
    this.shopLog = shop.logPath;
    this.idemdLog = idemd.logPath;
    await waitHealthy(`${this.shopURL}/healthz`, shop.proc, shop.logPath);
  }

  /** The shop's request log lines for POST /orders on its upstream listener. */
  upstreamOrderPosts() {
    return fs.readFileSync(this.shopLog, 'utf8').split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
      .filter((o) => o.listener === 'upstream' && o.method === 'POST' && o.path === '/orders');
  }

  /** The orders of SUBJECT, oldest first. */
  orders(subject) {
    return this.shopSql(`SELECT id, idempotency_key, quantity, amount_cents, name FROM orders
                         WHERE subject = '${subject.replace(/'/g, "''")}' ORDER BY id`)
      .map(([id, key, quantity, amount, name]) => ({ id: Number(id), key, quantity: Number(quantity), amount: Number(amount), name }));
  }

  /** idemd's version counter orders:SUBJECT. */
  async version(subject) {
    const r = await fetch(`${this.idemdURL}/v1/versions/orders:${encodeURIComponent(subject)}`, {
      headers: { Authorization: `Bearer ${this.apiKey}` },
    });
    return (await r.json()).version;
  }

  async stop() {
    const problems = [];
    for (const { name, proc, logPath } of this.procs.reverse()) {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
        await exited;
        clearTimeout(t);
      }
      if (proc.exitCode !== 0) {
        problems.push(`${name} exited with ${proc.exitCode ?? proc.signalCode}:\n` +
                      fs.readFileSync(logPath, 'utf8').split('\n').slice(-30).join('\n'));
      }
    }
    for (const db of [this.idemdDb, this.shopDb]) {
      try { this.psql(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`); } catch (e) { problems.push(String(e)); }
    }
    if (env.IDEMD_BROWSER_KEEP) console.log(`kept ${this.tmp}`);
    else if (this.tmp && problems.length === 0) fs.rmSync(this.tmp, { recursive: true, force: true });
    if (problems.length) throw new Error(problems.join('\n'));
  }
}
