// Arena dashboard: small hand-written SVG line charts and live updates over server-sent events.
// No library and no network beyond the dashboard's own origin (the page's CSP allows nothing else).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d",
    "#4d7c0f", "#78716c", "#1e3a8a"];
  const W = 460, H = 220, M = { l: 52, r: 12, t: 10, b: 26 };

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
    return String(Math.round(v * 1000) / 1000);
  }

  function ticks(lo, hi, n) {
    if (hi === lo) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12; v += step) out.push(v);
    return out;
  }

  // lines: [{key, points: [[x, y|null], ...]}]; fig._hidden holds the keys toggled off
  function draw(fig, lines) {
    fig._lines = lines;
    const hidden = fig._hidden || (fig._hidden = new Set());
    const old = fig.querySelector("svg");
    if (old) old.remove();
    const legendOld = fig.querySelector(".legend");
    if (legendOld) legendOld.remove();
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img" });
    fig.appendChild(svg);
    const shown = lines.filter((l) => !hidden.has(l.key));
    const pts = shown.flatMap((l) => l.points.filter((p) => p[1] !== null && p[1] !== undefined));
    if (!pts.length) {
      el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "nodata" }, svg)
        .textContent = "no values yet";
    } else {
      let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
      let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
      if (x0 === x1) { x0 -= 1; x1 += 1; }
      if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
      const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
      const sx = (x) => M.l + ((x - x0) / (x1 - x0)) * (W - M.l - M.r);
      const sy = (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b);
      for (const t of ticks(y0, y1, 4)) {
        el("line", { x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t), class: "grid" }, svg);
        el("text", { x: M.l - 4, y: sy(t) + 4, "text-anchor": "end", class: "tick" }, svg)
          .textContent = fmt(t);
      }
      for (const t of ticks(x0, x1, 5)) {
        el("text", { x: sx(t), y: H - 8, "text-anchor": "middle", class: "tick" }, svg)
          .textContent = fmt(t);
      }
      el("rect", { x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, class: "frame" }, svg);
      lines.forEach((line, i) => {
        if (hidden.has(line.key)) return;
        const color = COLORS[i % COLORS.length];
        const good = line.points.filter((p) => p[1] !== null && p[1] !== undefined);
        let d = "", pen = false;
        for (const [x, y] of line.points) {
          if (y === null || y === undefined) {
            if (!line.sparse) pen = false;
            continue;
          }
          d += `${pen ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
          pen = true;
        }
        const path = el("path", { d, stroke: color, class: "series", "data-key": line.key,
          "data-n": good.length, "data-last-x": good.length ? good[good.length - 1][0] : "" }, svg);
        path.appendChild(el("title", {})).textContent = line.key;
        if (good.length <= 40) {
          for (const [x, y] of good) el("circle", { cx: sx(x), cy: sy(y), r: 2.5, fill: color }, svg);
        }
      });
    }
    const legend = document.createElement("div");
    legend.className = "legend";
    lines.forEach((line, i) => {
      const item = document.createElement("button");
      item.type = "button";
      item.className = "key" + (hidden.has(line.key) ? " off" : "");
      item.style.setProperty("--c", COLORS[i % COLORS.length]);
      item.textContent = line.key;
      item.title = "show or hide";
      item.addEventListener("click", () => {
        hidden.has(line.key) ? hidden.delete(line.key) : hidden.add(line.key);
        draw(fig, fig._lines);
      });
      legend.appendChild(item);
    });
    fig.appendChild(legend);
  }

  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin" });
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    return r.json();
  }

  function showProblem(text) {
    let list = document.getElementById("problems");
    if (!list) {
      list = document.createElement("ul");
      list.id = "problems";
      list.className = "problems";
      document.querySelector("main").prepend(list);
    }
    const li = document.createElement("li");
    li.textContent = text;
    list.appendChild(li);
  }

  // -- a run's page: load the curves, then follow the run live ------------------------------------
  const data = { steps: [], series: {} };
  const SPARSE = (k) => k.startsWith("eval/");

  function linesFor(keys) {
    return keys.map((k) => ({ key: k, sparse: SPARSE(k),
      points: data.steps.map((s, i) => [s, (data.series[k] || [])[i] ?? null]) }));
  }

  let pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      for (const fig of document.querySelectorAll("figure.chart[data-keys]:not([data-runs])")) {
        draw(fig, linesFor(fig.dataset.keys.split(",")));
      }
    });
  }

  async function runPage(head) {
    const run = encodeURIComponent(head.dataset.run);
    const figs = [...document.querySelectorAll("figure.chart[data-keys]:not([data-runs])")];
    const keys = [...new Set(figs.flatMap((f) => f.dataset.keys.split(",")))];
    let since = head.dataset.since;
    try {
      const m = await getJSON(`/api/runs/${run}/metrics?keys=${encodeURIComponent(keys.join(","))}`);
      data.steps = m.steps;
      data.series = m.series;
      if (m.last_step !== null) since = String(m.last_step);
      redraw();
    } catch (err) {
      showProblem(`could not load the metrics: ${err.message}`);
    }
    const picker = document.getElementById("add-chart");
    if (picker) {
      picker.addEventListener("change", async () => {
        const key = picker.value;
        if (!key) return;
        const fig = document.createElement("figure");
        fig.className = "chart";
        fig.dataset.keys = key;
        fig.innerHTML = "<figcaption></figcaption>";
        fig.querySelector("figcaption").textContent = key;
        document.getElementById("charts").appendChild(fig);
        const m = await getJSON(`/api/runs/${run}/metrics?keys=${encodeURIComponent(key)}`);
        // the fetched steps may be downsampled differently: draw this one from its own reply
        const values = m.series[key] || [];
        data.series[key] = data.steps.map((s) => {
          const i = m.steps.indexOf(s);
          return i < 0 ? null : values[i];
        });
        redraw();
      });
    }
    follow(run, since);
  }

  function follow(run, since) {
    const url = `/api/runs/${run}/events` + (since ? `?since=${since}` : "");
    const source = new EventSource(url);
    source.addEventListener("metrics", (ev) => {
      const rows = JSON.parse(ev.data).rows;
      for (const row of rows) {
        data.steps.push(row.step);
        for (const key of Object.keys(row)) {
          if (key === "step") continue;
          if (!data.series[key]) data.series[key] = new Array(data.steps.length - 1).fill(null);
          data.series[key].push(row[key]);
        }
        for (const key of Object.keys(data.series)) {
          if (data.series[key].length < data.steps.length) data.series[key].push(null);
        }
      }
      if (rows.length) {
        document.getElementById("step").textContent = String(rows[rows.length - 1].step);
        redraw();
      }
    });
    source.addEventListener("status", (ev) => {
      const status = JSON.parse(ev.data).status;
      const badge = document.getElementById("status");
      badge.textContent = status;
      badge.className = `status status-${status}`;
      if (status !== "running" && status !== "incomplete") source.close();
    });
  }

  // -- compare page and population chart ----------------------------------------------------------
  async function compareChart(fig) {
    const key = fig.dataset.keys;
    const lines = [];
    for (const run of fig.dataset.runs.split(",")) {
      try {
        const m = await getJSON(
          `/api/runs/${encodeURIComponent(run)}/metrics?keys=${encodeURIComponent(key)}`);
        lines.push({ key: run, sparse: true,
          points: m.steps.map((s, i) => [s, (m.series[key] || [])[i] ?? null]) });
      } catch (err) {
        showProblem(`${run}: ${err.message}`);
      }
    }
    draw(fig, lines);
  }

  function populationChart(fig) {
    const curves = JSON.parse(fig.dataset.curves || "{}");
    draw(fig, Object.entries(curves).map(([member, points]) => ({ key: `member ${member}`,
      points })));
  }

  function copyButtons() {
    for (const button of document.querySelectorAll("button.copy")) {
      button.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(button.dataset.copy);
          button.textContent = "copied";
        } catch (err) {
          const code = button.previousElementSibling;
          window.getSelection().selectAllChildren(code);
          button.textContent = "select + Ctrl-C";
        }
      });
    }
  }

  function start() {
    copyButtons();
    for (const fig of document.querySelectorAll("figure.chart[data-runs]")) compareChart(fig);
    for (const fig of document.querySelectorAll("figure.population-chart")) populationChart(fig);
    const head = document.getElementById("run");
    if (head) runPage(head);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
