// cronlog console: every <time datetime> reads as a relative time ("3 min ago", "in 12 s");
// hovering shows it in the viewer's zone and in UTC. Re-run after each htmx swap and every 10 s.
(function () {
  "use strict";
  const units = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];
  function relative(ms) {
    const s = Math.round(Math.abs(ms) / 1000);
    if (s < 1) return "now";
    const [name, size] = units.find(([, size]) => s >= size);
    const n = Math.floor(s / size);
    return ms < 0 ? `${n} ${name} ago` : `in ${n} ${name}`;
  }
  function local(d) {
    return d.toLocaleString(undefined, {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      second: "2-digit", timeZoneName: "short",
    });
  }
  function utc(d) {
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }
  function render(root) {
    const now = Date.now();
    for (const el of (root || document).querySelectorAll("time[datetime]")) {
      const d = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(d.getTime())) continue;
      el.textContent = relative(d.getTime() - now);
      const also = el.dataset.also ? ` · job's zone: ${el.dataset.also}` : "";
      el.title = `${local(d)} · ${utc(d)}${also}`;
    }
  }
  document.addEventListener("DOMContentLoaded", () => render());
  document.addEventListener("htmx:afterSettle", (e) => render(e.target));
  setInterval(() => render(), 10000);
})();
