// The checkout page's script: submits the form through idemd's gateway with
// the token the shop put in data-idempotency-token, and shows the outcome.
import { submitWithToken } from '/idemd.js';

const form = document.getElementById('checkout');
const statusLine = document.getElementById('status');
const result = document.getElementById('result');
const stale = document.getElementById('stale');
const unitCents = Number(form.dataset.unitPriceCents);

const money = (cents) => `€${(cents / 100).toFixed(2)}`;

function say(text) {
  statusLine.textContent = text;
}

function updateTotal() {
  const q = Number(document.getElementById('quantity').value);
  document.getElementById('total').textContent = money(unitCents * q);
  document.getElementById('pay-amount').textContent = money(unitCents * q);
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

// Shown once: a second success for the same order (a replay) changes nothing.
function showConfirmation(res) {
  const order = res.body;
  if (result.querySelector(`.confirmation[data-order-id="${order.order_id}"]`)) return;
  result.replaceChildren(el('div', {
    class: 'confirmation',
    'data-order-id': String(order.order_id),
    'data-replayed': String(res.replayed),
    'data-attempts': String(res.attempts),
  },
  el('h2', null, `Thank you, ${order.name}!`),
  el('p', { class: 'order' }, `Order #${order.order_id} is confirmed: `,
     el('b', null, `${order.quantity} × ${order.item}`), `, ${money(order.amount_cents)}.`),
  el('p', { class: 'fine' }, `Placed ${order.created_at.replace('T', ' ').replace('Z', ' UTC')}. ` +
     'Paying once is guaranteed: a second click or a retry replays this order, never a new one.')));
  document.getElementById('checkout-view').hidden = true;
  result.hidden = false;
  const count = document.getElementById('orders-count');
  count.textContent = String(Number(count.textContent) + 1);
}

function showStale() {
  document.getElementById('checkout-view').hidden = true;
  stale.hidden = false;
}

function showError(res) {
  const detail = res.problem ? res.problem.detail : `HTTP ${res.status}`;
  say(`The order was not accepted: ${detail}`);
}

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  say('Paying…');
  try {
    const res = await submitWithToken(form, {
      as: 'json',
      submitter: event.submitter,
      onRetry: (info) => say(info.status
        ? 'The order is still being processed, checking again…'
        : 'Connection problem, retrying…'),
      onStale: showStale,
    });
    if (res.ok) showConfirmation(res);
    else if (!res.stale) showError(res);
  } catch (e) {
    // gave up after the retries: the same token may be tried again safely
    say('We could not reach the shop. Nothing is charged twice: press Pay to try again.');
  }
});

document.getElementById('quantity').addEventListener('change', updateTotal);
document.getElementById('reload').addEventListener('click', () => location.reload());
document.documentElement.dataset.ready = 'true';
