// report.html: draws what loadlib/report/html_data.py embedded. Every figure is read from the
// embedded data as the figure functions returned it; this script only lays out the tables, and the
// charts with charts.js (which draws what each chart's data declares).
"use strict";
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const RUNS = DATA.runs;
const SEVERAL = RUNS.length > 1;
const WIDTH = () => Math.min(document.body.clientWidth - 32, 1248);
const {el, fmt} = Charts;
const runColor = (i) => DATA.colors[i % DATA.colors.length];  // each run's colour in the charts too
const chip = (color) => el("span", {class: "chip", style: `background:${color}`});

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

// What was run, at a glance: the server, its model and speculative settings, the load, the client and
// the command; in a comparison also every key whose values differ between the runs. The rest folds.
const MAIN = /^(target\.(url|builtin_simulator)|server\.(kind|version)|server\.launch\.(served_model_name|tp_size|dp_size|max_running_requests|speculative_algorithm|speculative_num_draft_tokens)|model|protocol\.(mode|users|concurrency|rounds|max_tokens)|profile\.(file|description)|client\.(host|cpu_model|cores)|tool\.version|command|started_at|ended_at)$/;
function what() {
  const section = document.getElementById("what");
  const keys = [...new Set(RUNS.flatMap((run) => run.what.map(([key]) => key)))];
  const values = RUNS.map((run) => Object.fromEntries(run.what));
  const differs = (key) => new Set(values.map((v) => JSON.stringify(v[key] ?? null))).size > 1;
  const main = (key) => MAIN.test(key) || (SEVERAL && differs(key));
  const rowsOf = (list) => list.map((key) => [key, ...values.map((v) => v[key] ?? "–")]);
  const columns = ["", ...DATA.labels];
  const wrap = new Set(DATA.labels);
  section.append(table(columns, rowsOf(keys.filter(main)), {left: columns, wrap, attrs: {"data-part": "what"}}));
  const rest = keys.filter((k) => !main(k));
  if (rest.length) section.append(el("details", {}, el("summary", {text: `the rest of the manifest (${rest.length} ${rest.length === 1 ? "key" : "keys"})`}), table(columns, rowsOf(rest), {left: columns, wrap})));
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

// --- a server sweep: its table and the logs of the configurations that did not serve (its charts are
// among the page's charts) ---
function sweep(section, sw) {
  const lead = DATA.sweeps.length > 1 ? [`${sw.label}: `] : [];
  for (const s of sw.sections) {
    if (!s.shown) continue;
    const status = s.columns.indexOf("status"), warnings = s.columns.indexOf("warnings");
    const flagged = (r, c) => (c === status && s.view[r][c] !== "ok") || (c === warnings && s.view[r][c] !== "-");
    section.append(sectionNode(s, lead, {"data-sweep": sw.label}, (r, c) => flagged(r, c) ? "bad" : null));
  }
}

function tables() {
  const section = document.getElementById("tables");
  RUNS.forEach((run, i) => {
    const box = el("details", {open: ""}, el("summary", {}, chip(runColor(i)), `${run.label}: ${run.sections.filter((s) => s.shown).length} tables`));
    for (const s of run.sections) if (s.shown && s.key !== "validity" && s.key !== "search") box.append(sectionNode(s, runLead(run, i), {"data-run": String(i)}));
    section.append(box);
  });
}

// --- charts: every chart the data declares, drawn by charts.js; a point that names its request shows its record ---
function requestText(run, k) {
  const cols = run.requests.columns;
  return Object.keys(cols).map((name) => `${name.padEnd(18)} ${fmt(cols[name][k], 4)}`).join("\n");
}

function charts() {
  const parent = document.getElementById("charts");
  parent.append(el("p", {class: "note", text: "Drag to zoom, double-click to reset; panels of one time axis zoom together. Shaded bands (lines for several runs): the cells. Hover a point of a request for its record."}));
  const tip = document.getElementById("tip");
  const hover = (series, k, u) => {
    if (!series) { tip.hidden = true; return; }
    const run = RUNS[series.run], row = series.rows[k];
    tip.textContent = `${run.label}: request ${row + 1} shown\n` + requestText(run, row);
    tip.hidden = false;
    const rect = u.over.getBoundingClientRect();
    tip.style.left = `${Math.min(rect.left + u.cursor.left + 14, window.innerWidth - 380)}px`;
    tip.style.top = `${Math.max(rect.top + u.cursor.top - 120, 40)}px`;
  };
  DATA.charts.forEach(({figure, stacked, charts: panels}, f) => {
    const holder = el("div", {class: stacked ? "" : "grid2", "data-figure": figure});
    parent.append(holder);
    const group = Object.assign([], {key: `figure-${f}`});
    for (const chart of panels) {
      const box = el("div", {class: "chart", "data-chart": chart.id}, el("h3", {text: chart.title}));
      for (const s of chart.sampled) box.append(el("p", {class: "note", text: `${RUNS[s.run].label}: ${s.shown.toLocaleString()} of ${s.total.toLocaleString()} requests drawn (every failure, the slowest TTFTs, an even sample)`}));
      holder.append(box);
      Charts.plot(box, chart, {width: stacked ? WIDTH() : Math.floor(WIDTH() / 2) - 12, height: stacked ? 240 : 260,
        hover: chart.series.some((s) => s.rows) ? hover : null, group: stacked && panels.length > 1 ? group : null});
    }
  });
}

// --- requests -----------------------------------------------------------------------------------
function requestsTable() {
  const section = document.getElementById("requests");
  const names = Object.keys(RUNS[0].requests.columns);
  const all = RUNS.flatMap((run, i) => { const c = run.requests.columns; return c.sent_s.map((_, k) => [run.label, ...names.map((n) => c[n][k])]).map((row) => ({i, row})); });
  const shown = RUNS.map((run) => `${run.label}: ${run.requests.shown.toLocaleString()} of ${run.requests.total.toLocaleString()}`).join("; ");
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

header(); what(); verdicts(); tables(); charts(); requestsTable();
document.body.dataset.rendered = "yes";
