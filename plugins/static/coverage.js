// Charts of the coverage page, drawn with Plotly (served by the plugin from the installed wheel).
// Database values only ever reach the DOM as text: hover labels are HTML-escaped first (Plotly
// renders a subset of HTML in them) and the clicked cell's detail is set with textContent.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (value) => String(value).replace(/[&<>"']/g, (c) => ESC[c]);
  const num = (value) => (value === null || value === undefined ? "-" : Number(value).toLocaleString("en-US"));
  const config = { responsive: true, displayModeBar: false };
  const label = (p) => `${p.topic}[${p.partition}]`;

  // Coverage bars: every partition's [log start, log end) scaled to 0..100 %, so partitions of
  // very different sizes read the same; hover shows the absolute offsets.
  function coverage(element, partitions) {
    const layers = {
      retained: { name: "not committed (gap)", color: "#cfd3dc", y: [], base: [], x: [], text: [] },
      committed: { name: "committed", color: "#2e7d32", y: [], base: [], x: [], text: [] },
      unread: { name: "not read yet (lag)", color: "#f9a825", y: [], base: [], x: [], text: [] },
      lost: { name: "lost (recorded)", color: "#c62828", y: [], base: [], x: [], text: [] },
    };
    for (const p of partitions) {
      const lo = p.log_start ?? Math.min(...p.committed.map((r) => r[0]), 0);
      const hi = Math.max(p.log_end ?? 0, ...p.committed.map((r) => r[1]), lo + 1);
      const pct = (offset) => ((Math.min(Math.max(offset, lo), hi) - lo) / (hi - lo)) * 100;
      const add = (layer, start, end, what) => {
        const a = pct(start);
        const b = pct(end);
        if (b <= a) return;
        const l = layers[layer];
        l.y.push(label(p));
        l.base.push(a);
        l.x.push(b - a);
        l.text.push(`${esc(label(p))} ${what} [${num(start)}, ${num(end)}) · ${num(end - start)} offsets`);
      };
      add("retained", lo, hi, "retained");
      for (const [a, b] of p.committed) add("committed", a, b, "committed");
      if (p.ledger !== null && p.log_end !== null && p.log_end > p.ledger) add("unread", p.ledger, p.log_end, "unread");
      if (p.ledger === null && p.log_end !== null) add("unread", lo, p.log_end, "unread");
      for (const [a, b] of p.lost) add("lost", a, b, "lost");
    }
    const traces = Object.values(layers).map((l) => ({
      type: "bar", orientation: "h", name: l.name, y: l.y, x: l.x, base: l.base,
      marker: { color: l.color }, hovertext: l.text, hovertemplate: "%{hovertext}<extra></extra>",
    }));
    const rows = partitions.length;
    Plotly.newPlot(element, traces, {
      barmode: "overlay", bargap: 0.25, height: Math.max(160, 20 * rows + 90),
      margin: { l: 10, r: 16, t: 8, b: 40 },
      xaxis: { range: [0, 100], ticksuffix: " %", title: { text: "share of the retained log [log start, log end)" } },
      yaxis: { autorange: "reversed", type: "category", automargin: true },
      legend: { orientation: "h", y: -0.2 - 2 / Math.max(rows, 1) },
    }, config);
  }

  // A gap's kinds as its checks stored them (reprocess.checks: missing, older, values differ, …), as " [a, b]".
  function kinds(cell) {
    return cell.kinds && cell.kinds.length ? ` [${esc(cell.kinds.join(", "))}]` : "";
  }

  // Reconciliation calendar: a heatmap of day windows × partitions, 1 = ok, 0.5 = healed (ok after a
  // gap a backfill closed), 0.25 = not yet stable (records past the ledger or a held LSO: amber, not
  // the red of a gap), 0 = gap.
  function calendar(element, cells, detail) {
    const days = [...new Set(cells.map((c) => c.window_start.slice(0, 10)))].sort();
    const rows = [...new Set(cells.map((c) => label(c)))];
    const z = rows.map(() => days.map(() => null));
    const text = rows.map(() => days.map(() => ""));
    const byKey = new Map();
    for (const c of cells) {
      const i = rows.indexOf(label(c));
      const j = days.indexOf(c.window_start.slice(0, 10));
      z[i][j] = { ok: 1, healed: 0.5, "not yet stable": 0.25 }[c.verdict] ?? 0;
      text[i][j] = `${esc(c.verdict)}${kinds(c)}: ${esc(c.detail ?? "")}`;
      byKey.set(`${i}/${j}`, c);
    }
    Plotly.newPlot(element, [{
      type: "heatmap", x: days, y: rows, z, text, zmin: 0, zmax: 1, xgap: 2, ygap: 2, showscale: false,
      colorscale: [[0, "#c62828"], [0.125, "#c62828"], [0.125, "#f9a825"], [0.375, "#f9a825"], [0.375, "#81c784"],
        [0.75, "#81c784"], [0.75, "#2e7d32"], [1, "#2e7d32"]],
      hovertemplate: "%{y} · %{x}<br>%{text}<extra></extra>",
    }], {
      height: Math.max(160, 18 * rows.length + 80), margin: { l: 10, r: 16, t: 8, b: 60 },
      xaxis: { type: "category", tickangle: -45, automargin: true },
      yaxis: { autorange: "reversed", type: "category", automargin: true },
    }, config);
    element.on("plotly_click", (event) => {
      const point = event.points[0];
      const cell = byKey.get(`${rows.indexOf(point.y)}/${days.indexOf(point.x)}`);
      if (!cell) return;
      const lines = [
        `${label(cell)} window [${cell.window_start}, ${cell.window_end})`,
        `Kafka offsets [${cell.kafka_start}, ${cell.kafka_end}) · verdict ${cell.verdict}${kinds(cell)}`,
        cell.detail ?? "",
      ];
      if (cell.verdict === "healed") {
        lines.push("", `Healed by ${cell.healed_by ?? "a later run"}; the gap found ${cell.gap_checked_at}:`,
          cell.gap_detail ?? "");
      }
      if (cell.heal_conf) lines.push("", "Backfill conf that closes it:", JSON.stringify(cell.heal_conf, null, 2));
      detail.textContent = lines.join("\n");
    });
  }

  const chart = document.getElementById("coverage-chart");
  if (chart) coverage(chart, data.partitions);
  const cal = document.getElementById("calendar-chart");
  if (cal) calendar(cal, data.calendar, document.getElementById("cell-detail"));
})();
