// The board's columns, filters and device detail, as the fleet spec's [board] declares them.
// The server sends them as `layout` with every fleet snapshot (GET /v1/board/fleet,
// consumer_api/board/board_layout.py, docs/board.md): nothing in the page knows a fleet. Rows are
// arrays in `layout.columns` order; `display` lists the table's columns (name, label, type,
// unit, width), `filters` the filters in the order shown, `alarm_states` the alarm states by
// rank (the first alert rule first, "none" last).

export class Layout {
  // fmt: the page's formatters ({ age, time }), shared with the panel.
  constructor(doc, fmt) {
    this.doc = doc;
    this.fmt = fmt;
    this.key = JSON.stringify(doc);
    this.col = {};
    doc.columns.forEach((name, i) => { this.col[name] = i; });
    this.display = doc.display;
    this.filters = doc.filters.map((f) => f.name);
    this.rank = {};
    doc.alarm_states.forEach((s, i) => { this.rank[s] = i; });
    // filters whose values rows bring (the alarm states and sources are all known up front)
    this.growing = this.filters.filter((k) => k !== "alarm" && k !== "source");
  }

  // Since when a row's age counts: its answer's data time, or the certification of the validity
  // lease that extends it (the lease column's fifth item).
  dataTime(r) {
    const c = this.col, l = c.lease == null ? null : r[c.lease];
    return l && l[4] != null && l[4] > r[c.computed_at_ms] ? l[4] : r[c.computed_at_ms];
  }

  sourceNow(r, now) {
    const s = r[this.col.source];
    return s === "precomputed" && r[this.col.valid_until_ms] <= now ? "stale" : s;
  }

  // The text of display column j of row r.
  cell(r, j, now) {
    const c = this.col, d = this.display[j];
    const v = r[c[d.name]];
    switch (d.type) {
      case "score": return r[c.source] === "fallback" ? "–" : v.toFixed(2);
      case "source": return this.sourceNow(r, now);
      case "age": return r[c.computed_at_ms] == null ? "–" : this.fmt.age(now - this.dataTime(r));
      case "alarm": return v === "none" ? "–" : v;
      default: return fmtValue(v, d.type, this.fmt);
    }
  }

  cellClass(r, j, now) {
    const d = this.display[j];
    if (d.type === "source") return `src-${this.sourceNow(r, now)}`;
    if (d.type === "alarm") {
      const v = r[this.col.alarm];
      return v === "none" ? "" : `alert-${Math.min(this.rank[v], 2)}`;
    }
    return "";
  }

  matches(r, filters, q) {
    for (const [k, v] of Object.entries(filters)) {
      if (v && String(r[this.col[k]]) !== v) return false;
    }
    return !q || r[this.col.device_id].includes(q);
  }

  sortKey(name) {
    const c = this.col;
    if (name === "age_ms") return (r) => (r[c.computed_at_ms] == null ? Infinity : -this.dataTime(r));
    if (name === "alarm") return (r) => this.rank[r[c.alarm]];
    const i = c[name];
    return (r) => r[i];
  }

  // -- the table's header and the filter form ----------------------------------------------------
  buildHead(head, onSort) {
    const total = this.display.reduce((n, d) => n + d.width, 0);
    head.replaceChildren(...this.display.map((d) => {
      const th = document.createElement("th");
      th.scope = "col";
      th.dataset.col = d.name;
      th.style.width = `${((100 * d.width) / total).toFixed(2)}%`;
      if (d.description) th.title = d.description;
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = d.unit ? `${d.label} (${d.unit})` : d.label;
      b.addEventListener("click", () => onSort(d.name));
      th.append(b);
      return th;
    }));
  }

  // One labelled <select id="f-NAME"> per filter, after the device search.
  buildFilters(form, onChange) {
    for (const el of form.querySelectorAll("label.filter")) el.remove();
    for (const f of this.doc.filters) {
      const label = document.createElement("label");
      label.className = "filter";
      const sel = document.createElement("select");
      sel.id = `f-${f.name}`;
      sel.append(new Option("all", ""));
      sel.addEventListener("change", (e) => onChange(f.name, e.target.value));
      label.append(`${f.label} `, sel);
      form.append(label);
    }
  }

  fillFilters(facets) {
    for (const k of this.filters) {
      const sel = document.getElementById(`f-${k}`);
      const values = [...(facets[k] || [])].map(String).sort();
      if (k === "alarm") values.sort((a, b) => this.rank[a] - this.rank[b]);
      if (sel.options.length === values.length + 1) continue;
      const cur = sel.value;
      sel.replaceChildren(new Option("all", ""), ...values.map((v) => new Option(v, v)));
      sel.value = values.includes(cur) ? cur : "";
    }
  }

  // -- a device's detail view ---------------------------------------------------------------------
  // "Site · Device type" line: the heartbeat fields shown as columns.
  meta(det) {
    const shown = this.display.filter((d) => det?.fields && d.name in det.fields);
    return shown.map((d) => fmtValue(det.fields[d.name], d.type, this.fmt, `unknown ${d.label.toLowerCase()}`)).join(" · ");
  }

  // [label, text] pairs of the spec's detail fields (those not in the line above).
  fields(det) {
    const shown = new Set(this.display.map((c) => c.name));
    return this.doc.detail.filter((d) => !shown.has(d.name))
      .map((d) => [d.label, withUnit(fmtValue(det?.fields?.[d.name], d.type, this.fmt), d.unit)]);
  }

  // [label, text] pairs of every context value.
  contextValues(ctx) {
    return this.doc.context.map((d) => [d.label, withUnit(fmtValue(ctx.values[d.name], d.type, this.fmt), d.unit)]);
  }

  // One line per open entity and per window entry of the device's context.
  contextItems(ctx) {
    const items = [];
    for (const g of ctx.open) {
      for (const e of g.entities) {
        const vals = Object.values(e.values).filter((v) => v != null).join(", ");
        items.push(`${g.label} ${e.id}${vals ? ` (${vals})` : ""}`);
      }
    }
    for (const g of ctx.windows) {
      for (const e of g.entries) {
        const what = e.alert.length ? e.alert.join(", ")
          : e.counted_by.length ? e.counted_by.join(", ") : "outside its window";
        items.push(`${g.label} ${e.id}: ${what} at ${this.fmt.time(e.event_time_ms)}`);
      }
    }
    return items;
  }

  // A lineage record as the spec reads it: "heartbeats hb-1: cpu_pct 12.5 %, site north".
  describe(x) {
    if (!x.fields) return x.invalid ? `(not valid under this fleet spec: ${x.invalid})` : `event ${x.event?.event_id ?? ""}`;
    const units = this.doc.units[x.stream] || {};
    const parts = Object.entries(x.fields).map(([k, v]) => `${k} ${withUnit(String(v), units[k])}`);
    return `${x.stream} ${x.event_id ?? ""}: ${parts.join(", ")}`;
  }
}

function withUnit(text, unit) {
  return unit && text !== "–" ? `${text} ${unit}` : text;
}

function fmtValue(v, type, fmt, none = "–") {
  if (v == null || v === "") return none;
  switch (type) {
    case "boolean": return v ? "yes" : "no";
    case "time": return fmt.time(v);
    case "count": return String(v);
    case "number": return fmtNumber(v);
    default: return String(v);
  }
}

function fmtNumber(x) {
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return x.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2);
}
