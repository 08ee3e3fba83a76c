// The "Running" section of a pipeline's page: polls the progress API and redraws one bar per run
// (records read of planned offsets, rate, ETA). Values reach the DOM only as text.
(function () {
  "use strict";
  const section = document.getElementById("progress");
  if (!section) return;
  const list = document.getElementById("progress-list");
  const POLL_MS = 3000;
  const num = (v) => Number(v).toLocaleString("en-US");
  const runId = (id) => id.split("/").slice(1).join("/") || id;
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  function render(runs) {
    list.replaceChildren();
    if (runs.length === 0) {
      list.append(el("p", "muted", "No stage running."));
      return;
    }
    for (const r of runs) {
      const share = r.done ? 100 : r.planned ? Math.min(100, (100 * r.records_read) / r.planned) : 0;
      const box = el("div", "progress");
      box.dataset.run = r.run_id;
      const head = el("div", "progress-head");
      head.append(el("span", "id", runId(r.run_id)));
      const counts = `${r.exact ? "" : "~"}${num(r.records_read)} of ${num(r.planned)} (${share.toFixed(0)}%)`;
      const rate = `${num(Math.round(r.records_per_s))} records/s`;
      let state = r.done ? "done" : r.eta_seconds === null ? "ETA ?" : `ETA ${Math.round(r.eta_seconds)} s`;
      if (!r.done && r.quiet_s > 120) state = `no update for ${Math.round(r.quiet_s)} s`;
      head.append(el("span", "num", `${counts} · ${rate} · ${state}`));
      const bar = el("div", "bar");
      const fill = el("div", r.done ? "fill done" : "fill");
      fill.style.width = `${share}%`;
      bar.append(fill);
      box.append(head, bar);
      list.append(box);
    }
  }

  async function poll() {
    try {
      const resp = await fetch(section.dataset.api, { credentials: "same-origin" });
      if (resp.ok) render(await resp.json());
    } catch (e) {
      // A missed poll is retried at the next tick.
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
