// precast operations board: plain modern JavaScript, no third-party code.
// Data: GET /v1/board/fleet (snapshot with its change sequence), then one event stream
// (/v1/board/stream, resumed with Last-Event-ID) whose rows are applied once per animation
// frame. Only the rows in view are in the DOM. The board is a speculative client: it sends
// prefetch hints for rows scrolled into view or hovered, and beacons with the real
// input-to-shown time and the answer's Server-Timing, its wait.* and age.* entries kept apart
// (docs/board.md). The columns, filters and detail fields come from the fleet spec, with every
// snapshot (layout.js).

import { Layout } from "./layout.js";

let L = null; // the board's layout (columns, filters, detail) from the latest snapshot
const PREFETCH_EVERY_MS = 30_000; // a device hinted once is not hinted again for this long
const BEACON_FLUSH_MS = 5_000;
const PAINTS_KEPT = 5_000;
const MISS_WAIT_MAX_MS = 10_000; // a miss's wait for the computed answer is reported after this
const ASKING = new Set(["expired", "purged"]); // fallbacks for which a computed answer is coming
// A W3C version-00 trace context (the read's traceresponse), as the API accepts it in a beacon.
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem("precast-token") || "",
  col: {},           // column name -> index in a row array
  byId: new Map(),   // device -> row array (server order of `columns`)
  view: [],          // device IDs after filter and sort
  sort: "device_id", desc: false,
  filters: {}, q: "",
  selected: -1,      // index into view
  pending: new Map(), // rows received, not yet applied
  lastSeq: null, frameAsked: false, viewDirty: false, rendered: new Map(),
  hinted: new Map(), hoverTimer: 0, visibleTimer: 0,
  timings: [], facets: {}, open: null, stream: null, viewVersion: 0, visibleKey: "",
  miss: null,        // the open device's view while its fallback waits for the computed answer
};
// What tests and the benchmark read: when each row update reached the DOM.
const board = (window.precastBoard = { ready: false, paints: [], frames: 0, resets: 0, errors: 0 });

function headers(extra = {}) {
  const h = { ...extra };
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

async function api(path, init = {}) {
  const res = await fetch(path, { ...init, headers: headers(init.headers), cache: "no-store" });
  if (res.status === 401) { askToken(); throw new Error("unauthorized"); }
  return res;
}

function askToken() {
  const f = $("auth");
  if (!f.hidden) return;
  f.hidden = false;
  setConn("token needed", false);
  $("token").focus();
}

// -- formatting ---------------------------------------------------------------------------------
function fmtAge(ms) {
  if (ms == null) return "–";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}
const fmtPct = (x) => (x == null ? "–" : `${(x * 100).toFixed(1)} %`);
const fmtTime = (ms) => (ms == null ? "–" : new Date(ms).toISOString().replace("T", " ").slice(0, 23) + "Z");
const fmtRate = (x) => (x == null ? "–" : x >= 100 ? Math.round(x).toLocaleString() : x.toFixed(1));

// A validity lease (docs/board.md): every row whose answer it may extend gets its new validity
// here, so quiet devices cost the stream one small event per partition, not a row each (lease
// column: [partition, generation, until_ms, own valid_until, certified_at, strategy, score,
// computed_at]).
function applyLeases(leases) {
  const c = state.col;
  if (c.lease == null) return;
  for (const x of leases) {
    for (const r of state.byId.values()) {
      const l = r[c.lease];
      if (!l || l[0] !== x.partition || l[1] > x.generation) continue;
      const until = Math.min(x.valid_until_ms, l[2]);
      if (until <= l[3] || until <= (r[c.valid_until_ms] ?? 0)) continue;
      r[c.valid_until_ms] = until;
      l[4] = x.certified_at_ms;
      if (r[c.source] !== "precomputed") {  // expired until now: the answer it keeps is shown
        r[c.source] = "precomputed";
        r[c.strategy] = l[5]; r[c.score] = l[6]; r[c.computed_at_ms] = l[7];
        r[c.delay_origin] = "cache"; // held valid by the lease (docs/api.md, the age's segments)
      }
    }
  }
}

// -- filtering and sorting (what a column holds: layout.js) ------------------------------------------
function matches(r) {
  return L.matches(r, state.filters, state.q);
}

function rebuildView() {
  if (!L) return; // no snapshot yet: nothing to show
  const key = L.sortKey(state.sort);
  const sign = state.desc ? -1 : 1;
  const keep = state.view[state.selected];
  const rows = [];
  for (const r of state.byId.values()) if (matches(r)) rows.push(r);
  const k = rows.map(key);
  const idx = rows.map((_, i) => i);
  idx.sort((a, b) => {
    const x = k[a], y = k[b];
    if (x === y) return rows[a][0] < rows[b][0] ? -1 : 1;
    if (x == null) return 1;
    if (y == null) return -1;
    return (x < y ? -1 : 1) * sign;
  });
  state.view = idx.map((i) => rows[i][0]);
  state.viewVersion++;
  state.selected = keep ? state.view.indexOf(keep) : -1;
  state.viewDirty = false;
  $("count").textContent = `(${state.view.length.toLocaleString()} of ${state.byId.size.toLocaleString()})`;
  // Screen readers learn the full size of the list although only a screenful is in the DOM.
  $("fleet-grid").querySelector("table").setAttribute("aria-rowcount", String(state.view.length + 1));
}

// -- virtualised rendering --------------------------------------------------------------------------
let rowH = 28;
const tbody = () => $("rows");
const pool = [];
let topPad, bottomPad;

function makeRow() {
  const n = L.display.length;
  const tr = document.createElement("tr");
  for (let i = 0; i < n; i++) tr.appendChild(document.createElement("td"));
  tr._row = null; tr._id = null; tr._txt = new Array(n).fill(null); tr._cls = new Array(n).fill("");
  return tr;
}

function spacer() {
  const tr = document.createElement("tr");
  tr.className = "spacer";
  tr.setAttribute("aria-hidden", "true");
  const td = document.createElement("td");
  td.colSpan = L ? L.display.length : 1;
  tr.appendChild(td);
  return tr;
}

function render() {
  if (!L) return;
  const grid = $("fleet-grid");
  const headH = grid.querySelector("thead").offsetHeight || rowH;
  const height = Math.max(grid.clientHeight - headH, rowH);
  const first = Math.max(0, Math.floor(grid.scrollTop / rowH) - 3);
  const count = Math.min(state.view.length - first, Math.ceil(height / rowH) + 6);
  while (pool.length < count) { const tr = makeRow(); pool.push(tr); tbody().insertBefore(tr, bottomPad); }
  topPad.style.height = `${first * rowH}px`;
  bottomPad.style.height = `${Math.max(0, state.view.length - first - count) * rowH}px`;
  const now = Date.now();
  state.rendered.clear();
  for (let i = 0; i < pool.length; i++) {
    const tr = pool[i];
    if (i >= count) { tr.hidden = true; tr._id = null; tr._row = null; continue; }
    tr.hidden = false;
    const id = state.view[first + i];
    const r = state.byId.get(id);
    const changed = tr._row !== r;
    const sameDevice = tr._id === id;
    tr._id = id; tr._row = r;
    tr.dataset.id = id;
    tr.setAttribute("aria-rowindex", String(first + i + 2));
    const sel = first + i === state.selected;
    tr.classList.toggle("sel", sel);
    if (sel) tr.id = "sel-row"; else if (tr.id) tr.removeAttribute("id");
    tr.setAttribute("aria-selected", sel ? "true" : "false");
    for (let j = 0; j < tr._txt.length; j++) {
      const v = L.cell(r, j, now);
      if (tr._txt[j] !== v) { tr.cells[j].textContent = v; tr._txt[j] = v; }
      const cls = L.cellClass(r, j, now);
      if (tr._cls[j] !== cls) { tr.cells[j].className = cls; tr._cls[j] = cls; }
    }
    state.rendered.set(id, tr);
    if (changed && sameDevice) paint(r, now);
  }
  if (state.selected >= 0) $("fleet-grid").setAttribute("aria-activedescendant", "sel-row");
  board.frames++;
  // Hints follow what is in view: only when the visible set changed (scroll, filter, sort),
  // not on every frame of updates (which would also keep postponing them).
  const key = `${first}:${count}:${state.viewVersion}`;
  if (key !== state.visibleKey) { state.visibleKey = key; scheduleVisibleHints(); }
}

function paint(r, now) {
  const p = board.paints;
  p.push([r[0], r[state.col.computed_at_ms], now]);
  if (p.length > PAINTS_KEPT) p.splice(0, p.length - PAINTS_KEPT);
}

function requestFrame() {
  if (state.frameAsked) return;
  state.frameAsked = true;
  requestAnimationFrame(frame);
}

function frame() {
  state.frameAsked = false;
  let grew = false;
  const openChanged = state.open != null && state.pending.has(state.open);
  for (const [id, r] of state.pending) {
    if (!state.byId.has(id)) grew = true;
    const old = state.byId.get(id);
    state.byId.set(id, r);
    if (!state.viewDirty && old && (matches(old) !== matches(r))) state.viewDirty = true;
    noteFacets(r);
  }
  state.pending.clear();
  if (grew) state.viewDirty = true;
  if (state.viewDirty) rebuildView();
  render();
  if (openChanged) refreshOpen();
}

// -- snapshot and stream ------------------------------------------------------------------------------
async function loadSnapshot() {
  const res = await api(`/v1/board/fleet?limit=50000&sort=device_id`);
  if (!res.ok) throw new Error(`fleet: HTTP ${res.status}`);
  const doc = await res.json();
  if (!L || L.key !== JSON.stringify(doc.layout)) useLayout(doc.layout);
  state.byId = new Map(doc.rows.map((r) => [r[0], r]));
  state.lastSeq = doc.seq;
  state.facets = {};
  for (const [k, vals] of Object.entries(doc.facets)) state.facets[k] = new Set(vals.map(String));
  for (const r of doc.rows) noteFacets(r);
  L.fillFilters(state.facets);
  const t = $("truncated");
  t.hidden = doc.total <= doc.rows.length;
  t.textContent = `Showing the first ${doc.rows.length.toLocaleString()} of ${doc.total.toLocaleString()} devices.`;
  rebuildView();
  render();
}

function noteFacets(r) {
  let grew = false;
  for (const k of L.growing) {
    const v = r[state.col[k]];
    if (v == null || v === "") continue;
    const s = String(v);
    if (state.facets[k] && !state.facets[k].has(s)) { state.facets[k].add(s); grew = true; }
  }
  if (grew) L.fillFilters(state.facets);
}

// A new layout (the first snapshot, or a replica of another fleet spec): header, filters and
// row cells are built again from it; rows of the old layout are dropped.
function useLayout(doc) {
  L = new Layout(doc, { age: fmtAge, time: fmtTime });
  state.col = L.col;
  state.filters = {};
  if (!(state.sort in L.col) && state.sort !== "age_ms") { state.sort = "device_id"; state.desc = false; }
  for (const tr of pool) tr.remove();
  pool.length = 0;
  topPad.cells[0].colSpan = bottomPad.cells[0].colSpan = L.display.length;
  buildHead();
  L.buildFilters($("filters"), (k, v) => { state.filters[k] = v; rebuildView(); render(); });
}

async function stream() {
  let backoff = 500;
  for (;;) {
    const ctl = new AbortController();
    state.stream = ctl;
    try {
      const h = { Accept: "text/event-stream" };
      if (state.lastSeq != null) h["Last-Event-ID"] = String(state.lastSeq);
      const res = await api("/v1/board/stream", { headers: h, signal: ctl.signal });
      if (!res.ok) throw new Error(`stream: HTTP ${res.status}`);
      setConn("live", true);
      backoff = 500;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          onEvent(buf.slice(0, cut));
          buf = buf.slice(cut + 2);
        }
      }
    } catch (e) {
      if (e.message === "unauthorized") return;
    }
    setConn("reconnecting…", false);
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

function onEvent(block) {
  let event = "message", data = "", id = null;
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data += value;
    else if (field === "id") id = value;
  }
  if (id !== null && /^\d+$/.test(id)) state.lastSeq = Number(id);
  if (event === "rows") {
    for (const r of JSON.parse(data).rows) state.pending.set(r[0], r);
    requestFrame();
  } else if (event === "reset") {
    board.resets++;
    loadSnapshot().catch(() => {});
  } else if (event === "panel") {
    showPanel(JSON.parse(data));
  } else if (event === "lease") {
    applyLeases(JSON.parse(data).leases);
    requestFrame();
  }
}

function setConn(text, live) {
  const el = $("conn");
  el.textContent = text;
  el.className = `conn ${live ? "live" : "down"}`;
}

// -- fleet panel ----------------------------------------------------------------------------------------
function showPanel(p) {
  const f = p.freshness;
  $("p-devices").textContent = f.devices.toLocaleString();
  $("p-hit").textContent = fmtPct(p.hit_ratio);
  $("p-fresh").textContent = f.devices ? fmtPct(f.by_source.precomputed / f.devices) : "–";
  $("p-age").textContent = fmtAge(f.median_age_ms);
  $("p-events").textContent = fmtRate(p.events_per_s);
  $("p-inf").textContent = fmtRate(p.inferences_per_s);
  $("p-dead").textContent = p.dead_letters_total == null ? "–"
    : `${p.dead_letters_total.toLocaleString()} (${fmtRate(p.dead_letters_per_s)}/s)`;
  showMeasure("wait", p.wait, p.banner?.origin);
  showMeasure("age", p.age, null);
  $("p-wait-clients").textContent = p.wait.clients ? p.wait.clients.toLocaleString() : "no";
  const b = $("banner");
  if (p.banner) {
    const x = p.banner;
    b.textContent = `Wait origin "${x.origin}" rose to ${fmtPct(x.share)} of what operators wait for `
      + `(${fmtPct(x.baseline_share)} before), while p95 input → shown is ${fmtAge(x.wait_p95_ms)} `
      + `(objective ${fmtAge(x.objective_ms)}).`;
    b.hidden = false;
  } else b.hidden = true;
}

// One measure's panel: p95 against its objective, shares by origin (none while no board reports).
function showMeasure(name, m, named) {
  const p95 = $(`p-${name}-p95`);
  p95.textContent = fmtAge(m.p95_ms);
  p95.className = m.p95_ms != null && m.p95_ms > m.objective_ms ? "over" : "";
  $(`p-${name}-obj`).textContent = fmtAge(m.objective_ms);
  const items = Object.entries(m.shares || {}).map(([o, x]) => {
    const li = document.createElement("li");
    li.textContent = `${o} ${fmtPct(x)}`;
    if (o === named) li.className = "named";
    return li;
  });
  $(`p-${name}-shares`).replaceChildren(...items);
}

// -- device view ---------------------------------------------------------------------------------------
async function openDevice(id, inputAt) {
  // Room in the bounded Resource Timing buffer for this read's entry (hints and beacons fill it).
  if (inputAt != null) performance.clearResourceTimings();
  if (inputAt != null && state.miss) endMiss(state.miss.id); // a new input ends the last wait
  state.open = id;
  state.openRow = state.byId.get(id);
  const url = `/v1/devices/${encodeURIComponent(id)}/prediction`;
  let read = null; // the read's span when it continued a sampled answer's trace (traceresponse)
  const [ans, det] = await Promise.all([
    api(url).then((r) => { read = r.headers.get("traceresponse"); return r.json(); }),
    api(`/v1/board/devices/${encodeURIComponent(id)}`).then((r) => (r.ok ? r.json() : null)),
  ]);
  if (state.open !== id) return;
  showDevice(id, ans, det);
  // Shown = the frame after the DOM changed: the browser's own input-to-shown time.
  if (inputAt != null) {
    requestAnimationFrame(() => setTimeout(() => {
      const t = timingFor(url, performance.now() - inputAt);
      if (!t) return;
      // The API records this view's render span beneath the read (tracing on).
      if (read && TRACEPARENT.test(read)) t.traceparent = read;
      if (ans.source === "fallback" && ASKING.has(ans.reason)) {
        // A miss: the wait goes on until the computed answer replaces the fallback (or the
        // operator gives up); that part of the wait is the inference's (wait.model).
        state.miss = { id, inputAt, shownAt: performance.now(), t };
        setTimeout(() => endMiss(id), MISS_WAIT_MAX_MS);
      } else pushTiming(t);
    }, 0));
  } else if (state.miss?.id === id && ans.source !== "fallback") {
    requestAnimationFrame(() => setTimeout(() => endMiss(id), 0));
  }
}

function endMiss(id) {
  const m = state.miss;
  if (!m || m.id !== id) return;
  state.miss = null;
  const now = performance.now();
  m.t.wait.model = Math.min(now - m.shownAt, MISS_WAIT_MAX_MS);
  m.t.input_to_shown_ms = m.shownAt - m.inputAt + m.t.wait.model;
  m.t.shown_at_ms = Math.round(performance.timeOrigin + now);
  pushTiming(m.t);
}

function refreshOpen() {
  if (state.open) openDevice(state.open, null).catch(() => {});
}

function td(text) { const c = document.createElement("td"); c.textContent = text; return c; }
function tr(...cells) { const r = document.createElement("tr"); r.append(...cells.map(td)); return r; }
function dtdd(dl, k, v) {
  const dt = document.createElement("dt"); dt.textContent = k;
  const dd = document.createElement("dd"); dd.textContent = v;
  dl.append(dt, dd);
}

// The answer's trace: its trigger's trace ID (the worker's batch links to it), a link into the
// tracing UI when the API names one (PRECAST_TRACING__UI_URL), else the bare ID to search for.
function traceRow(dl, traceId) {
  if (!traceId || !/^[0-9a-f]{32}$/.test(traceId)) return;
  const dt = document.createElement("dt"); dt.textContent = "Trace";
  const dd = document.createElement("dd"); dd.id = "d-trace";
  const base = L?.doc?.trace_url;
  if (base) {
    const a = document.createElement("a");
    a.href = base + traceId; a.target = "_blank"; a.rel = "noopener"; a.textContent = traceId;
    dd.append(a);
  } else dd.textContent = traceId;
  dl.append(dt, dd);
}

function showDevice(id, a, det) {
  $("device").hidden = false;
  document.querySelector("main").classList.add("with-device");
  $("device-h").textContent = id;
  $("d-meta").textContent = L.meta(det);
  $("d-top").replaceChildren(...a.candidates.slice(0, 3).map((c, i) => {
    const row = tr(String(i + 1), c.strategy, "");
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${Math.round(c.score * 80)}px`;
    row.cells[2].append(bar, c.score.toFixed(3));
    return row;
  }));
  const dl = $("d-answer");
  dl.replaceChildren();
  dtdd(dl, "Source", a.source + (a.reason ? ` (${a.reason})` : ""));
  dtdd(dl, "Model version", a.model_version ?? "–");
  dtdd(dl, "Computed at", fmtTime(a.computed_at_ms));
  dtdd(dl, "Valid until", fmtTime(a.valid_until_ms));
  dtdd(dl, "Age", fmtAge(a.age_ms));
  dtdd(dl, "Trigger", a.trigger ?? "–");
  traceRow(dl, (a.lineage || []).find((l) => l.trace_id)?.trace_id);
  const why = [];
  const t = serverTimingOf(`/v1/devices/${encodeURIComponent(id)}/prediction`);
  if (a.source === "fallback") why.push(`No precomputed answer (${a.reason}): a safe default is shown${ASKING.has(a.reason) ? " and a precompute was requested" : ""}.`);
  else {
    why.push(`Age ${fmtAge(a.age_ms)}, mostly ${a.delay_origin}.`);
    if (a.source === "stale") why.push("Past valid-until: shown as stale while a new answer is computed.");
    const g = t?.age;
    if (g) why.push(`Age: queue ${fmtAge(g.queue)} · model ${fmtAge(g.model)} · kafka ${fmtAge(g.kafka)} · in the store ${fmtAge(g.cache)}`);
  }
  if (t?.edge) why.push(`Wait at the edge cache: ${t.wait.edge.toFixed(3)} ms (${t.edge.desc})`);
  if (t && !(t.edge && t.wait.read === 0 && t.wait.db_lock === 0)) why.push(`Wait on the server: read ${t.wait.read.toFixed(3)} ms · store ${t.wait.db_lock.toFixed(3)} ms`);
  $("d-why").replaceChildren(...why.map((w) => { const li = document.createElement("li"); li.textContent = w; return li; }));
  const refs = a.lineage || [];
  $("d-lineage").replaceChildren(...refs.map((l) => tr(`${l.topic} ${l.partition}:${l.offset}`, "…", l.event_id ?? "–")));
  if (refs.length) showEvents(id).catch(() => {});
  const fields = $("d-fields"), values = $("d-ctx-values");
  fields.replaceChildren();
  for (const [k, v] of L.fields(det)) dtdd(fields, k, v);
  const ctx = det?.context;
  values.replaceChildren();
  for (const [k, v] of ctx ? L.contextValues(ctx) : []) dtdd(values, k, v);
  const items = ctx ? L.contextItems(ctx) : [];
  if (!items.length) items.push(ctx ? "None open." : "No context for this device yet.");
  $("d-ctx").replaceChildren(...items.map((t) => { const li = document.createElement("li"); li.textContent = t; return li; }));
  $("d-history").replaceChildren(...(det?.history || []).map((h) =>
    tr(fmtTime(h.computed_at_ms), h.candidates[0]?.strategy ?? "–", (h.candidates[0]?.score ?? 0).toFixed(3), h.trigger ?? "–", h.model_version)));
}

// The records the lineage names, read back from Kafka by the API. One request at a time: the
// API admits one lineage read per client (a 503 past it), and a read can take seconds, so an
// operator opening devices quickly gets the newest one read next, never a refused request.
const events = { busy: false, wanted: null };

async function showEvents(id) {
  events.wanted = id;
  if (events.busy) return; // the read in flight, then the newest device wanted
  events.busy = true;
  try {
    while (events.wanted != null) {
      const next = events.wanted;
      events.wanted = null;
      if (state.open === next) await loadEvents(next).catch(() => {});
    }
  } finally {
    events.busy = false;
  }
}

async function loadEvents(id) {
  const res = await api(`/v1/board/devices/${encodeURIComponent(id)}/events`);
  if (!res.ok || state.open !== id) return;
  const doc = await res.json();
  $("d-lineage").replaceChildren(...doc.events.map((x) => {
    const what = x.event ? L.describe(x) : `(${x.missing})`;
    return tr(`${x.topic} ${x.partition}:${x.offset}`, x.event_time_ms != null ? fmtTime(x.event_time_ms) : "–", what);
  }));
}

function closeDevice() {
  if (state.miss) endMiss(state.miss.id); // the operator stopped waiting
  state.open = null;
  $("device").hidden = true;
  document.querySelector("main").classList.remove("with-device");
  $("fleet-grid").focus();
  render();
}

// -- speculative client: prefetch hints and beacons -------------------------------------------------------
function hint(ids) {
  const now = Date.now();
  for (const [id, t] of state.hinted) { if (now - t < PREFETCH_EVERY_MS) break; state.hinted.delete(id); }
  const fresh = ids.filter((id) => !state.hinted.has(id)).slice(0, 100);
  if (!fresh.length) return;
  for (const id of fresh) state.hinted.set(id, now);
  api("/v1/prefetch", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ device_ids: fresh }),
  }).catch(() => {});
}

function scheduleVisibleHints() {
  clearTimeout(state.visibleTimer);
  state.visibleTimer = setTimeout(() => hint([...state.rendered.keys()]), 300);
}

// The answer's Server-Timing, its two measures apart: wait.* (the read on the server) and
// age.* (absent for a fallback, which has no data). Behind an edge cache (deploy/edge), its
// `edge` entry is the edge's time for this request: on a hit the server was not asked (the
// wait.* entries are the fetch that filled the cache), on a miss the edge's time includes them.
function serverTimingOf(path) {
  const entries = performance.getEntriesByName(new URL(path, location.href).href);
  const e = entries[entries.length - 1];
  if (!e) return null;
  const wait = { read: 0, db_lock: 0, edge: 0 };
  let age = null, edge = null;
  for (const s of e.serverTiming || []) {
    const [measure, origin] = s.name.split(".");
    const ms = Math.max(0, s.duration);
    if (measure === "wait" && origin in wait) wait[origin] = ms;
    else if (measure === "age" && ["queue", "model", "kafka", "cache"].includes(origin)) (age ??= { queue: 0, model: 0, kafka: 0, cache: 0 })[origin] = ms;
    else if (s.name === "edge") edge = { desc: s.description, ms };
  }
  if (edge) {
    const hit = edge.desc === "hit" || edge.desc === "stale";
    if (hit) { wait.read = 0; wait.db_lock = 0; }
    wait.edge = Math.max(0, edge.ms - wait.read - wait.db_lock);
  }
  return { entry: e, wait, age, edge };
}

function timingFor(path, inputToShown) {
  const st = serverTimingOf(path);
  if (!st) return null;
  const network = Math.max(0, st.entry.responseEnd - st.entry.startTime);
  performance.clearResourceTimings(); // the buffer is bounded; read entries are not needed again
  const t = {
    input_to_shown_ms: Math.max(inputToShown, network),
    network_ms: network,
    wait: { ...st.wait, model: 0 },
    shown_at_ms: Math.round(performance.timeOrigin + performance.now()),
  };
  if (st.age) t.age = st.age;
  return t;
}

function pushTiming(t) {
  state.timings.push(t);
  if (state.timings.length >= 20) flushBeacons();
}

function flushBeacons(keepalive = false) {
  if (!state.timings.length) return;
  const timings = state.timings.splice(0, 100);
  api("/v1/beacon", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ timings }), keepalive,
  }).catch(() => {});
}

// -- input ------------------------------------------------------------------------------------------------------
function select(i, scroll = true) {
  if (!state.view.length) return;
  state.selected = Math.max(0, Math.min(state.view.length - 1, i));
  if (scroll) {
    const grid = $("fleet-grid");
    const headH = grid.querySelector("thead").offsetHeight;
    const top = state.selected * rowH, h = grid.clientHeight - headH;
    if (top < grid.scrollTop) grid.scrollTop = top;
    else if (top + rowH > grid.scrollTop + h) grid.scrollTop = top + rowH - h;
  }
  render();
  hint([state.view[state.selected]]);
}

function onGridKey(e) {
  const page = Math.max(1, Math.floor($("fleet-grid").clientHeight / rowH) - 2);
  const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
  if (e.key in moves) select(state.selected + moves[e.key]);
  else if (e.key === "Home") select(0);
  else if (e.key === "End") select(state.view.length - 1);
  else if (e.key === "Enter" && state.selected >= 0) openDevice(state.view[state.selected], e.timeStamp).catch(() => {});
  else return;
  e.preventDefault();
}

function buildHead() {
  L.buildHead($("head"), (name) => {
    if (state.sort === name) state.desc = !state.desc; else { state.sort = name; state.desc = false; }
    updateSortMarks();
    rebuildView(); render();
  });
  updateSortMarks();
}

function updateSortMarks() {
  for (const th of $("head").children) {
    th.setAttribute("aria-sort", th.dataset.col === state.sort ? (state.desc ? "descending" : "ascending") : "none");
  }
}

function wire() {
  const grid = $("fleet-grid");
  grid.addEventListener("scroll", () => requestFrame(), { passive: true });
  grid.addEventListener("keydown", onGridKey);
  window.addEventListener("resize", () => { measureRow(); requestFrame(); });
  const body = tbody();
  body.addEventListener("click", (e) => {
    const row = e.target.closest("tr");
    if (!row || !row._id) return;
    state.selected = state.view.indexOf(row._id);
    render();
    openDevice(row._id, e.timeStamp).catch(() => {});
  });
  body.addEventListener("mouseover", (e) => {
    const row = e.target.closest("tr");
    if (!row || !row._id) return;
    clearTimeout(state.hoverTimer);
    state.hoverTimer = setTimeout(() => hint([row._id]), 80);
  });
  $("f-q").addEventListener("input", (e) => { state.q = e.target.value.trim(); rebuildView(); render(); });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("close").addEventListener("click", closeDevice);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.open) { closeDevice(); e.preventDefault(); }
    else if (e.key === "/" && !(e.target instanceof HTMLInputElement)) { $("f-q").focus(); e.preventDefault(); }
  });
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("precast-token", state.token);
    $("auth").hidden = true;
    start();
  });
  // A full buffer stops recording: never let it fill (entries are only read right after a fetch).
  performance.addEventListener("resourcetimingbufferfull", () => performance.clearResourceTimings());
  setInterval(() => requestFrame(), 1000); // ages and stale marks move with the clock
  setInterval(() => flushBeacons(), BEACON_FLUSH_MS);
  window.addEventListener("pagehide", () => flushBeacons(true));
}

async function start() {
  try {
    await loadSnapshot();
  } catch (e) {
    if (e.message !== "unauthorized") setConn("cannot load the fleet; retrying…", false);
    if (e.message !== "unauthorized") setTimeout(start, 2000);
    return;
  }
  board.ready = true;
  stream();
}

// Row height comes from the stylesheet (it grows on a wall display): measured, not assumed.
function measureRow() {
  const probe = document.createElement("tr");
  probe.append(document.createElement("td"));
  tbody().append(probe);
  rowH = probe.getBoundingClientRect().height || 28;
  probe.remove();
}

function init() {
  const body = tbody();
  topPad = spacer(); bottomPad = spacer();
  body.append(topPad, bottomPad);
  measureRow();
  wire();
  start();
}

init();
