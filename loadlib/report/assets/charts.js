// charts.js: draws charts as loadlib/report/charts.py's `drawn` gives them, with uPlot. report.html and
// the live page both use it; it knows no chart by name: what a chart shows, its kind, colours, dashes,
// marks and whiskers all come with its data.
"use strict";
const Charts = (() => {
  const DASH = {solid: [], dashed: [6, 3], dotted: [2, 3], dashdot: [8, 3, 2, 3]};
  const fmt = (v, digits = 3) => v === null || v === undefined ? "–" :
    typeof v === "number" ? v.toLocaleString("en-US", {maximumFractionDigits: digits}) : String(v);

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value; else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  // uPlot's aligned data: one sorted x column. Series sharing an x value share its row; a point that names
  // its record (`rows`) has a row of its own, so that the cursor over it finds it. `at[r]`: series -> point.
  function aligned(chart) {
    const byX = new Map(), found = [];
    chart.series.forEach((s, i) => s.x.forEach((x, k) => {
      let row = s.rows ? null : byX.get(x);
      if (!row) { row = {x, at: new Map()}; found.push(row); if (!s.rows) byX.set(x, row); }
      row.at.set(i, k);
    }));
    found.sort((a, b) => a.x - b.x);
    const data = [found.map((r) => r.x), ...chart.series.map((s, i) => found.map((r) => r.at.has(i) ? s.y[r.at.get(i)] : null))];
    return {data, at: found.map((r) => r.at)};
  }

  // a y scale's range from its series' values and whiskers: from 0 where the axis says so, 5 % above the top
  // (a log scale: a fifth beyond either end)
  function range(ref, right, zero, log) {
    return (u) => {
      const chart = ref.chart;
      let lo = Infinity, hi = -Infinity;
      chart.series.forEach((s, i) => {
        if (!!s.right !== right || (u.series[i + 1] && u.series[i + 1].show === false)) return;
        const half = s.kind === "span" ? 0.5 : 0;  // a span's lane: half a unit either side
        for (const list of [s.y, s.low, s.high]) for (const v of list || []) if (v !== null) { lo = Math.min(lo, v - half); hi = Math.max(hi, v + half); }
      });
      if (chart.marks) for (const m of chart.marks) if (m.axis === "y" && !right) { lo = Math.min(lo, m.at); hi = Math.max(hi, m.at); }
      if (lo === Infinity) return [0, 1];
      if (log) return [lo / 1.25, hi * 1.25];
      if (zero || chart.series.some((s) => s.kind === "bar")) lo = Math.min(lo, 0);
      const pad = (hi - lo) * (chart.series.some((s) => s.text) ? 0.15 : 0.05) || Math.abs(hi) * 0.1 || 1;
      return [lo === 0 ? 0 : lo - pad, hi + pad];
    };
  }

  function uSeries(s) {
    const dots = s.kind === "scatter", bars = s.kind === "bar" || s.kind === "span";
    return {
      label: s.label, stroke: s.color, fill: bars ? s.color : undefined, width: dots || bars ? 0 : 1.5, dash: DASH[s.style] || [],
      scale: s.right ? "y2" : "y", spanGaps: true,
      paths: dots || bars ? () => null : s.kind === "step" ? uPlot.paths.stepped({align: 1}) : undefined,
      points: dots ? {show: true, size: 5, width: 1, stroke: s.color, fill: s.style === "solid" ? s.color : "#fff"}
        : s.kind === "line" && s.x.length <= 30 ? {show: true, size: 5, stroke: s.color, fill: s.color} : {show: false},
      value: (u, v) => fmt(v),
    };
  }

  // what uPlot does not draw: bands and lines (marks), bars, whiskers, text at a point
  function decorations(ref) {
    const clipped = (u, paint) => {
      const ctx = u.ctx, {left, top, width, height} = u.bbox;
      ctx.save(); ctx.beginPath(); ctx.rect(left, top, width, height); ctx.clip(); paint(ctx, left, top, width, height); ctx.restore();
    };
    const bands = (u) => clipped(u, (ctx, left, top, width, height) => {
      const marks = ref.chart.marks.filter((m) => m.axis === "x" && m.to !== null);
      if (new Set(marks.map((m) => m.run)).size > 1) return;  // several runs' bands: their starts are drawn as lines
      marks.forEach((m, i) => {
        const x0 = u.valToPos(m.at, "x", true), x1 = u.valToPos(m.to, "x", true);
        ctx.fillStyle = i % 2 ? "rgba(120,130,150,0.06)" : "rgba(120,130,150,0.13)";
        ctx.fillRect(x0, top, Math.max(x1 - x0, 1), height);
      });
    });
    const draw = (u) => clipped(u, (ctx, left, top, width, height) => {
      const px = devicePixelRatio, chart = ref.chart;
      ctx.font = `${10 * px}px system-ui`; ctx.textBaseline = "top";
      const several = new Set(chart.marks.map((m) => m.run)).size > 1;
      chart.marks.forEach((m, i) => {
        ctx.strokeStyle = ctx.fillStyle = m.color; ctx.lineWidth = px; ctx.setLineDash((DASH[m.style] || []).map((d) => d * px));
        if (m.axis === "y") {
          const y = u.valToPos(m.at, "y", true);
          ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(left + width, y); ctx.stroke();
          ctx.textAlign = "right"; ctx.fillText(m.label, left + width - 4 * px, y + 2 * px);
          return;
        }
        const x0 = u.valToPos(m.at, "x", true), x1 = m.to === null ? x0 : u.valToPos(m.to, "x", true);
        const line = m.to === null || several;
        if (line) { ctx.beginPath(); ctx.moveTo(x0, top); ctx.lineTo(x0, top + height); ctx.stroke(); }
        ctx.setLineDash([]); ctx.textAlign = "left";
        const room = m.to === null ? Infinity : x1 - x0;
        if (ctx.measureText(m.label).width + 6 * px <= room) ctx.fillText(m.label, x0 + 3 * px, top + 2 * px + (several ? m.run * 12 * px : (i % 2) * 11 * px));
      });
      ctx.setLineDash([]);
      chart.series.forEach((s, i) => {
        if (!u.series[i + 1].show) return;
        const scale = s.right ? "y2" : "y", base = u.valToPos(Math.max(u.scales[scale].min, 0), scale, true);
        s.x.forEach((x, k) => {
          const cx = u.valToPos(x, "x", true), v = s.y[k];
          if (s.kind === "bar" && v !== null) {
            const half = (u.valToPos(x + s.width / 2, "x", true) - u.valToPos(x - s.width / 2, "x", true)) / 2;
            const y = u.valToPos(v, scale, true);
            ctx.fillStyle = s.color; ctx.fillRect(cx - half, Math.min(y, base), 2 * half, Math.abs(base - y));
          }
          if (s.kind === "span" && v !== null && s.end[k] !== null) {
            const top = u.valToPos(v + 0.3, scale, true), bottom = u.valToPos(v - 0.3, scale, true);
            ctx.fillStyle = s.color; ctx.fillRect(cx, top, Math.max(u.valToPos(s.end[k], "x", true) - cx, px), bottom - top);
          }
          if (s.low && s.high && s.low[k] !== null && s.high[k] !== null) {
            const y0 = u.valToPos(s.low[k], scale, true), y1 = u.valToPos(s.high[k], scale, true), cap = 4 * px;
            ctx.strokeStyle = s.kind === "bar" ? "#222" : s.color; ctx.lineWidth = px;
            ctx.beginPath(); ctx.moveTo(cx, y0); ctx.lineTo(cx, y1);
            for (const y of [y0, y1]) { ctx.moveTo(cx - cap, y); ctx.lineTo(cx + cap, y); }
            ctx.stroke();
          }
          if (s.text && s.text[k] !== null) {
            ctx.textAlign = "center"; ctx.textBaseline = "bottom";
            ctx.fillStyle = v === null ? "#b3261e" : "#333";
            ctx.fillText(s.text[k], cx, v === null ? base - 4 * px : u.valToPos(s.high ? Math.max(v, s.high[k] ?? v) : v, scale, true) - 3 * px);
            ctx.textBaseline = "top";
          }
        });
      });
    });
    return {hooks: {drawClear: [bands], draw: [draw]}};
  }

  // the cursor over a point that names its record: hover(series, point) or hover(null)
  function hovering(ref, hover) {
    return {hooks: {setCursor: [(u) => {
      const idx = u.cursor.idx;
      if (idx === null || idx === undefined || u.cursor.left < 0) { hover(null); return; }
      for (const [i, k] of ref.at[idx] || []) if (ref.chart.series[i].rows && u.series[i + 1].show) { hover(ref.chart.series[i], k, u); return; }
      hover(null);
    }]}};
  }

  // panels of one figure that share their x axis zoom together
  function zoomTogether(group) {
    return {hooks: {setScale: [(u, key) => {
      if (key !== "x" || u.syncing) return;
      const {min, max} = u.scales.x;
      for (const other of group) if (other !== u) { other.syncing = true; other.setScale("x", {min, max}); other.syncing = false; }
    }]}};
  }

  // one chart into `box`: {width, height, hover(series, point), group (zoomed together)}
  function plot(box, chart, opts = {}) {
    const {data, at} = aligned(chart);
    const ref = {chart, at};
    const ticks = chart.x.ticks;
    const axisValues = (u, splits) => splits.map((v) => fmt(v, 4));
    const axes = [{label: chart.x.title, ...(ticks ? {splits: () => ticks.map((_, i) => i), values: (u, splits) => splits.map((i) => ticks[i] ?? ""), grid: {show: false}} : {})},
      {label: chart.y.title, scale: "y", size: 60, values: axisValues}];
    if (chart.y2) axes.push({label: chart.y2.title, scale: "y2", side: 1, size: 60, grid: {show: false}, values: axisValues});
    const spanEnd = () => Math.max(...ref.chart.series.flatMap((s) => (s.end || []).filter((v) => v !== null)));
    const xRange = ticks ? () => [-0.5, ticks.length - 0.5] : chart.x.range ? () => ref.chart.x.range  // panels of one axis: its span
      : chart.series.some((s) => s.end) ? (u, min, max) => [min, Math.max(max, spanEnd())] : undefined;  // spans to their ends
    const scales = {x: {time: false, ...(chart.x.log ? {distr: 3, log: chart.x.log} : {}), ...(xRange ? {range: xRange} : {})},
      y: {range: range(ref, false, chart.y.zero, chart.y.log), ...(chart.y.log ? {distr: 3, log: chart.y.log} : {})},
      ...(chart.y2 ? {y2: {range: range(ref, true, chart.y2.zero, chart.y2.log), ...(chart.y2.log ? {distr: 3, log: chart.y2.log} : {})}} : {})};
    const plugins = [decorations(ref)];
    if (opts.hover) plugins.push(hovering(ref, opts.hover));
    if (opts.group) plugins.push(zoomTogether(opts.group));
    const u = new uPlot({width: opts.width, height: opts.height || 260, scales, axes, plugins, legend: {live: true},
      series: [{label: chart.x.title}, ...chart.series.map(uSeries)],
      cursor: opts.group ? {sync: {key: opts.group.key, setSeries: false}} : {}}, data, box);
    u.ref = ref;
    if (opts.group) opts.group.push(u);
    return u;
  }

  // the same chart with new data: redrawn in place while its series stay the same, else drawn anew
  function update(u, chart) {
    const old = u.ref.chart;
    const same = old.series.length === chart.series.length && old.series.every((s, i) => s.label === chart.series[i].label);
    if (!same) return null;
    const {data, at} = aligned(chart);
    u.ref.chart = chart; u.ref.at = at;
    u.setData(data);
    return u;
  }

  return {plot, update, el, fmt};
})();
