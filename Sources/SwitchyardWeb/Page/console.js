// Switchyard console (docs/console.md). One module, no dependencies. Everything shown comes from the
// bridge's own publications, sent over one WebSocket as [topic, payload] pairs; every control sends the
// same command a MQTT client would, on the same topic, and shows the bridge's answer where it was given.

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v === true) e.setAttribute(k, '');
    else if (v !== false && v != null) e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
};
const parse = (s) => { try { return JSON.parse(s); } catch { return s; } };

const S = {
  base: '', discovery: 'homeassistant', mirrors: [], auth: false,
  info: null, health: null, status: null,
  list: [],                 // bridge/devices
  details: new Map(),       // "adapter/name" -> bridge/devices/<adapter>/<name>
  byTopic: new Map(),       // state topic -> key
  states: new Map(),        // key -> state object
  avail: new Map(),         // key -> "online" | "offline"
  ha: new Map(),            // "domain.object" -> {state, attrs}
  cards: new Map(),         // key -> {card, update}
  shared: new Set(),        // device names more than one adapter has
  dirty: new Set(), rebuild: false, haDirty: false, logDirty: [],
  nextId: 0, pending: new Map(), synced: false,
};
let ws = null;
let frame = 0;

// ---- the link ------------------------------------------------------------------------------------

function connect(delay = 0) {
  setTimeout(() => {
    // Beside the page, under whatever prefix a reverse proxy gave it (web.base_path, Home Assistant's ingress).
    const url = new URL('ws', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.hash = '';
    ws = new WebSocket(url);
    ws.onopen = () => { link('connected'); delay = 0; mirrored = false; if (route().view === 'ha') subscribe(true); };
    ws.onmessage = (ev) => receive(JSON.parse(ev.data));
    ws.onclose = (ev) => {
      for (const [, p] of S.pending) p.done({ status: 'error', error: 'the connection to the bridge closed' });
      S.pending.clear();
      if (ev.code === 1013) link(`refused: ${ev.reason || 'too many pages open'}; trying again`, true);
      else link('disconnected from the bridge; reconnecting…', true);
      connect(Math.min(10000, Math.max(1000, delay * 2)));
    };
  }, delay);
}

function link(text, down = false) {
  const l = $('link');
  l.textContent = text;
  l.classList.toggle('down', down);
}

function send(obj) { if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(obj)); return true; } return false; }

/// The mirror's topics only while its view is open (the bridge sends everything again when this changes).
let mirrored = false;
function subscribe(force = false) {
  const want = route().view === 'ha';
  if ((want !== mirrored || force) && send({ t: 'sub', mirror: want })) mirrored = want;
}

/// A command or request through the bridge; `done` gets its answer.
function command(topic, payload, done) {
  const id = ++S.nextId;
  if (!send({ t: 'cmd', id, topic, payload })) { done({ status: 'error', error: 'not connected to the bridge' }); return; }
  S.pending.set(id, { done });
}

function receive(m) {
  switch (m.t) {
    case 'hello':
      S.base = m.base; S.discovery = m.discovery_prefix; S.mirrors = m.mirrors; S.auth = !!m.auth;
      $('nav-ha').hidden = S.mirrors.length === 0;
      $('logout').hidden = !S.auth;
      break;
    case 'reset':
      S.synced = false;
      S.list = []; S.details.clear(); S.states.clear(); S.avail.clear(); S.byTopic.clear(); S.ha.clear();
      S.rebuild = true; S.haDirty = true;
      break;
    case 'synced':
      S.synced = true;
      if (route().view === 'settings' && !settingsDrawn) renderSettings();
      if (S.status) renderStatus(); else link('connected');
      break;
    case 'm':
      for (const [topic, payload] of m.m) message(topic, payload);
      break;
    case 'status':
      S.status = m;
      renderStatus();
      break;
    case 'res': {
      const p = S.pending.get(m.id);
      if (p) { S.pending.delete(m.id); p.done(m); }
      break;
    }
    case 'disc':
      renderDiscovery(m.configs);
      break;
  }
  schedule();
}

// ---- what the bridge published -------------------------------------------------------------------

function message(topic, payload) {
  if (!topic.startsWith(S.base + '/')) return;
  const rel = topic.slice(S.base.length + 1);
  if (rel.startsWith('bridge/')) return bridgeMessage(rel.slice(7), payload);
  const mirror = S.mirrors.find((a) => rel.startsWith(a + '/'));
  if (mirror) return mirrorMessage(rel.slice(mirror.length + 1), payload);
  if (rel.endsWith('/availability')) {
    const key = S.byTopic.get(topic.slice(0, -13));
    if (key) { if (payload == null) S.avail.delete(key); else S.avail.set(key, payload); S.dirty.add(key); }
    return;
  }
  const key = S.byTopic.get(topic);
  if (key) {
    if (payload == null) S.states.delete(key); else S.states.set(key, parse(payload));
    S.dirty.add(key);
  } else if (payload != null && !rel.endsWith('/result')) {
    S.states.set(rel, parse(payload));   // listed later: kept under its topic's key
  }
}

function bridgeMessage(leaf, payload) {
  if (leaf === 'info') {
    S.info = payload == null ? null : parse(payload);
    renderBridge();
    // A settings form drawn before the config was known is drawn again with it (never one being edited).
    if (route().view === 'settings' && !settingsDrawn) renderSettings();
  }
  else if (leaf === 'health') { S.health = payload == null ? null : parse(payload); renderBridge(); }
  else if (leaf === 'devices') {
    S.list = payload == null ? [] : parse(payload);
    S.byTopic.clear();
    for (const d of S.list) S.byTopic.set(d.topic, `${d.adapter}/${d.name}`);
    S.rebuild = true;
  } else if (leaf.startsWith('devices/')) {
    const key = leaf.slice(8);
    if (payload == null) S.details.delete(key); else S.details.set(key, parse(payload));
    S.rebuild = true;
  } else if (leaf === 'log' && payload != null) {
    S.logDirty.push(parse(payload));
  }
}

function mirrorMessage(rel, payload) {
  const parts = rel.split('/');
  if (parts.length < 3 || parts[0] === '_event') return;
  const id = `${parts[0]}.${parts[1]}`;
  const field = parts.slice(2).join('/');
  let e = S.ha.get(id);
  if (!e) { e = { state: null, attrs: {} }; S.ha.set(id, e); }
  if (field === 'state') e.state = payload;
  else if (payload == null || payload === '') delete e.attrs[field];
  else e.attrs[field] = parse(payload);
  if (e.state == null && Object.keys(e.attrs).length === 0) S.ha.delete(id);
  S.haDirty = true;
}

// ---- drawing, once per animation frame -----------------------------------------------------------

function schedule() { if (!frame) frame = requestAnimationFrame(draw); }

function draw() {
  frame = 0;
  if (S.rebuild) { S.rebuild = false; buildDevices(); S.dirty.clear(); }
  for (const key of S.dirty) S.cards.get(key)?.update();
  S.dirty.clear();
  if (S.logDirty.length) { appendLog(S.logDirty); S.logDirty = []; }
  if (S.haDirty && route().view === 'ha') { S.haDirty = false; renderHA(); }
  if (route().view === 'device') renderDevicePage(false);
}

const labels = { state: 'power', color: 'colour', color_temp: 'colour temperature', color_mode: 'colour mode' };
const label = (field) => labels[field] ?? field.replaceAll('_', ' ');
const hidden = new Set(['capabilities', 'label', 'model', 'group', 'location', 'app', 'appcode', 'zone_count', 'name']);

/// A device as people and screen readers call it: its name, with its adapter when another adapter has a
/// device of the same name (the demo has a virtual and a LIFX "kitchen").
function spoken(d) { return S.shared.has(d.name) ? `${d.adapter} ${d.name}` : d.name; }

/// Brings the cards in line with the listing. A card whose device, details and spoken name are unchanged
/// is kept (the same element, left where it is), so that a listing sent again, or another device coming or
/// going, never takes the focus or a half-typed value from a control the operator is using.
function buildDevices() {
  const counts = new Map();
  for (const d of S.list) counts.set(d.name, (counts.get(d.name) ?? 0) + 1);
  S.shared = new Set([...counts].filter(([, n]) => n > 1).map(([name]) => name));
  const root = $('adapters');
  const sections = new Map([...root.children].map((s) => [s.dataset.adapter, s]));
  const adapters = [...new Set(S.list.map((d) => d.adapter))];
  const select = $('filter-adapter');
  const chosen = select.value;
  select.replaceChildren(el('option', { value: '', text: 'all' }), ...adapters.map((a) => el('option', { value: a, text: a })));
  select.value = adapters.includes(chosen) ? chosen : '';
  // First what goes, and what changed (drawn anew in its old place): then a kept card moves only when the
  // order itself changed, never because something before it went.
  const next = new Map();
  for (const d of S.list) {
    const key = `${d.adapter}/${d.name}`;
    if (next.has(key)) continue;   // one card a name (the bridge never lists a name twice)
    const early = S.states.get(d.topic.slice(S.base.length + 1));
    if (early !== undefined && !S.states.has(key)) S.states.set(key, early);
    const sig = JSON.stringify([d, S.details.get(key) ?? null, spoken(d)]);
    let c = S.cards.get(key);
    if (c?.sig !== sig) {
      const drawn = card(d, key);
      drawn.sig = sig;
      c?.card.replaceWith(drawn.card);
      c = drawn;
    }
    next.set(key, c);
  }
  for (const [key, c] of S.cards) if (!next.has(key)) c.card.remove();
  for (const [adapter, section] of sections) if (!adapters.includes(adapter)) section.remove();
  S.cards = next;
  let lastSection = null;
  for (const adapter of adapters) {
    const section = sections.get(adapter) ?? el('section', { class: 'adapter', 'data-adapter': adapter, 'aria-label': `${adapter} devices` },
      el('h3', { text: adapter }), el('div', { class: 'cards' }));
    place(root, section, lastSection);
    lastSection = section;
    const cards = section.querySelector(':scope > .cards');
    let last = null;
    const placed = new Set();
    for (const d of S.list) {
      const key = `${d.adapter}/${d.name}`;
      if (d.adapter !== adapter || placed.has(key)) continue;
      placed.add(key);
      const c = next.get(key);
      place(cards, c.card, last);
      last = c.card;
      c.update();
    }
  }
  filter();
}

/// Puts `node` right after `after` (first when null), moving it only when it is not there already: a moved
/// element loses the focus.
function place(parent, node, after) {
  const at = after ? after.nextSibling : parent.firstChild;
  if (at !== node) parent.insertBefore(node, at);
}

function card(d, key) {
  const details = S.details.get(key);
  const caps = details?.capabilities ?? [];
  const badge = el('span', { class: 'badge' });
  const meta = el('span', { class: 'meta' });
  const state = el('div', { class: 'state' });
  const controls = el('div', { class: 'controls' });
  const updates = [];
  for (const c of caps) {
    if (!c.writable) continue;
    if (!c.readable && !['action', 'activate', 'effect'].includes(c.name) && c.type !== 'action') continue;
    const ctl = control(d, c);
    if (ctl) { controls.append(ctl.node); updates.push(ctl.update); }
  }
  const members = memberList(d);
  const node = el('article', { class: 'card', 'data-key': key, 'aria-label': spoken(d) },
    el('header', {},
      el('h4', {}, el('a', { href: `#/device/${key}`, text: d.name })),
      details?.label && details.label !== d.name ? el('span', { class: 'meta', text: details.label }) : null,
      badge, editButton(d)),
    meta, state, members?.node, controls);
  const update = () => {
    const s = S.states.get(key) ?? {};
    const a = S.avail.get(key) ?? 'unknown';
    badge.textContent = a;
    badge.className = `badge ${a}`;
    node.classList.toggle('offline', a === 'offline');
    node.dataset.availability = a;
    const bits = [d.model || details?.model].filter(Boolean);
    if (s.via) bits.push(`via ${s.via}`);
    if (s.last_seen) bits.push(`last seen ${new Date(s.last_seen).toLocaleString()}`);
    meta.textContent = bits.join(' · ');
    state.textContent = Object.entries(s).filter(([k, v]) => !hidden.has(k) && typeof v !== 'object')
      .map(([k, v]) => `${k}: ${v}`).join('  ');
    for (const u of updates) u(s);
    members?.update(s);
  };
  return { card: node, update };
}

/// One control for one writable field, named "<device> <field>" for screen readers and tests.
function control(d, c, full = false) {
  const name = `${spoken(d)} ${label(c.name)}`;
  const error = el('p', { class: 'error', role: 'alert' });
  const topic = `${d.topic}/set`;
  const go = (value) => {
    error.textContent = '';
    command(topic, { [c.name]: value }, (r) => { if (r.status !== 'ok' && r.status !== 'sent') error.textContent = r.error ?? r.status; });
  };
  const row = el('div', { class: 'row' });
  let update = () => {};
  const busy = (e) => document.activeElement === e;
  switch (c.type) {
    case 'binary': {
      const box = el('input', { type: 'checkbox', role: 'switch', 'aria-label': name,
        onchange: () => go(box.checked ? 'ON' : 'OFF') });
      row.append(box);
      update = (s) => { if (!busy(box)) box.checked = s[c.name] === 'ON'; };
      break;
    }
    case 'bool': {
      if (c.name === 'activate') {
        row.append(el('button', { type: 'button', 'aria-label': `${spoken(d)} activate`, text: 'Activate', onclick: () => go(true) }));
        break;
      }
      const box = el('input', { type: 'checkbox', 'aria-label': name, onchange: () => go(box.checked) });
      row.append(box);
      update = (s) => { if (!busy(box)) box.checked = s[c.name] === true; };
      break;
    }
    case 'integer': case 'number': {
      const step = c.type === 'integer' ? 1 : Math.pow(10, -(c.precision ?? 2));
      const range = el('input', { type: 'range', min: c.min, max: c.max, step, 'aria-label': name,
        onchange: () => { value.value = range.value; go(Number(range.value)); } });
      const value = el('input', { type: 'number', step, 'aria-label': `${name} value`,
        onchange: () => { if (value.value !== '') go(Number(value.value)); } });
      row.append(range, value, c.unit ? el('span', { class: 'meta', text: c.unit }) : null);
      if (!c.readable) { range.hidden = true; }
      update = (s) => {
        const v = s[c.name];
        if (typeof v !== 'number') return;
        if (!busy(range)) range.value = v;
        if (!busy(value)) value.value = v;
      };
      break;
    }
    case 'enum': {
      const sel = el('select', { 'aria-label': name, onchange: () => { if (sel.value) go(sel.value); } },
        el('option', { value: '', text: '—' }), ...c.values.map((v) => el('option', { value: v, text: v })));
      row.append(sel);
      update = (s) => { if (!busy(sel) && s[c.name] != null) sel.value = s[c.name]; };
      break;
    }
    case 'action':
      for (const v of c.values) row.append(el('button', { type: 'button', 'aria-label': `${name} ${v}`, text: v, onclick: () => go(v) }));
      break;
    case 'text': {
      const input = el('input', { type: 'text', maxlength: c.max_length, 'aria-label': name });
      row.append(input, el('button', { type: 'button', 'aria-label': `${name} send`, text: 'Set', onclick: () => go(input.value) }));
      update = (s) => { if (!busy(input) && typeof s[c.name] === 'string') input.value = s[c.name]; };
      break;
    }
    case 'object': {
      const members = c.members ?? [];
      const h = members.find((m) => m.name === 'h'), sat = members.find((m) => m.name === 's');
      const effect = members.find((m) => m.name === 'name' && m.type === 'enum');
      if (h && sat) {
        const pick = el('input', { type: 'color', 'aria-label': name, onchange: () => go(hexToHS(pick.value)) });
        row.append(pick);
        update = (s) => { const v = s[c.name]; if (v && typeof v.h === 'number' && !busy(pick)) pick.value = hsToHex(v.h, v.s); };
      } else if (effect && !full) {
        const sel = el('select', { 'aria-label': name }, ...effect.values.map((v) => el('option', { value: v, text: v })));
        row.append(sel, el('button', { type: 'button', 'aria-label': `${name} start`, text: 'Start', onclick: () => go({ name: sel.value }) }));
        update = (s) => { if (!busy(sel) && typeof s[c.name] === 'string' && effect.values.includes(s[c.name])) sel.value = s[c.name]; };
      } else {
        return jsonControl(d, c, name, go, error, example(c));
      }
      break;
    }
    case 'list': {
      const ctl = jsonControl(d, c, name, go, error, example(c));
      if (c.name === 'zones') {
        const bar = el('div', { class: 'zones', 'aria-hidden': 'true' });
        ctl.node.querySelector('.row').before(bar);
        const inner = ctl.update;
        ctl.update = (s) => { inner(s); drawZones(bar, s.zones); };
      }
      return ctl;
    }
    default:
      return null;
  }
  return { node: el('div', { class: 'control', 'data-field': c.name }, el('span', { class: 'label', text: label(c.name) }), row, error), update };
}

/// A field edited as JSON (a strip's zones, an effect with its options): sent as typed.
function jsonControl(d, c, name, go, error, placeholder) {
  const area = el('textarea', { 'aria-label': name, placeholder, spellcheck: 'false' });
  const button = el('button', { type: 'button', 'aria-label': `${name} send`, text: 'Send', onclick: () => {
    try { go(JSON.parse(area.value || placeholder)); } catch (e) { error.textContent = `not JSON: ${e.message}`; }
  } });
  const row = el('div', { class: 'row' }, area, button);
  return { node: el('div', { class: 'control', 'data-field': c.name }, el('span', { class: 'label', text: label(c.name) }), row, error), update: () => {} };
}

function example(c) {
  const one = (x) => {
    switch (x.type) {
      case 'binary': return 'ON';
      case 'bool': return true;
      case 'integer': case 'number':
        if (x.name === 'start') return x.min;
        if (x.name === 'end') return Math.min(x.max, x.min + 7);
        return Math.min(x.max, Math.max(x.min, Math.round((x.min + x.max) / 2)));
      case 'enum': case 'action': return x.values[0];
      case 'text': return x.name.includes('colo') ? 'red' : '';
      case 'object': return Object.fromEntries((x.members ?? []).filter((m) => m.name === 'name' || m.name === 'h' || m.name === 's' || m.name === 'start' || m.name === 'end' || m.name === 'color')
        .map((m) => [m.name, one(m)]));
      case 'list': return [one(x.items)];
      default: return null;
    }
  };
  return JSON.stringify(one(c));
}

function drawZones(bar, zones) {
  if (!Array.isArray(zones)) { bar.hidden = true; return; }
  bar.hidden = false;
  const spans = zones.map((z) => {
    const s = el('span');
    const c = z.color ?? z;
    s.style.background = typeof c.h === 'number' ? `hsl(${c.h} ${c.s ?? 0}% ${50 - (c.s ?? 0) / 4}%)` : '#888';
    return s;
  });
  bar.replaceChildren(...spans);
}

function hexToHS(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
  const max = Math.max(r, g, b), min = Math.min(r, g, b), d = max - min;
  let h = 0;
  if (d) h = max === r ? ((g - b) / d) % 6 : max === g ? (b - r) / d + 2 : (r - g) / d + 4;
  return { h: Math.round((h * 60 + 360) % 360), s: Math.round(max ? (d / max) * 100 : 0) };
}

function hsToHex(h, s) {
  const v = 1, c = v * s / 100, x = c * (1 - Math.abs(((h / 60) % 2) - 1)), m = v - c;
  const [r, g, b] = h < 60 ? [c, x, 0] : h < 120 ? [x, c, 0] : h < 180 ? [0, c, x] : h < 240 ? [0, x, c] : h < 300 ? [x, 0, c] : [c, 0, x];
  return '#' + [r, g, b].map((n) => Math.round((n + m) * 255).toString(16).padStart(2, '0')).join('');
}

function filter() {
  const name = $('filter-name').value.trim().toLowerCase();
  const adapter = $('filter-adapter').value;
  const availability = $('filter-availability').value;
  let shown = 0;
  for (const [key, c] of S.cards) {
    const label = S.details.get(key)?.label ?? '';
    const ok = (!name || key.toLowerCase().includes(name) || label.toLowerCase().includes(name))
      && (!adapter || key.startsWith(adapter + '/'))
      && (!availability || (S.avail.get(key) ?? 'unknown') === availability);
    c.card.hidden = !ok;
    if (ok) shown++;
  }
  for (const sec of document.querySelectorAll('#adapters > section')) sec.hidden = !sec.querySelector('.card:not([hidden])');
  $('device-count').textContent = `${shown} of ${S.cards.size} devices`;
}

// ---- the device page -----------------------------------------------------------------------------

let devicePageKey = null;
let deviceUpdates = [];

function renderDevicePage(rebuild) {
  const key = route().key;
  const d = S.list.find((x) => `${x.adapter}/${x.name}` === key);
  if (!d) { $('device-title').textContent = key; $('device-detail').replaceChildren(el('p', { text: 'No such device (yet).' })); devicePageKey = null; return; }
  const s = S.states.get(key) ?? {};
  if (!rebuild && devicePageKey === key) { for (const u of deviceUpdates) u(s); $('device-state').textContent = JSON.stringify(s, null, 2); return; }
  devicePageKey = key;
  const details = S.details.get(key) ?? {};
  $('device-title').textContent = `${d.name}${details.label && details.label !== d.name ? ` (${details.label})` : ''}`;
  const controls = el('div', { class: 'controls' });
  deviceUpdates = [];
  for (const c of details.capabilities ?? []) {
    if (!c.writable) continue;
    const ctl = control(d, c, true);
    if (ctl) { controls.append(ctl.node); deviceUpdates.push(ctl.update); }
  }
  const broker = brokerArgs();
  const lines = [[`mosquitto_sub${broker} -v -t '${d.topic}' -t '${d.topic}/availability' -t '${d.topic}/result'`]];
  for (const c of details.capabilities ?? []) {
    if (c.writable) lines.push([`mosquitto_pub${broker} -t '${d.topic}/set' -m '${JSON.stringify({ [c.name]: JSON.parse(example(c)) })}'`]);
  }
  lines.push([`mosquitto_pub${broker} -t '${d.topic}/get' -n`]);
  const caps = el('table', {}, el('thead', {}, el('tr', {}, ...['Field', 'Type', 'Range or values', 'Unit', 'Writable', 'Readable'].map((t) => el('th', { text: t })))),
    el('tbody', {}, ...(details.capabilities ?? []).map((c) => el('tr', {},
      el('td', { text: c.name }), el('td', { text: c.type }),
      el('td', { text: c.values ? c.values.join(', ') : c.min != null ? `${c.min} – ${c.max}` : c.members ? c.members.map((m) => m.name).join(', ') : '' }),
      el('td', { text: c.unit ?? '' }), el('td', { text: c.writable ? 'yes' : '' }), el('td', { text: c.readable ? 'yes' : '' })))));
  $('device-detail').replaceChildren(
    el('dl', { class: 'facts' },
      el('dt', { text: 'Adapter' }), el('dd', { text: d.adapter }),
      el('dt', { text: 'Model' }), el('dd', { text: [details.manufacturer, details.model].filter(Boolean).join(' ') }),
      el('dt', { text: 'Id' }), el('dd', { text: d.id }),
      el('dt', { text: 'Availability' }), el('dd', { text: S.avail.get(key) ?? 'unknown' })),
    el('h3', { text: 'Controls' }), controls,
    el('h3', { text: 'State' }), el('pre', { id: 'device-state', text: JSON.stringify(s, null, 2) }),
    el('h3', { text: 'Capabilities' }), caps,
    el('h3', { text: 'Topics' }), ...lines.map(([l]) => copyLine(l)),
    el('h3', { text: 'Home Assistant discovery' }), el('div', { id: 'discovery', text: 'asking the bridge…' }),
    el('h3', { text: 'Options' }), el('div', { id: 'device-options', class: 'manage', text: 'asking the bridge for its schema…' }),
    el('h3', { text: 'Rename' }), renameForm(d),
    el('h3', { text: 'Remove' }), removeForm(d));
  optionsForm(d, $('device-options'));
  for (const u of deviceUpdates) u(s);
  discoveryTries = 0;
  askDiscovery();
}

let discoveryTries = 0;

/// The device page's discovery configs, from the bridge's retained store.
function askDiscovery() {
  const d = S.list.find((x) => `${x.adapter}/${x.name}` === devicePageKey);
  if (d) send({ t: 'disc', id: ++S.nextId, adapter: d.adapter, device_id: d.id });
}

function brokerArgs() {
  const url = S.info?.broker ?? '';
  const m = /^mqtts?:\/\/([^:/]+|\[[^\]]+\]):(\d+)/.exec(url);
  if (!m) return '';
  const host = m[1] === '127.0.0.1' || m[1] === 'localhost' ? '' : ` -h ${m[1]}`;
  const port = m[2] === '1883' ? '' : ` -p ${m[2]}`;
  return host + port;
}

function copyLine(text) {
  const code = el('code', { text });
  return el('div', { class: 'copy' }, code, el('button', { type: 'button', 'aria-label': `copy ${text}`, text: 'Copy', onclick: async (e) => {
    try { await navigator.clipboard.writeText(text); e.target.textContent = 'Copied'; } catch {
      getSelection().selectAllChildren(code); e.target.textContent = 'Selected';
    }
  } }));
}

function renderDiscovery(configs) {
  const box = $('discovery');
  if (!box) return;
  if (!configs.length) {
    box.textContent = 'Nothing announced (discovery is off, or this device has no entity, or not yet: the bridge announces after its first listings).';
    // Asked again a few times: a page opened right after a start asks before the bridge has announced.
    const key = devicePageKey;
    if (discoveryTries++ < 10) setTimeout(() => { if (devicePageKey === key && route().view === 'device') askDiscovery(); }, 3000);
    return;
  }
  box.replaceChildren(el('table', {},
    el('thead', {}, el('tr', {}, ...['Component', 'Entity', 'Name', 'Unique id', 'Config topic'].map((t) => el('th', { text: t })))),
    el('tbody', {}, ...configs.flatMap(([topic, payload]) => {
      const config = parse(payload) ?? {};
      // A device config (`discovery_mode: device`) holds its entities under `components`.
      const entities = config.components ? Object.values(config.components).map((c) => [c.platform, c, config.device])
        : [[topic.split('/').at(-4), config, config.device]];
      return entities.map(([component, c, device]) => el('tr', {}, el('td', { text: component }),
        el('td', { text: c.default_entity_id ?? `${component}.${c.object_id ?? ''}` }),
        el('td', { text: c.name ?? device?.name ?? '' }), el('td', { text: c.unique_id ?? '' }), el('td', { text: topic })));
    }))));
}


// ---- management: settings, device options, rename, remove ----------------------------------------
// Every change goes through the bridge's management requests (docs/topics.md "Management") in two steps:
// its plan (the exact diff of the config file) is shown with Apply and Cancel, and Apply makes exactly that
// change (`plan_id`: refused as a conflict if the file changed meanwhile). Refusals appear next to the key
// they are about, in check-config's words.

let schema = null;

/// The config's JSON Schema, asked once (`config/schema`).
function withSchema(done) {
  if (schema) { done(schema); return; }
  command(`${S.base}/bridge/request/config/schema`, {}, (r) => {
    if (r.status === 'ok') { schema = r.data; done(schema); } else done(null, r.error ?? r.status);
  });
}

/// A key path as people and screen readers say it: `log.level` → "log level".
const spokenPath = (path) => path.replaceAll('.', ' ').replaceAll('_', ' ');

const restartWords = { none: 'applied at once', console: 'restarts the console', adapter: 'restarts its adapter', bridge: 'needs a restart of the bridge' };

/// Where a form shows its errors: each problem next to its key (by key path), the rest under the form.
function errorsOf(general) {
  const byPath = new Map();
  return {
    add(path, p) { byPath.set(path, p); },
    clear() { general.textContent = ''; for (const p of byPath.values()) p.textContent = ''; },
    show(r) {
      const problems = r.details?.problems ?? [];
      let placed = false;
      for (const pr of problems) {
        const at = [...byPath.keys()].find((k) => pr.path === k || pr.path.endsWith('.' + k));
        if (at) { byPath.get(at).textContent = pr.text ?? pr.message; placed = true; }
      }
      if (!placed) general.textContent = r.error ?? r.status;
    },
  };
}

/// A change's two steps in `box`: the plan asked for and shown, then Apply (or Cancel). `name` starts the
/// accessible names of its controls ("settings apply", "kitchen options apply").
function planned(box, name, path, body, errors, onDone) {
  errors.clear();
  box.replaceChildren(el('p', { class: 'note', text: 'asking the bridge for the change…' }));
  command(`${S.base}/bridge/request/${path}`, { ...body, plan: true }, (r) => {
    if (r.status !== 'ok') { box.replaceChildren(); errors.show(r); return; }
    const d = r.data ?? {};
    const apply = el('button', { type: 'button', 'aria-label': `${name} apply`, text: 'Apply', onclick: () => {
      apply.disabled = true;
      command(`${S.base}/bridge/request/${path}`, { ...body, plan_id: d.plan_id }, (c) => {
        if (c.status !== 'ok') { box.replaceChildren(); errors.show(c); return; }
        const restart = c.data?.restart_required ?? [];
        box.replaceChildren(el('p', { class: 'note', role: 'status', 'aria-label': `${name} result`,
          text: `Applied${c.data?.file ? `, written to ${c.data.file}` : ''}.${restart.length ? ` Restart the bridge for: ${restart.join(', ')}.` : ''}` }));
        onDone?.(c);
      });
    } });
    const cancel = el('button', { type: 'button', 'aria-label': `${name} cancel`, text: 'Cancel', onclick: () => box.replaceChildren() });
    box.replaceChildren(
      el('p', { class: 'note', text: d.file ? `The change to ${d.file}, before it is applied:` : 'Nothing is written to the file; applied to the running bridge:' }),
      el('pre', { class: 'diff', 'aria-label': `${name} diff`, text: d.diff || '(no change to the file)' }),
      el('div', { class: 'actions' }, apply, cancel));
  });
}

/// One key's control: its input (by type), what the schema says of it, and where its error goes.
function setting(path, prop, value, name, errors) {
  let input;
  const label = el('label', { text: path });
  if (prop.enum) {
    input = el('select', {}, ...prop.enum.map((v) => el('option', { value: v, text: v })));
    input.value = value ?? prop.default ?? '';
  } else if (prop.type === 'boolean') {
    input = el('input', { type: 'checkbox' });
    input.checked = value ?? prop.default ?? false;
  } else if (prop.type === 'integer' || prop.type === 'number') {
    input = el('input', { type: 'number', step: prop.type === 'integer' ? 1 : 'any', min: prop.minimum, max: prop.maximum });
    input.value = value ?? prop.default ?? '';
  } else if (prop['x-switchyard-secret']) {
    // Never shown: `***` when set; typing a value replaces it.
    input = el('input', { type: 'password', autocomplete: 'off', placeholder: value ? '***' : '' });
  } else if (prop.type === 'array' || prop.oneOf) {
    input = el('input', { type: 'text', spellcheck: 'false' });
    input.value = JSON.stringify(value ?? prop.default ?? (prop.type === 'array' ? [] : null));
  } else {
    input = el('input', { type: 'text', spellcheck: 'false' });
    input.value = value ?? '';
  }
  input.setAttribute('aria-label', name);
  input.id = `setting-${name.replaceAll(' ', '-')}`;
  label.setAttribute('for', input.id);
  const initial = input.type === 'checkbox' ? input.checked : input.value;
  const read = () => {
    const now = input.type === 'checkbox' ? input.checked : input.value;
    if (now === initial) return undefined;
    if (input.type === 'checkbox') return now;
    if (input.type === 'password') return now === '' ? undefined : now;
    if (input.type === 'number') return now === '' ? null : Number(now);
    if (prop.type === 'array' || prop.oneOf) { try { return JSON.parse(now); } catch { return now; } }
    return now === '' ? null : now;
  };
  const bits = [prop.description ?? ''];
  if (prop.default !== undefined) bits.push(`default ${JSON.stringify(prop.default)}`);
  if (prop.minimum !== undefined || prop.maximum !== undefined) bits.push(`range ${prop.minimum ?? '…'}–${prop.maximum ?? '…'}`);
  bits.push(restartWords[prop['x-switchyard-restart']] ?? '');
  const error = el('p', { class: 'error', role: 'alert', 'aria-label': `${name} error` });
  errors.add(path, error);
  return { node: el('div', { class: 'setting', 'data-path': path }, label, input, el('span', { class: 'about', text: bits.filter(Boolean).join(' · ') }), error),
           read, path };
}

/// Bridge → Settings: every section of the file the bridge reads (an upstream's only when configured), its
/// keys with their description, default, range and what a change takes. Per-device options are on each
/// device's page; lists and maps (devices, names) are edited in the file.
let settingsDrawn = false;

function renderSettings() {
  const form = $('settings');
  settingsDrawn = false;
  form.replaceChildren(el('p', { class: 'note', text: 'asking the bridge for its schema…' }));
  withSchema((sc, err) => {
    if (!sc) { form.replaceChildren(el('p', { class: 'error', role: 'alert', text: `no schema: ${err}` })); return; }
    const cfg = S.info?.config ?? {};
    settingsDrawn = !!S.info;
    const general = el('p', { class: 'error', role: 'alert', 'aria-label': 'settings error' });
    const errors = errorsOf(general);
    const fields = [];
    const group = (node, prefix, values, depth) => {
      const kids = [];
      for (const key of node['x-switchyard-order'] ?? Object.keys(node.properties ?? {})) {
        const prop = node.properties[key];
        const path = prefix ? `${prefix}.${key}` : key;
        if (prop.type === 'object' && prop.properties && Object.keys(prop.properties).length) {
          if (depth === 0 && key === 'devices') continue;
          if (depth === 0 && !(key in cfg)) continue;
          if (prop.additionalProperties && prop.additionalProperties !== false) continue;
          kids.push(el('fieldset', { 'aria-label': `${spokenPath(path)} settings` }, el('legend', { text: path }),
            prop.description ? el('p', { class: 'note', text: prop.description }) : null, ...group(prop, path, values?.[key] ?? {}, depth + 1)));
        } else if (prop.type === 'object' || (prop.type === 'array' && prop.items?.type === 'object')) {
          continue;
        } else {
          const f = setting(path, prop, values?.[key], spokenPath(path), errors);
          fields.push(f);
          kids.push(f.node);
        }
      }
      return kids;
    };
    const sections = group(sc, '', cfg, 0);
    const plan = el('div', { class: 'plan' });
    const save = el('button', { type: 'submit', 'aria-label': 'save settings', text: 'Save' });
    form.onsubmit = (e) => {
      e.preventDefault();
      const options = {};
      for (const f of fields) { const v = f.read(); if (v !== undefined) options[f.path] = v; }
      if (!Object.keys(options).length) { errors.clear(); plan.replaceChildren(el('p', { class: 'note', text: 'Nothing changed.' })); return; }
      planned(plan, 'settings', 'options', { options }, errors);
    };
    form.replaceChildren(...sections, el('div', { class: 'actions' }, save), general, plan);
  });
}

/// The device's per-device options (docs/topics.md "Per-device options"), as `device/options` sets them.
function optionsForm(d, box) {
  withSchema((sc, err) => {
    const opts = sc?.properties?.devices?.properties?.[d.adapter]?.additionalProperties?.properties;
    if (!opts) { box.textContent = sc ? 'This adapter has no per-device options.' : `no schema: ${err}`; return; }
    const current = S.info?.config?.devices?.[d.adapter]?.[d.id] ?? {};
    const general = el('p', { class: 'error', role: 'alert', 'aria-label': `${d.name} options error` });
    const errors = errorsOf(general);
    const fields = [];
    const add = (node, prefix, values) => {
      const out = [];
      for (const key of node['x-switchyard-order'] ?? Object.keys(node.properties)) {
        const prop = node.properties[key];
        const path = prefix ? `${prefix}.${key}` : key;
        if (path === 'name' || (prop.type === 'object' && prop.additionalProperties && prop.additionalProperties !== false)) continue;
        if (prop.type === 'object') { out.push(...add(prop, path, values?.[key] ?? {})); continue; }
        const f = setting(path, prop, values?.[key], `${d.name} ${spokenPath(path)}`, errors);
        fields.push({ ...f, prop });
        out.push(f.node);
      }
      return out;
    };
    const rows = add(sc.properties.devices.properties[d.adapter].additionalProperties, '', current);
    const plan = el('div', { class: 'plan' });
    const save = el('button', { type: 'button', 'aria-label': `${d.name} options save`, text: 'Save options', onclick: () => {
      const options = {};
      for (const f of fields) {
        let v = f.read();
        if (v === undefined) continue;
        // Back to the bridge's own value: the option goes from the file.
        if (JSON.stringify(v) === JSON.stringify(f.prop.default)) v = null;
        const parts = f.path.split('.');
        if (parts.length === 2) { options[parts[0]] = { ...(options[parts[0]] ?? {}), [parts[1]]: v }; } else options[f.path] = v;
      }
      if (!Object.keys(options).length) { plan.replaceChildren(el('p', { class: 'note', text: 'Nothing changed.' })); return; }
      planned(plan, `${d.name} options`, 'device/options', { adapter: d.adapter, device: d.name, options }, errors);
    } });
    box.replaceChildren(...rows, el('div', { class: 'actions' }, save), general, plan);
  });
}

/// Rename: new topics, the old ones cleared, the same Home Assistant entity (its ids too, if asked).
function renameForm(d) {
  const to = el('input', { type: 'text', 'aria-label': `${d.name} rename`, spellcheck: 'false', value: d.name });
  const anew = el('input', { type: 'checkbox', 'aria-label': `${d.name} homeassistant rename` });
  const general = el('p', { class: 'error', role: 'alert', 'aria-label': `${d.name} rename error` });
  const errors = errorsOf(general);
  errors.add('to', general);
  const plan = el('div', { class: 'plan' });
  const save = el('button', { type: 'button', 'aria-label': `${d.name} rename save`, text: 'Rename', onclick: () => {
    planned(plan, `${d.name} rename`, 'device/rename', { adapter: d.adapter, device: d.name, to: to.value, homeassistant_rename: anew.checked }, errors,
      (c) => { location.hash = `#/device/${d.adapter}/${c.data.to}`; });
  } });
  return el('div', { class: 'manage' },
    el('div', { class: 'row' }, el('label', { text: 'New name' }), to, el('label', {}, anew, ' Home Assistant entity ids follow it'), save),
    general, plan);
}

/// Remove: forgotten (topics cleared; a device the config defines leaves it), or blocked (disabled).
function removeForm(d) {
  const block = el('input', { type: 'checkbox', 'aria-label': `${d.name} block` });
  const general = el('p', { class: 'error', role: 'alert', 'aria-label': `${d.name} remove error` });
  const errors = errorsOf(general);
  const plan = el('div', { class: 'plan' });
  const go = el('button', { type: 'button', 'aria-label': `${d.name} remove`, text: 'Remove', onclick: () => {
    planned(plan, `${d.name} remove`, 'device/remove', { adapter: d.adapter, device: d.name, block: block.checked }, errors,
      () => { location.hash = '#/'; });
  } });
  return el('div', { class: 'manage' },
    el('div', { class: 'row' }, el('label', {}, block, ' Block it (disabled until enabled again)'), go), general, plan);
}

// ---- the bridge ----------------------------------------------------------------------------------

function facts(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
}

function renderBridge() {
  const info = S.info ?? {};
  facts($('bridge-facts'), [['Version', info.version ?? '?'], ['Started', info.started_at ?? '?'], ['Broker', info.broker ?? '?'],
    ['Base topic', info.mqtt?.base_topic ?? S.base], ['MQTT', `${info.mqtt?.protocol ?? ''} as ${info.mqtt?.client_id ?? ''}`],
    ['Log level', info.log_level ?? '?'], ['Restart required for', (info.restart_required ?? []).join(', ') || 'nothing']]);
  $('config').textContent = JSON.stringify(info.config ?? {}, null, 2);
  renderLive();
}

/// The `mqtt` figures of bridge/health, one fact each: what the broker's CONNACK said (`broker`, an object) one
/// fact per member ("mqtt broker receive maximum"), `not said` where it said nothing (or the link is 3.1.1).
const mqttFacts = (mqtt) => Object.entries(mqtt ?? {}).flatMap(([k, v]) => v !== null && typeof v === 'object'
  ? Object.entries(v).map(([m, x]) => [`mqtt ${k} ${m}`.replaceAll('_', ' '), x ?? 'not said'])
  : [[`mqtt ${k.replaceAll('_', ' ')}`, v]]);

/// What the bridge says every 2 s (`status`), or else its last bridge/health.
function renderLive() {
  const live = S.status ?? S.health ?? {};
  const info = S.info ?? {};
  const tbody = $('adapter-table').tBodies[0];
  tbody.replaceChildren(...Object.entries(info.adapters ?? {}).map(([id, status]) => {
    const h = live.adapters?.[id] ?? {};
    const st = h.status ?? status;
    const cls = st === 'running' ? 'ok' : st.startsWith('error') ? 'bad' : 'warn';
    return el('tr', {}, el('td', { text: id }), el('td', { class: cls, text: st }), el('td', { text: h.devices ?? '' }),
      el('td', { text: h.requests ?? '' }), el('td', { text: h.errors ?? '' }), el('td', { text: h.last_error ?? '' }));
  }));
  facts($('health'), [['Ready', S.status ? (S.status.ready ? 'yes' : `no: ${S.status.reasons.join(', ')}`) : '?'],
    ['Uptime', live.uptime != null ? `${Math.round(live.uptime)} s` : '?'],
    ['Resident memory', live.rss_bytes ? `${(live.rss_bytes / 1048576).toFixed(1)} MB` : '?'],
    ...mqttFacts(live.mqtt)]);
  // Under hot standby: every instance of the group with its role, this one marked.
  const sb = live.standby;
  $('instances-box').hidden = !sb;
  if (sb) {
    $('instance-table').tBodies[0].replaceChildren(...Object.entries(sb.group ?? {}).sort(([a], [b]) => a.localeCompare(b)).map(([name, role]) =>
      el('tr', {}, el('td', { text: name === sb.instance ? `${name} (this instance, ${sb.takeovers} takeovers)` : name }),
        el('td', { class: role === 'active' ? 'ok' : role === 'offline' ? 'bad' : 'warn', text: role }))));
  }
  const limits = Object.entries(live.limits ?? {});
  facts($('limits'), limits.length ? limits : [['none', 'no bound has been hit']]);
}

function renderStatus() {
  const s = S.status;
  if (!s) return;
  link(`${s.ready ? 'ready' : 'not ready: ' + (s.reasons ?? []).join(', ')} · broker ${s.mqtt?.connected ? 'connected' : 'disconnected'}`, !s.mqtt?.connected);
  if (route().view === 'bridge') renderLive();
}

function request(path, button) {
  const out = $('request-result');
  button.disabled = true;
  out.textContent = `${path}…`;
  command(`${S.base}/bridge/request/${path}`, {}, (r) => {
    button.disabled = false;
    out.textContent = r.status === 'ok' ? `${path}: ok ${JSON.stringify(r.data ?? {})}` : `${path}: ${r.error ?? r.status}`;
  });
}

// ---- the log -------------------------------------------------------------------------------------

const rank = { info: 0, warning: 1, error: 2 };

function appendLog(entries) {
  const list = $('log');
  const min = rank[$('log-level').value] ?? -1;
  for (const e of entries) {
    const level = e.level ?? 'info';
    const li = el('li', { class: level, 'data-level': level },
      el('time', { text: new Date().toLocaleTimeString() }), `${level}: ${e.message ?? ''}${e.topic ? `  (${e.topic})` : ''}`);
    li.hidden = (rank[level] ?? 0) < min;
    list.prepend(li);
  }
  while (list.children.length > 500) list.lastChild.remove();
}

function filterLog() {
  const min = rank[$('log-level').value] ?? -1;
  for (const li of $('log').children) li.hidden = (rank[li.dataset.level] ?? 0) < min;
}

// ---- the Home Assistant mirror -------------------------------------------------------------------

function renderHA() {
  const q = $('ha-filter').value.trim().toLowerCase();
  const rows = [];
  let shown = 0;
  for (const [id, e] of [...S.ha].sort(([a], [b]) => a.localeCompare(b))) {
    const name = e.attrs.friendly_name ?? '';
    if (q && !id.includes(q) && !String(name).toLowerCase().includes(q)) continue;
    shown++;
    if (rows.length < 1000) {
      rows.push(el('tr', {}, el('td', { text: id }), el('td', { text: name }), el('td', { text: e.state ?? '' }),
        el('td', { class: 'meta', text: Object.entries(e.attrs).filter(([k]) => k !== 'friendly_name').map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join('  ') })));
    }
  }
  $('ha-table').tBodies[0].replaceChildren(...rows);
  $('ha-count').textContent = `${shown} of ${S.ha.size} entities${shown > rows.length ? ` (first ${rows.length} shown)` : ''}`;
}

// ---- views ---------------------------------------------------------------------------------------

function route() {
  const h = location.hash.replace(/^#\/?/, '');
  if (h.startsWith('device/')) return { view: 'device', key: decodeURIComponent(h.slice(7)) };
  if (h === 'bridge/settings') return { view: 'settings' };
  if (h === 'bridge' || h === 'log' || h === 'ha') return { view: h };
  return { view: 'devices' };
}

function show() {
  const r = route();
  for (const v of ['devices', 'device', 'bridge', 'settings', 'log', 'ha']) $(`view-${v}`).hidden = v !== r.view;
  for (const v of ['devices', 'bridge', 'log', 'ha']) {
    const a = $(`nav-${v}`);
    if ((r.view === v) || (v === 'devices' && r.view === 'device') || (v === 'bridge' && r.view === 'settings')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (r.view === 'device') renderDevicePage(true);
  if (r.view === 'settings') renderSettings();
  if (r.view === 'ha') { S.haDirty = false; renderHA(); }
  subscribe();
}

addEventListener('hashchange', show);
$('filter-name').addEventListener('input', filter);
$('filter-adapter').addEventListener('change', filter);
$('filter-availability').addEventListener('change', filter);
$('log-level').addEventListener('change', filterLog);
$('log-clear').addEventListener('click', () => $('log').replaceChildren());
$('ha-filter').addEventListener('input', renderHA);
for (const b of document.querySelectorAll('[data-request]')) b.addEventListener('click', () => request(b.dataset.request, b));
show();
connect();

// ---- groups and scenes ---------------------------------------------------------------------------
// A group's card lists its members with their availability (from the group's state, which the bridge
// derives); a group and a scene are made and edited with the bridge's requests (group/add, group/members/…,
// scene/store, …: docs/topics.md "Groups and scenes"), which write the config file.

/// A group's members (each with its availability) or a scene's, on its card; null for any other device.
function memberList(d) {
  if (d.adapter !== 'group' && d.adapter !== 'scene') return null;
  const list = el('ul', { class: 'members', 'aria-label': `${d.adapter} ${d.name} members` });
  const update = (s) => {
    const entries = d.adapter === 'group' ? Object.entries(s.members ?? {}) : (s.members ?? []).map((m) => [m, null]);
    list.replaceChildren(...entries.map(([m, a]) => el('li', { 'data-member': m, 'data-availability': a ?? '' },
      el('a', { href: `#/device/${m}`, text: m }), a ? el('span', { class: `badge ${a}`, text: a }) : null)));
  };
  return { node: list, update };
}

function editButton(d) {
  if (d.adapter !== 'group' && d.adapter !== 'scene') return null;
  return el('button', { type: 'button', class: 'edit', 'aria-label': `${spoken(d)} edit`, text: 'Edit', onclick: () => edit(d.adapter, d.name) });
}

/// Fills the group's or the scene's form with what the config says of it (bridge/info) and opens the editor.
function edit(kind, name) {
  const editor = $('groups-editor');
  editor.open = true;
  const config = S.info?.config ?? {};
  if (kind === 'group') {
    const g = config.groups?.[name] ?? {};
    $('group-name').value = name;
    $('group-mode').value = g.state_mode ?? 'any';
    pickers.group.set(new Set(g.members ?? []));
    $('group-name').focus();
  } else {
    const sc = config.scenes?.[name] ?? {};
    $('scene-name').value = name;
    $('scene-transition').value = sc.transition ?? '';
    pickers.scene.set(new Set(Object.keys(sc.states ?? {})));
    $('scene-name').focus();
  }
}

/// A list of checkboxes, one per device (and group), with a filter: what a group or a scene is made of.
function picker(kind) {
  const box = $(`${kind}-members`);
  const find = el('input', { type: 'search', placeholder: 'kitchen', 'aria-label': `find ${kind} members`, autocomplete: 'off' });
  const list = el('div', { class: 'picks' });
  box.append(el('label', {}, 'Find ', find), list);
  let chosen = new Set();
  const draw = () => {
    const q = find.value.trim().toLowerCase();
    const keys = S.list.filter((d) => d.adapter !== 'scene' && !S.mirrors.includes(d.adapter)).map((d) => `${d.adapter}/${d.name}`);
    for (const k of chosen) if (!keys.includes(k)) keys.push(k);   // kept though not listed now (shown as missing on its card)
    list.replaceChildren(...keys.filter((k) => !q || k.toLowerCase().includes(q) || chosen.has(k)).map((k) => {
      const c = el('input', { type: 'checkbox', value: k, 'aria-label': `${kind} member ${k}`, onchange: () => { if (c.checked) chosen.add(k); else chosen.delete(k); } });
      c.checked = chosen.has(k);
      return el('label', { class: 'pick' }, c, ` ${k}`);
    }));
  };
  find.addEventListener('input', draw);
  return { draw, set: (s) => { chosen = s; draw(); }, get: () => [...chosen] };
}

const pickers = {};

/// Sends one bridge request; `out` shows its answer. Resolves to whether it went well.
function ask(path, body, out) {
  return new Promise((resolve) => {
    out.textContent = `${path}…`;
    command(`${S.base}/bridge/request/${path}`, body, (r) => {
      const ok = r.status === 'ok';
      out.textContent = ok ? `${path}: done` : `${path}: ${r.error ?? r.status}`;
      out.classList.toggle('bad', !ok);
      resolve(ok);
    });
  });
}

async function saveGroup(e) {
  e.preventDefault();
  const out = $('group-result');
  const name = $('group-name').value.trim();
  const members = pickers.group.get();
  const existing = S.info?.config?.groups?.[name];
  if (!name) { out.textContent = 'a group needs a name'; return; }
  if (!existing) { await ask('group/add', { name, members, state_mode: $('group-mode').value }, out); return; }
  const had = existing.members ?? [];
  const add = members.filter((m) => !had.includes(m)), drop = had.filter((m) => !members.includes(m));
  if (add.length && !(await ask('group/members/add', { group: name, members: add }, out))) return;
  if (drop.length && !(await ask('group/members/remove', { group: name, members: drop }, out))) return;
  if (!add.length && !drop.length) out.textContent = 'nothing changed (the state mode is set when a group is made)';
}

async function saveScene(e) {
  e.preventDefault();
  const out = $('scene-result');
  const name = $('scene-name').value.trim();
  const members = pickers.scene.get();
  if (!name) { out.textContent = 'a scene needs a name'; return; }
  const body = { name };
  if (members.length) body.members = members;
  const t = $('scene-transition').value;
  if (t !== '') body.transition = Number(t);
  await ask('scene/store', body, out);
}

function groupsEditor() {
  pickers.group = picker('group');
  pickers.scene = picker('scene');
  $('groups-editor').addEventListener('toggle', () => { pickers.group.draw(); pickers.scene.draw(); });
  $('group-form').addEventListener('submit', saveGroup);
  $('scene-form').addEventListener('submit', saveScene);
  $('group-remove').addEventListener('click', () => ask('group/remove', { name: $('group-name').value.trim() }, $('group-result')));
  $('scene-remove').addEventListener('click', () => ask('scene/remove', { name: $('scene-name').value.trim() }, $('scene-result')));
  $('scene-recall').addEventListener('click', () => {
    const body = { name: $('scene-name').value.trim() };
    const t = $('scene-transition').value;
    if (t !== '') body.transition = Number(t);
    ask('scene/recall', body, $('scene-result'));
  });
}
groupsEditor();
