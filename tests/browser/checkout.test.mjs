// Browser tests of the checkout example (examples/checkout) through idemd's
// gateway, in Debian's Chromium driven headless by playwright-core.
//
// The page is served by the shop (one origin) and submits to idemd's gateway
// (another origin), so every submit also goes through CORS. Each test uses a
// new browser context: new cookies, hence a new shop user (subject).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Stack } from './stack.mjs';

const nodeDir = process.env.IDEMD_NODE_DIR;
if (!nodeDir) throw new Error('IDEMD_NODE_DIR is not set (run through tests/browser/run.sh)');
const { chromium } = createRequire(path.join(nodeDir, 'package.json'))('playwright-core');
const artifacts = process.env.IDEMD_ARTIFACTS_DIR ||
  path.join(process.env.IDEMD_SOURCE_DIR || '.', 'build', 'test-artifacts');

// The shop takes this long per order, so that a duplicate arrives while the
// first submit is still in flight.
const ORDER_DELAY_MS = 700;
const stack = new Stack({ orderDelayMs: ORDER_DELAY_MS });
let browser;

before(async () => {
  await stack.start();
  browser = await chromium.launch({
    executablePath: process.env.IDEMD_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // playwright gives every launch a new, empty --user-data-dir of its own
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60000,
  });
  fs.mkdirSync(artifacts, { recursive: true });
});

after(async () => {
  if (browser) await browser.close();
  await stack.stop();
});

async function newContext() {
  return browser.newContext({ viewport: { width: 760, height: 620 }, deviceScaleFactor: 1 });
}

/**
 * Opens the checkout page in a new tab of CONTEXT, recording what the page
 * sends to the gateway and any script error.
 */
async function openCheckout(context) {
  const page = await context.newPage();
  const net = [];       // POST /orders as the page saw them
  const errors = [];    // uncaught exceptions, CSP violations
  page.on('response', async (r) => {
    if (r.url() !== stack.ordersURL || r.request().method() !== 'POST') return;
    const entry = { status: r.status(), replayed: await r.headerValue('idempotent-replayed') };
    net.push(entry);
    if (r.status() >= 400) {
      try { entry.code = (await r.json()).code; } catch (e) { /* no body */ }
    }
    if (r.status() === 409) entry.retryAfter = await r.headerValue('retry-after');
  });
  page.on('requestfailed', (req) => {
    if (req.url() === stack.ordersURL && req.method() === 'POST') net.push({ failed: req.failure()?.errorText });
  });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    // a failed or refused submit is logged by Chromium; that is expected here
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text());
  });
  const resp = await page.goto(stack.shopURL);
  assert.equal(resp.status(), 200, 'GET / of the shop');
  await page.locator('html[data-ready="true"]').waitFor();
  const cookie = (await context.cookies()).find((c) => c.name === 'shop_user');
  assert.ok(cookie, 'the shop set its session cookie');
  return { page, net, errors, subject: cookie.value };
}

async function shownOrderId(page) {
  const c = page.locator('.confirmation');
  assert.equal(await c.count(), 1, 'exactly one confirmation on the page');
  return Number(await c.getAttribute('data-order-id'));
}

/** How many times TEXT occurs in the page's visible text. */
async function occurrences(page, text) {
  const body = await page.locator('body').innerText();
  return body.split(text).length - 1;
}

function postsFor(orderId) {
  return stack.upstreamOrderPosts().filter((o) => o.order_id === orderId);
}

test('(a) a double click on Pay creates exactly one order, shown once', async () => {
  const ctx = await newContext();
  try {
    const { page, net, errors, subject } = await openCheckout(ctx);
    await page.fill('#name', 'Ada Lovelace');
    await page.dblclick('#pay');
    assert.equal(await page.locator('#pay').isDisabled(), true, 'Pay is disabled while the submit is in flight');
    await page.locator('.confirmation').waitFor();
    await page.waitForTimeout(ORDER_DELAY_MS + 500); // room for a second submit, if any

    const id = await shownOrderId(page);
    assert.equal(await occurrences(page, `Order #${id} is confirmed`), 1, 'the confirmation text appears once');
    const orders = stack.orders(subject);
    assert.equal(orders.length, 1, `one order in the shop's orders table: ${JSON.stringify(orders)}`);
    assert.equal(orders[0].id, id, 'the page shows the order the shop stored');
    assert.deepEqual(net, [{ status: 201, replayed: 'false' }], 'the page sent one submit: 201, not replayed');
    assert.equal(postsFor(id).length, 1, 'the shop (upstream) received the order once');
    const clicked = JSON.stringify(net);

    // The same form submitted again by script (the disabled button bypassed):
    // idemd replays the stored answer, no second order.
    const again = await page.evaluate(async () => {
      const m = await import('/idemd.js');
      const r = await m.submitWithToken(document.getElementById('checkout'), { as: 'json' });
      return { status: r.status, replayed: r.replayed, id: r.body.order_id };
    });
    assert.deepEqual(again, { status: 201, replayed: true, id }, 'a resubmit of the same token is a replay');
    assert.equal(stack.orders(subject).length, 1, 'still one order');
    assert.equal(postsFor(id).length, 1, 'the replay never reached the shop');
    assert.equal(await page.locator('.confirmation').count(), 1);
    assert.deepEqual(errors, []);
    console.log(`  observed (a): double click -> page POSTs ${clicked}, order #${id}; scripted resubmit ${JSON.stringify(again)}`);
  } finally {
    await ctx.close();
  }
});

test('(a2) two concurrent submits of one token: the duplicate waits for the answer (Prefer: wait) and shows the same order, with no 409', async () => {
  const ctx = await newContext();
  try {
    const { page, net, errors, subject } = await openCheckout(ctx);
    const out = await page.evaluate(async (url) => {
      const m = await import('/idemd.js');
      const token = document.getElementById('checkout').dataset.idempotencyToken;
      const retried = [];
      const one = () => m.submitWithToken({ url, body: { quantity: '2', name: 'Grace Hopper' } },
        { token, onRetry: (i) => { retried.push(i.status); } });
      const rs = await Promise.all([one(), one()]);
      return { results: rs.map((r) => ({ status: r.status, replayed: r.replayed, id: r.body.order_id, attempts: r.attempts })), retried };
    }, stack.ordersURL);

    const ids = out.results.map((r) => r.id);
    assert.equal(ids[0], ids[1], `both submits got the same order: ${JSON.stringify(out)}`);
    assert.deepEqual(out.results.map((r) => r.status), [201, 201]);
    assert.deepEqual(out.results.map((r) => r.replayed).sort(), [false, true], 'one original, one replay');
    assert.deepEqual(out.retried, [], `the duplicate waited instead of retrying: ${JSON.stringify(out)}`);
    assert.deepEqual(out.results.map((r) => r.attempts), [1, 1], 'one request each');
    assert.ok(!net.some((n) => n.status === 409), `no 409 reached the page: ${JSON.stringify(net)}`);
    const orders = stack.orders(subject);
    assert.equal(orders.length, 1);
    assert.equal(postsFor(ids[0]).length, 1, 'the shop received the order once');
    assert.deepEqual(errors, []);
    console.log(`  observed (a2): page POSTs ${JSON.stringify(net)}, no retries`);
  } finally {
    await ctx.close();
  }
});

test('(a3) without Prefer: wait (waitSeconds 0) the duplicate gets 409, retries and gets the replay', async () => {
  const ctx = await newContext();
  try {
    const { page, net, errors, subject } = await openCheckout(ctx);
    const out = await page.evaluate(async (url) => {
      const m = await import('/idemd.js');
      const token = document.getElementById('checkout').dataset.idempotencyToken;
      const retried = [];
      const waits = [];
      const one = () => m.submitWithToken({ url, body: { quantity: '2', name: 'Grace Hopper' } },
        { token, waitSeconds: 0, onRetry: (i) => { retried.push(i.status); waits.push(i.delayMs); } });
      const rs = await Promise.all([one(), one()]);
      return { results: rs.map((r) => ({ status: r.status, replayed: r.replayed, id: r.body.order_id })), retried, waits };
    }, stack.ordersURL);

    const ids = out.results.map((r) => r.id);
    assert.equal(ids[0], ids[1], `both submits got the same order: ${JSON.stringify(out)}`);
    assert.deepEqual(out.results.map((r) => r.status), [201, 201]);
    assert.deepEqual(out.results.map((r) => r.replayed).sort(), [false, true], 'one original, one replay');
    assert.ok(out.retried.includes(409), `the duplicate was told 409 request_in_progress: ${JSON.stringify(out.retried)}`);
    const conflict = net.find((n) => n.status === 409 && n.code === 'request_in_progress');
    assert.ok(conflict, JSON.stringify(net));
    assert.match(conflict.retryAfter ?? '', /^\d+$/, 'the 409 carries Retry-After');
    assert.ok(out.waits[0] >= Number(conflict.retryAfter) * 1000, `the helper honoured Retry-After: ${JSON.stringify(out)}`);
    const orders = stack.orders(subject);
    assert.equal(orders.length, 1);
    assert.equal(orders[0].quantity, 2);
    assert.equal(orders[0].amount, 4800, 'the price came from the shop, not from the browser');
    assert.equal(postsFor(ids[0]).length, 1, 'the shop received the order once');
    assert.deepEqual(errors, []);
    console.log(`  observed (a3): page POSTs ${JSON.stringify(net)}, retried on ${JSON.stringify(out.retried)} after ${JSON.stringify(out.waits)} ms`);
  } finally {
    await ctx.close();
  }
});

test('(b) the first submit fails on the network (aborted): the helper retries, one order', async () => {
  const ctx = await newContext();
  try {
    const { page, net, errors, subject } = await openCheckout(ctx);
    let aborted = 0;
    await page.route(stack.ordersURL, async (route) => {
      if (route.request().method() === 'POST' && aborted === 0) {
        aborted++;
        await route.abort('failed');
      } else {
        await route.continue();
      }
    });
    await page.fill('#name', 'Alan Turing');
    await page.click('#pay');
    await page.locator('.confirmation').waitFor();
    await page.waitForTimeout(300);

    assert.equal(aborted, 1);
    const id = await shownOrderId(page);
    assert.equal(net.length, 2, JSON.stringify(net));
    assert.ok(net[0].failed, `the first POST failed: ${JSON.stringify(net)}`);
    assert.deepEqual(net[1], { status: 201, replayed: 'false' });
    assert.equal(await page.locator('.confirmation').getAttribute('data-attempts'), '2');
    const orders = stack.orders(subject);
    assert.equal(orders.length, 1);
    assert.equal(orders[0].id, id);
    assert.equal(postsFor(id).length, 1);
    assert.deepEqual(errors, []);
    console.log(`  observed (b): page POSTs ${JSON.stringify(net)}, order #${id}`);
  } finally {
    await ctx.close();
  }
});

test('(b2) the answer to the first submit is lost after the order was made: the retry is a replay, one order', async () => {
  const ctx = await newContext();
  try {
    const { page, net, errors, subject } = await openCheckout(ctx);
    let lost = null;
    await page.route(stack.ordersURL, async (route) => {
      if (route.request().method() === 'POST' && lost === null) {
        const resp = await route.fetch();  // reaches idemd and the shop...
        lost = resp.status();
        await route.abort('connectionreset'); // ...but the page never sees the answer
      } else {
        await route.continue();
      }
    });
    await page.fill('#name', 'Katherine Johnson');
    await page.click('#pay');
    await page.locator('.confirmation').waitFor();

    assert.equal(lost, 201, 'the lost answer was the order');
    const id = await shownOrderId(page);
    assert.ok(net[0].failed, JSON.stringify(net));
    assert.deepEqual(net.at(-1), { status: 201, replayed: 'true' }, 'the retry got the stored answer');
    assert.equal(await page.locator('.confirmation').getAttribute('data-replayed'), 'true');
    assert.equal(stack.orders(subject).length, 1);
    assert.equal(postsFor(id).length, 1, 'the shop received the order once');
    assert.deepEqual(errors, []);
    console.log(`  observed (b2): lost answer ${lost}, page POSTs ${JSON.stringify(net)}, order #${id}`);
  } finally {
    await ctx.close();
  }
});

test('(c) two tabs: after the first tab orders, the second is refused 412 and asks for a reload', async () => {
  const ctx = await newContext();
  try {
    const tab1 = await openCheckout(ctx);
    const tab2 = await openCheckout(ctx);
    assert.equal(tab1.subject, tab2.subject, 'one user, two tabs');
    const v0 = await tab1.page.locator('#checkout').getAttribute('data-version');
    assert.equal(await tab2.page.locator('#checkout').getAttribute('data-version'), v0, 'both rendered at one version');

    await tab1.page.fill('#name', 'Tab One');
    await tab1.page.click('#pay');
    await tab1.page.locator('.confirmation').waitFor();
    assert.equal(await stack.version(tab1.subject), Number(v0) + 1, "tab 1's order bumped orders:{subject}");

    await tab2.page.fill('#name', 'Tab Two');
    await tab2.page.click('#pay');
    await tab2.page.locator('#stale').waitFor();
    assert.match(await tab2.page.locator('#stale').innerText(), /This page is out of date/);
    assert.match(await tab2.page.locator('#stale').innerText(), /Reload the page/);
    assert.equal(await tab2.page.locator('.confirmation').count(), 0, 'no confirmation in tab 2');
    assert.equal(await tab2.page.locator('#checkout-view').isVisible(), false, 'the stale form is gone');
    assert.deepEqual(tab2.net, [{ status: 412, replayed: null, code: 'version_mismatch' }], 'one submit, refused 412');
    assert.equal(stack.orders(tab1.subject).length, 1, 'the stale tab made no order');
    await tab2.page.screenshot({ path: path.join(artifacts, 'checkout-stale.png'), fullPage: true });

    // the reload gets a fresh token at the new version, and that one works
    await tab2.page.click('#reload');
    await tab2.page.locator('html[data-ready="true"]').waitFor();
    assert.equal(await tab2.page.locator('#checkout').getAttribute('data-version'), String(Number(v0) + 1));
    assert.equal(await tab2.page.locator('#orders-count').innerText(), '1');
    await tab2.page.fill('#name', 'Tab Two');
    await tab2.page.click('#pay');
    await tab2.page.locator('.confirmation').waitFor();
    assert.equal(stack.orders(tab1.subject).length, 2, 'after the reload the second order goes through');
    assert.deepEqual(tab1.errors, []);
    assert.deepEqual(tab2.errors, []);
    console.log(`  observed (c): tab 1 ${JSON.stringify(tab1.net)}, tab 2 ${JSON.stringify(tab2.net)}`);
  } finally {
    await ctx.close();
  }
});

test('(d) a screenshot of the confirmation page', async () => {
  const ctx = await newContext();
  try {
    const { page, errors, subject } = await openCheckout(ctx);
    await page.fill('#name', 'Ada Lovelace');
    await page.selectOption('#quantity', '2');
    assert.equal(await page.locator('#pay').innerText(), 'Pay €48.00');
    await page.screenshot({ path: path.join(artifacts, 'checkout-form.png'), fullPage: true });
    await page.click('#pay');
    await page.locator('.confirmation').waitFor();
    const id = await shownOrderId(page);
    assert.match(await page.locator('.confirmation').innerText(),
      new RegExp(`Thank you, Ada Lovelace![\\s\\S]*Order #${id} is confirmed: 2 × Espresso beans, 1 kg, €48\\.00`));
    const file = path.join(artifacts, 'checkout.png');
    await page.screenshot({ path: file, fullPage: true });
    const png = fs.readFileSync(file);
    assert.ok(png.length > 5000, `${file} has ${png.length} bytes`);
    assert.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'a PNG');
    assert.equal(stack.orders(subject).length, 1);
    assert.deepEqual(errors, []);
    console.log(`  observed (d): screenshot ${file} (${png.length} bytes), order #${id}`);
  } finally {
    await ctx.close();
  }
});
