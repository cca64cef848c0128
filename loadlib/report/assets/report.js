// report.html: draws what loadlib/report/html_data.py embedded. Every figure is read from the
// embedded data as the figure functions returned it; this script only lays out and draws.
"use strict";
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
const DASHES = [[], [6, 3], [2, 3], [8, 3, 2, 3], [12, 4]];
const RUNS = DATA.runs;
const SEVERAL = RUNS.length > 1;
const WIDTH = () => Math.min(document.body.clientWidth - 32, 1248);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}
const runColor = (i) => COLORS[i % COLORS.length];
const chip = (color) => el("span", {class: "chip", style: `background:${color}`});
const fmt = (v, digits = 3) => v === null || v === undefined ? "–" :
  typeof v === "number" ? v.toLocaleString("en-US", {maximumFractionDigits: digits}) : String(v);

function table(columns, rows, opts = {}) {
  const left = new Set(opts.left || []);
  const head = el("tr", {}, ...columns.map((c) => el("th", {class: left.has(c) ? "left" : "", text: c})));
  const body = el("tbody");
  rows.forEach((row, r) => {
    const tr = el("tr");
    row.forEach((cell, c) => {
      const td = el("td", {class: opts.wrap && opts.wrap.has(columns[c]) ? "wrap" : left.has(columns[c]) ? "left" : "", text: cell});
      if (opts.cellClass) { const k = opts.cellClass(r, c); if (k) td.classList.add(k); }
      tr.append(td);
    });
    body.append(tr);
  });
  const node = el("table", opts.attrs || {}, el("thead", {}, head), body);
  return el("div", {class: "scroll"}, node);
}

// --- header and what was run ------------------------------------------------------------------
function header() {
  const top = document.getElementById("top");
  top.append(el("h1", {text: SEVERAL ? `uni-bench comparison: ${DATA.labels.join(", ")} (against ${DATA.labels[0]})` : `uni-bench report: ${DATA.labels[0]}`}));
  const legend = el("div", {class: "runs"});
  RUNS.forEach((run, i) => {
    legend.append(el("span", {}, chip(runColor(i)), el("b", {text: run.label})));
    top.append(el("p", {class: "heading", text: `${run.label}: ${run.heading}`}));
  });
  if (SEVERAL) top.prepend(legend);
}

const MAIN = /^(target|server\.(kind|version|launch)|model|protocol|profile|client\.(host|cpu_model|cores|memory_gb|platform)|tool|command|started_at|ended_at)/;
function what() {
  const section = document.getElementById("what");
  const keys = [...new Set(RUNS.flatMap((run) => run.what.map(([key]) => key)))];
  const values = RUNS.map((run) => Object.fromEntries(run.what));
  const rowsOf = (list) => list.map((key) => [key, ...values.map((v) => v[key] ?? "–")]);
  const columns = ["", ...DATA.labels];
  const wrap = new Set(DATA.labels);
  section.append(table(columns, rowsOf(keys.filter((k) => MAIN.test(k))), {left: columns, wrap, attrs: {"data-part": "what"}}));
  const rest = keys.filter((k) => !MAIN.test(k));
  if (rest.length) section.append(el("details", {}, el("summary", {text: `the rest of the manifest (${rest.length} keys)`}), table(columns, rowsOf(rest), {left: columns, wrap})));
}

// --- verdicts, validity, the tables ---------------------------------------------------------------
// a verdict's colour: better (green) or worse (red) by which way its figure is better (a lower TTFT is
// better); a difference in a figure with no better side (tok/chunk), or none, in grey
const verdictClass = (v, better) => v.verdict !== "higher" && v.verdict !== "lower" ? "same"
  : !better[v.figure] ? "changed" : v.verdict === better[v.figure] ? "better" : "worse";
function verdicts() {
  const section = document.getElementById("verdicts");
  DATA.sweeps.forEach((sw) => sweep(section, sw));
  if (DATA.comparison) {
    const c = DATA.comparison;
    section.append(el("h3", {text: `Verdicts against ${DATA.labels[0]} (B/A - 1 with its 95 % bootstrap CI from each run's rounds, requests or time bins; within ±${c.equivalence_pct} % reads not distinguishable)`}));
    const better = Object.fromEntries(c.figures.map((f) => [f.figure, f.better]));
    const columns = ["figure", "run", DATA.labels[0], "this run", "difference", "95 % CI", "n", "verdict"];
    const rows = c.verdicts.map((v) => [v.figure, v.run_b, fmt(v.a), fmt(v.b), v.diff_pct === null ? "–" : `${v.diff_pct >= 0 ? "+" : ""}${fmt(v.diff_pct, 1)} %`,
      v.ci_low_pct === null ? "–" : `${fmt(v.ci_low_pct, 1)} to ${fmt(v.ci_high_pct, 1)} %`, `${v.n_a}/${v.n_b}${v.few_samples ? " few" : ""}`,
      v.verdict + (v.reason ? `: ${v.reason}` : "")]);
    const node = table(columns, rows, {left: ["figure", "run", "verdict"], attrs: {"data-part": "verdicts"},
      cellClass: (r, col) => col === 7 ? verdictClass(c.verdicts[r], better) : col === 1 ? "" : null});
    node.querySelectorAll("tbody tr").forEach((tr, r) => {
      tr.dataset.diffPct = c.verdicts[r].diff_pct ?? ""; tr.dataset.verdict = c.verdicts[r].verdict;
      tr.cells[1].prepend(chip(runColor(DATA.labels.indexOf(c.verdicts[r].run_b))));
    });
    section.append(c.verdicts.length ? node : el("p", {class: "note", text: "(no headline figure that both runs have)"}));
    const figures = [...new Set(c.figures.map((f) => f.figure))];
    const byKey = Object.fromEntries(c.figures.map((f) => [`${f.figure}\u0000${f.run}`, f]));
    section.append(el("details", {}, el("summary", {text: `Headline figures per run, ${figures.length} rows (value, difference to ${DATA.labels[0]}; * = ranges over rounds do not overlap)`}), table(["figure", ...DATA.labels], figures.map((name) => [name, ...DATA.labels.map((label) => {
      const f = byKey[`${name}\u0000${label}`];
      if (!f) return "–";
      return fmt(f.value) + (f.diff_pct === null || label === DATA.labels[0] ? "" : ` ${f.diff_pct >= 0 ? "+" : ""}${fmt(f.diff_pct, 1)} %`) + (f.beyond_noise ? "*" : "");
    })]), {left: ["figure"], attrs: {"data-part": "figures"}})));
  }
  RUNS.forEach((run, i) => {
    for (const key of ["validity", "search"]) {
      const s = run.sections.find((x) => x.key === key);
      if (s && s.shown) section.append(sectionNode(s, runLead(run, i), {"data-run": String(i)}));
    }
    if (!run.sections.some((x) => x.key === "validity")) section.append(el("p", {class: "note", text: `${run.label}: no validity checks (the run kept neither its server's nor its client's watch)`}));
  });
}

const runLead = (run, i) => SEVERAL ? [chip(runColor(i)), `${run.label}: `] : [];

// a section's title (after `lead`) and its table of the view's rows, `attrs` on the table
function sectionNode(s, lead, attrs, cellClass) {
  const title = el("h3", {}, ...lead, s.title);
  if (s.key === "validity") title.classList.add(s.title.startsWith("VALIDITY") ? "bad" : "good");
  const wrap = new Set(s.columns.filter((c) => s.left.includes(c) && s.view.some((row) => (row[s.columns.indexOf(c)] || "").length > 60)));
  const body = s.view.length ? table(s.columns, s.view, {left: s.left, wrap, cellClass, attrs: {"data-section": s.key, ...attrs}})
    : el("p", {class: "note", text: "(none)"});
  return el("div", {}, title, body);
}

// --- a server sweep: its table, the logs of the configurations that did not serve, a chart per figure ---
// The bars are the sweep table's figures (`report --json`'s "sweep" rows); a configuration that served
// has its run's colour, one that did not is grey with its status written at its place.
function sweep(section, sw) {
  const lead = DATA.sweeps.length > 1 ? [`${sw.label}: `] : [];
  const rows = sw.sections.find((s) => s.key === "sweep").data;
  for (const s of sw.sections) {
    if (!s.shown) continue;
    const status = s.columns.indexOf("status"), warnings = s.columns.indexOf("warnings");
    const flagged = (r, c) => (c === status && s.view[r][c] !== "ok") || (c === warnings && s.view[r][c] !== "-");
    section.append(sectionNode(s, lead, {"data-sweep": sw.label}, (r, c) => flagged(r, c) ? "bad" : null));
  }
  if (!rows.length) return;
  const has = (key) => rows.some((r) => r[key] !== null);
  const unit = {users: "users", rate: "req/s"}[rows.find((r) => r.capacity_variable)?.capacity_variable] || "";
  const panels = [  // [column, its CI's prefix, title, axis]: the figures sweep_plot draws
    has("capacity") ? ["capacity", null, `capacity within the SLO (the search's best level, ${unit})`, unit]
      : ["steady_decode_tps", null, "all-streams t/s (decode tokens of every stream per second, steady state of the busiest free-running cell)", "t/s"],
    ["decode_p50_tps", "decode_p50", "decode t/s per request, p50 (whiskers: 95 % CI)", "t/s"],
    ["ttft_p50_s", "ttft_p50", "TTFT p50 (whiskers: 95 % CI)", "s"],
    has("accept_length") ? ["accept_length", null, "accept length (the server's tokens per target forward)", "tokens"]
      : ["tok_per_chunk", null, "tok/chunk (client; no server accept length scraped)", "tokens"],
  ];
  const runOf = (r) => Math.max(DATA.labels.indexOf(r.label), DATA.labels.indexOf(`${sw.label}/${r.label}`), 0);
  const colors = rows.map((r) => r.status === "ok" ? runColor(runOf(r)) : "#999");
  section.append(el("h3", {text: `${lead.join("")}Server sweep, each configuration in the order run`}));
  const grid = el("div", {class: "grid2", "data-part": "sweep-charts"});
  section.append(grid);
  const xs = rows.map((_, i) => i);
  for (const [key, ci, title, axis] of panels) {
    const highs = rows.map((r) => Math.max(r[key] ?? 0, ci ? r[`${ci}_ci_high`] ?? 0 : 0));
    const series = rows.map((r, i) => ({label: r.label, xs: r[key] === null ? [] : [i], ys: [r[key]], color: colors[i], bars: true}));
    const data = [xs, ...rows.map((r, i) => xs.map((k) => k === i ? r[key] : null))];
    chart(grid, `sweep-${key}`, title, "configuration", series, [{label: axis, size: 60, values: (u, splits) => splits.map((v) => fmt(v, 4))}], {
      data, width: Math.floor(WIDTH() / 2) - 12, height: 240,
      empty: "(none: no configuration ran a capacity search or a free-running cell)",
      xScale: {range: [-0.5, rows.length - 0.5]},
      xAxis: {splits: () => xs, values: (u, splits) => splits.map((i) => rows[i]?.label ?? ""), grid: {show: false}},
      scales: {y: {range: [0, Math.max(...highs) * 1.15 || 1]}},
      plugins: [sweepMarks(rows, ci)]});
  }
}

// whiskers from each bar's CI low to high; a configuration that did not serve: its status at its place
function sweepMarks(rows, ci) {
  return {hooks: {draw: [(u) => {
    const ctx = u.ctx; ctx.save(); ctx.lineWidth = devicePixelRatio; ctx.strokeStyle = "#222";
    ctx.font = `${11 * devicePixelRatio}px system-ui`; ctx.textAlign = "center";
    rows.forEach((r, i) => {
      const x = u.valToPos(i, "x", true), cap = 5 * devicePixelRatio;
      if (r.status !== "ok") { ctx.fillStyle = "#b3261e"; ctx.fillText(r.status, x, u.bbox.top + u.bbox.height - 6 * devicePixelRatio); return; }
      const low = ci && r[`${ci}_ci_low`], high = ci && r[`${ci}_ci_high`];
      if (low === null || high === null || low === undefined || high === undefined) return;
      const [y0, y1] = [u.valToPos(low, "y", true), u.valToPos(high, "y", true)];
      ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y1);
      for (const y of [y0, y1]) { ctx.moveTo(x - cap, y); ctx.lineTo(x + cap, y); }
      ctx.stroke();
    });
    ctx.restore();
  }]}};
}

function tables() {
  const section = document.getElementById("tables");
  RUNS.forEach((run, i) => {
    const box = el("details", {open: ""}, el("summary", {}, chip(runColor(i)), `${run.label}: ${run.sections.filter((s) => s.shown).length} tables`));
    for (const s of run.sections) if (s.shown && s.key !== "validity" && s.key !== "search") box.append(sectionNode(s, runLead(run, i), {"data-run": String(i)}));
    section.append(box);
  });
}

// --- charts -----------------------------------------------------------------------------------
// A chart: series of {label, xs, ys, color, dash, points, scale}; their x values are joined onto one
// sorted axis (uPlot's aligned data), a series is null where it has no point.
function joined(series) {
  const xs = [...new Set(series.flatMap((s) => s.xs))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...series.map((s) => { const ys = new Array(xs.length).fill(null); s.xs.forEach((x, k) => { ys[at.get(x)] = s.ys[k]; }); return ys; })];
}

const charts = {};
function chart(parent, key, title, xLabel, series, axes, extra = {}) {
  const box = el("div", {class: "chart", "data-chart": key}, el("h3", {text: title}));
  parent.append(box);
  if (!series.length || series.every((s) => !s.xs.length)) { box.append(el("p", {class: "note", text: extra.empty || "(no data for this chart)"})); return null; }
  const data = extra.data || joined(series);
  const opts = {
    width: extra.width || WIDTH(), height: extra.height || 260,
    scales: {x: {time: false, ...(extra.xScale || {})}, ...(extra.scales || {})},
    axes: [{label: xLabel, ...(extra.xAxis || {})}, ...axes],
    series: [{label: xLabel}, ...series.map((s) => ({
      label: s.label, stroke: s.color, width: s.points ? 0 : 1.5, dash: s.dash || [], scale: s.scale || "y", spanGaps: true,
      fill: s.bars ? s.color : s.fill,
      paths: s.points ? () => null : s.bars ? uPlot.paths.bars({size: [0.6, 80]}) : s.step ? uPlot.paths.stepped({align: 1}) : undefined,
      points: s.points ? {show: true, size: 4, stroke: s.color, fill: s.color} : {show: false},
      value: (u, v) => fmt(v),
    }))],
    cursor: extra.cursor || {},
    plugins: extra.plugins || [],
    legend: {live: true},
  };
  const plot = new uPlot(opts, data, box);
  charts[key] = plot;
  return plot;
}

// cell boundaries: a line at each cell's start, its name at the top (the first run's cells, or each run's in its colour)
function cellLines() {
  return {hooks: {draw: [(u) => {
    const ctx = u.ctx; ctx.save(); ctx.font = `${10 * devicePixelRatio}px system-ui`; ctx.textBaseline = "top";
    RUNS.forEach((run, i) => run.charts.cells.forEach((cell) => {
      const x = u.valToPos(cell.start_s, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.strokeStyle = SEVERAL ? runColor(i) : "#888"; ctx.globalAlpha = 0.5; ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
      ctx.globalAlpha = 0.8; ctx.fillStyle = ctx.strokeStyle; ctx.fillText(cell.cell, x + 3, u.bbox.top + 2 + i * 12 * devicePixelRatio);
    }));
    ctx.restore();
  }]}};
}

// zooming one timeline panel zooms the others
const synced = [];
function syncZoom() {
  return {hooks: {setScale: [(u, key) => {
    if (key !== "x" || u._syncing) return;
    const {min, max} = u.scales.x;
    for (const other of synced) if (other && other !== u) { other._syncing = true; other.setScale("x", {min, max}); other._syncing = false; }
  }]}};
}

function requestText(run, k) {
  const cols = run.charts.requests.columns;
  return Object.keys(cols).map((name) => `${name.padEnd(18)} ${fmt(cols[name][k], 4)}`).join("\n");
}

function timeline() {
  const parent = document.getElementById("timeline");
  parent.append(el("p", {class: "note", text: "Client and server on one time axis (seconds since each run's first request; dashed lines: cell starts). Drag to zoom, double-click to reset; hover a TTFT point for its request record."}));
  const sync = {key: "timeline", setSeries: false};
  const client = [], tps = [];
  RUNS.forEach((run, i) => {
    const t = run.charts.timeline;
    client.push({label: `${SEVERAL ? run.label + ": " : ""}streams in flight`, xs: t.t_s, ys: t.active_streams, color: runColor(i), step: true});
    tps.push({label: `${SEVERAL ? run.label + ": " : ""}decode tokens/s`, xs: t.t_s, ys: t.decode_tps, color: runColor(i), dash: [5, 3], scale: "tps"});
  });
  const common = (extra) => ({plugins: [cellLines(), syncZoom()], cursor: {sync}, ...extra});
  synced.push(chart(parent, "timeline-client", "Client: streams in flight (mean per bin, left) and decode tokens/s of all streams (right)", "s",
    [...client, ...tps], [{label: "streams"}, {label: "tokens/s", side: 1, scale: "tps", grid: {show: false}}], common({})));
  // TTFT of each request at its send time: one x axis for all runs' points, who[] says whose record
  const points = [];
  RUNS.forEach((run, i) => { const c = run.charts.requests.columns; c.sent_s.forEach((x, k) => { if (c.ttft_s[k] !== null) points.push([x, c.ttft_s[k], i, k]); }); });
  points.sort((a, b) => a[0] - b[0]);
  const data = [points.map((p) => p[0]), ...RUNS.map((_, i) => points.map((p) => p[2] === i ? p[1] : null))];
  const tip = document.getElementById("tip");
  const hover = {hooks: {setCursor: [(u) => {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
    const [, , i, k] = points[idx];
    tip.textContent = `${RUNS[i].label}: request ${k + 1} shown\n` + requestText(RUNS[i], k);
    tip.hidden = false;
    const rect = u.over.getBoundingClientRect();
    tip.style.left = `${Math.min(rect.left + u.cursor.left + 14, window.innerWidth - 380)}px`;
    tip.style.top = `${Math.max(rect.top + u.cursor.top - 120, 40)}px`;
  }]}};
  const shown = RUNS.map((run) => `${run.label}: ${run.charts.requests.shown.toLocaleString()} of ${run.charts.requests.total.toLocaleString()} requests`).join("; ");
  synced.push(chart(parent, "timeline-ttft", `Client: TTFT of each request at its send time (${shown}; thinned runs keep every failure and the slowest TTFTs)`, "s",
    RUNS.map((run, i) => ({label: `${SEVERAL ? run.label + ": " : ""}TTFT s`, xs: points.length ? [0] : [], ys: [0], color: runColor(i), points: true})),
    [{label: "TTFT s"}], common({data, plugins: [cellLines(), syncZoom(), hover], height: 220})));
  const server = [];
  RUNS.forEach((run, i) => run.charts.server.forEach((src, j) => {
    const name = `${SEVERAL ? run.label + ": " : ""}${run.charts.server.length > 1 ? src.source + " " : ""}`;
    const color = SEVERAL ? runColor(i) : null;
    [["running", "running", COLORS[0], []], ["queued", "queued", COLORS[1], []], ["kv_use", "KV-cache use (0-1)", COLORS[2], [6, 3]], ["accept_length", "accept length", COLORS[4], [2, 3]]].forEach(([key, label, own, dash], s) => {
      if (src[key].some((v) => v !== null)) server.push({label: name + label, xs: src.t_s, ys: src[key], color: color || own, dash: SEVERAL ? DASHES[s] : dash, step: key !== "accept_length" && key !== "kv_use",
        scale: key === "kv_use" || key === "accept_length" ? "ratio" : "y"});
    });
  }));
  synced.push(chart(parent, "timeline-server", "Server, from its /metrics scrapes: requests running and queued (left), KV-cache use and accept length (right)", "s", server,
    [{label: "requests"}, {label: "KV use, accept length", side: 1, scale: "ratio", grid: {show: false}}], common({})));
}

function perCell(figure, label, key) {
  const series = [];
  const cells = [...new Set(RUNS.flatMap((run) => run.charts.distributions.map((d) => d.cell)))];
  RUNS.forEach((run, i) => run.charts.distributions.forEach((d) => {
    if (!d[figure]) return;
    const c = cells.indexOf(d.cell);
    series.push({label: `${SEVERAL ? run.label + " " : ""}${d.cell} (n ${d.n})`, xs: d[figure].map((_, k) => k), ys: d[figure],
      color: SEVERAL ? runColor(i) : COLORS[c % COLORS.length], dash: SEVERAL ? DASHES[c % DASHES.length] : DASHES[Math.floor(c / COLORS.length) % DASHES.length]});
  }));
  chart(document.getElementById("distributions"), key, `${label} by percentile, per cell (every successful request; linear interpolation)`, "percentile",
    series, [{label}], {height: 280});
}

function aggregate() {
  const series = [];
  RUNS.forEach((run, i) => {
    const a = run.charts.aggregate;
    const kinds = [...new Set(a.concurrent.map((r) => r.kind))];
    kinds.forEach((kind, k) => {
      const rows = a.concurrent.filter((r) => r.kind === kind && r.aggregate_tps !== null);
      const xs = rows.map((r) => r.concurrency), ys = rows.map((r) => r.aggregate_tps);
      if (a.single_code_tps !== null) { xs.unshift(1); ys.unshift(a.single_code_tps); }
      series.push({label: `${SEVERAL ? run.label + ": " : ""}${kind} (protocol aggregate)`, xs, ys, color: runColor(SEVERAL ? i : k), dash: SEVERAL ? DASHES[k % DASHES.length] : []});
    });
    const steady = a.steady.filter((r) => r.in_flight !== null && r.decode_tps !== null).sort((p, q) => p.in_flight - q.in_flight);
    if (steady.length) series.push({label: `${SEVERAL ? run.label + ": " : ""}free-running cells, steady state`, xs: steady.map((r) => r.in_flight), ys: steady.map((r) => r.decode_tps), color: runColor(SEVERAL ? i : 3), points: steady.length === 1, dash: [2, 3]});
  });
  chart(document.getElementById("aggregate"), "aggregate", "Aggregate tokens/s against concurrency (N = 1: single-stream code decode; free-running cells at their mean streams in flight)",
    "concurrent streams", series, [{label: "tokens/s"}]);
}

function search() {
  const parent = document.getElementById("search");
  const runs = RUNS.map((run, i) => [run, i]).filter(([run]) => run.charts.search);
  if (!runs.length) return;
  const series = [];
  runs.forEach(([run, i]) => {
    const levels = run.charts.search.levels;
    series.push({label: `${SEVERAL ? run.label + ": " : ""}share of blocks meeting the SLO`, xs: levels.map((l) => l.value), ys: levels.map((l) => l.pass_share_blocks), color: runColor(i), scale: "share"});
    series.push({label: `${SEVERAL ? run.label + ": " : ""}delivered req/s`, xs: levels.map((l) => l.value), ys: levels.map((l) => l.delivered_rps), color: runColor(SEVERAL ? i : 1), dash: [5, 3]});
  });
  const variable = runs[0][0].charts.search.variable === "rate" ? "offered req/s" : "users";
  chart(parent, "search", "Capacity search: each level's SLO pass share (left) and delivered requests/s (right)", variable, series,
    [{label: "pass share", scale: "share"}, {label: "req/s", side: 1, grid: {show: false}}], {scales: {share: {range: [0, 1]}}});
  runs.forEach(([run, i]) => {
    const levels = run.charts.search.levels;
    parent.append(el("h3", {}, ...(SEVERAL ? [chip(runColor(i)), run.label + ": "] : []), "Levels and their verdicts"));
    parent.append(table([variable, "verdict", "n", "pass share", "delivered req/s", "latency s", "in flight", "Little's law holds"],
      levels.map((l) => [fmt(l.value), l.verdict ?? "–", fmt(l.n, 0), fmt(l.pass_share_blocks), fmt(l.delivered_rps), fmt(l.latency_s), fmt(l.in_flight), fmt(l.little_holds)]),
      {left: ["verdict"], attrs: {"data-part": "search-levels", "data-run": String(i)}}));
  });
}

function byLength() {
  const parent = document.getElementById("by-length");
  for (const [figure, label, x] of [["TTFT s", "TTFT s", "prompt tokens (bucket's lower edge)"], ["decode t/s", "decode t/s", "completion tokens (bucket's lower edge)"]]) {
    const series = [];
    RUNS.forEach((run, i) => {
      const rows = run.charts.by_length.filter((r) => r.figure === figure);
      const cells = [...new Set(rows.map((r) => r.cell))];
      cells.forEach((cell, c) => {
        const own = rows.filter((r) => r.cell === cell);
        for (const [q, dash] of [["p50", []], ["p90", [5, 3]]]) series.push({label: `${SEVERAL ? run.label + " " : ""}${cell} ${q}`, xs: own.map((r) => r.low), ys: own.map((r) => r[q]),
          color: SEVERAL ? runColor(i) : COLORS[c % COLORS.length], dash});
      });
    });
    if (series.length) chart(parent, `by-length-${figure.split(" ")[0].toLowerCase()}`, `By length, free-running cells: ${label} by ${x.split(" (")[0]} (p50 solid, p90 dashed)`, x, series, [{label}],
      {scales: {x: {time: false, distr: 3, log: 2}}, xScale: {distr: 3, log: 2}});
  }
}

// --- requests -----------------------------------------------------------------------------------
function requestsTable() {
  const section = document.getElementById("requests");
  const names = Object.keys(RUNS[0].charts.requests.columns);
  const all = RUNS.flatMap((run, i) => { const c = run.charts.requests.columns; return c.sent_s.map((_, k) => [run.label, ...names.map((n) => c[n][k])]).map((row) => ({i, row})); });
  const shown = RUNS.map((run) => `${run.label}: ${run.charts.requests.shown.toLocaleString()} of ${run.charts.requests.total.toLocaleString()}`).join("; ");
  section.append(el("p", {class: "note", text: `Request records (${shown}; a long run's are thinned: every failure, the slowest TTFTs, an even sample). Filter by any text; at most 500 rows are listed.`}));
  const filter = el("input", {type: "search", placeholder: "filter: cell, scenario, error, id…", size: "40", id: "request-filter"});
  const failed = el("input", {type: "checkbox", id: "failed-only"});
  const run = el("select", {id: "request-run"}, el("option", {value: "", text: "every run"}), ...DATA.labels.map((l) => el("option", {value: l, text: l})));
  const count = el("span", {class: "note"});
  section.append(el("div", {class: "filters"}, filter, el("label", {}, failed, " failed only"), ...(SEVERAL ? [run] : []), count));
  const holder = el("div", {class: "tall"});
  section.append(holder);
  const errorAt = names.indexOf("error") + 1;
  const draw = () => {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = all.filter(({row}) => (!failed.checked || row[errorAt] !== null) && (!run.value || row[0] === run.value)
      && words.every((w) => row.some((v) => v !== null && String(v).toLowerCase().includes(w))));
    count.textContent = `${rows.length.toLocaleString()} match`;
    holder.replaceChildren(table(["run", ...names], rows.slice(0, 500).map(({row}) => row.map((v) => fmt(v, 4))),
      {left: ["run", "request_id", "cell", "scenario", "finish_reason", "error"], attrs: {"data-part": "requests"}}));
  };
  for (const input of [filter, failed, run]) input.addEventListener("input", draw);
  draw();
}

header(); what(); verdicts(); tables();
timeline(); perCell("ttft_s", "TTFT s", "ttft-distribution"); perCell("decode_tps", "decode t/s", "decode-distribution");
aggregate(); search(); byLength(); requestsTable();
document.body.dataset.rendered = "yes";
