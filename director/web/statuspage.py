"""The status page served at ``/``: one self-contained HTML document that refreshes itself
from ``/ui/status`` every two seconds (no page reload, no external assets, no framework).

Per VIP it charts the kernel's own rate estimates (new connections and bytes per second, as
``ipvsadm --rate`` shows them) over the last five minutes the page has been open: the browser
keeps the samples, so the director keeps no history and a page costs it one read.

The page itself holds no data and is open to all; its data (``/ui/status``) needs the token
unless ``api.public`` opens ``status_page``. Asked for one, the page shows a field for it and
keeps what is typed in the tab's session storage (never a cookie: no other page of the
browser sends it), then sends it as ``Authorization: Bearer``."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>director</title>
<style>
  :root { --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --mute: #57606a; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
  header { background: #24292f; color: #fff; padding: .8rem 1rem; display: flex;
           flex-wrap: wrap; gap: .4rem 1.2rem; align-items: baseline; }
  header h1 { font-size: 1.1rem; margin: 0 .6rem 0 0; }
  main { padding: .8rem; display: grid; gap: .8rem;
         grid-template-columns: repeat(auto-fill, minmax(min(100%, 26rem), 1fr)); }
  .vs { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: .6rem .8rem; }
  .vs h2 { font-size: .95rem; margin: 0 0 .2rem; font-family: ui-monospace, monospace; }
  .meta { color: var(--mute); font-size: .85rem; margin-bottom: .4rem; }
  table { width: 100%; border-collapse: collapse; font-size: .85rem; }
  th, td { text-align: left; padding: .15rem .3rem; border-top: 1px solid #eaeef2; }
  td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
  .active { color: var(--ok); } .draining { color: var(--warn); } .unhealthy { color: var(--bad); }
  .pill { border-radius: 1rem; padding: 0 .5rem; background: #57606a; }
  .pill.MASTER, .pill.ok { background: var(--ok); } .pill.BACKUP { background: #0969da; }
  .pill.FAULT, .pill.bad { background: var(--bad); }
  #empty { color: var(--mute); padding: 1rem; }
  #login { padding: .8rem 1rem; background: #fff8c5; border-bottom: 1px solid #d4a72c; }
  .rates { display: grid; grid-template-columns: auto 1fr auto 1fr; gap: .2rem .5rem;
           align-items: center; font-size: .8rem; color: var(--mute); margin: .2rem 0 .4rem; }
  .rates b { color: #1f2328; font-variant-numeric: tabular-nums; white-space: nowrap; }
  svg.spark { width: 100%; height: 1.6rem; background: #f6f8fa; border-radius: 3px; }
  svg.spark polyline { fill: none; stroke: #0969da; stroke-width: 1.2;
                       vector-effect: non-scaling-stroke; }
  .health { font-size: .85rem; margin-bottom: .2rem; }
  td.addr { overflow-wrap: anywhere; }
  /* A phone: the columns a glance can do without go, the rest fits the screen. */
  @media (max-width: 30rem) { .wide { display: none; } main { padding: .5rem; } }
</style>
</head>
<body>
<header>
  <h1>director</h1>
  <span>role <b id="role" class="pill">…</b></span>
  <span>kubernetes <b id="kube" class="pill">…</b></span>
  <span>leader <b id="leader">…</b></span>
  <span>last sync <b id="sync">…</b></span>
  <span id="bgp-box" hidden>bgp <b id="bgp" class="pill">…</b></span>
  <span id="counts"></span>
  <span id="drains"></span>
  <span id="error" style="color:#ffb3b3"></span>
</header>
<form id="login" hidden>
  <label>This director's admin API token: <input id="token" type="password"
    autocomplete="off"></label> <button>Show</button> <span id="refused"></span>
</form>
<main id="services"><div id="empty">loading…</div></main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}
const HISTORY = 150;  // samples: five minutes at one every two seconds
const history = new Map();  // virtual service -> [[connections/s, bytes/s], ...]
function remember(vs) {
  let h = history.get(vs.service);
  if (!h) { h = []; history.set(vs.service, h); }
  const c = vs.counters;
  h.push([c.cps, c.bps_in + c.bps_out]);
  if (h.length > HISTORY) h.shift();
  return h;
}
function human(n, unit) {
  const k = ["", "k", "M", "G", "T"];
  let i = 0;
  while (n >= 1000 && i < k.length - 1) { n /= 1000; i++; }
  return ((i ? n.toFixed(1) : String(Math.round(n))) + " " + k[i] + unit).trim();
}
function spark(values, label) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 " + (HISTORY - 1) + " 24");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const top = Math.max(1, ...values);
  const line = document.createElementNS(NS, "polyline");
  const from = HISTORY - values.length;
  line.setAttribute("points", values.map((v, i) =>
    (from + i) + "," + (23 - 22 * v / top).toFixed(2)).join(" "));
  svg.append(line);
  return svg;
}
function rates(vs) {
  const h = remember(vs);
  const box = text("div", "", "rates");
  const now = h[h.length - 1];
  box.append(text("span", "conn/s"), spark(h.map((x) => x[0]), "connections per second"),
    text("span", "bytes/s"), spark(h.map((x) => x[1]), "bytes per second"));
  box.children[0].append(" ", text("b", human(now[0], "")));
  box.children[2].append(" ", text("b", human(now[1], "B")));
  return box;
}
let draining = 0;  // real servers draining on the page being rendered
function health(vs) {
  const n = {active: 0, draining: 0, unhealthy: 0};
  for (const rs of vs.real_servers) n[rs.state] = (n[rs.state] || 0) + 1;
  const line = text("div", "", "health");
  line.append(text("span", n.active + "/" + vs.real_servers.length + " active",
                   n.active ? "active" : "unhealthy"));
  draining += n.draining;
  if (n.draining) line.append(" · ", text("span", n.draining + " draining", "draining"));
  if (n.unhealthy) line.append(" · ", text("span", n.unhealthy + " failing", "unhealthy"));
  return line;
}
function render(data) {
  const s = data.status;
  $("role").textContent = s.role; $("role").className = "pill " + s.role;
  const k = s.kubernetes;
  $("kube").textContent = !k.configured ? "off" : (k.connected ? "connected" : "DISCONNECTED");
  $("kube").className = "pill " + (!k.configured ? "" : (k.connected ? "ok" : "bad"));
  $("leader").textContent = s.leader ? "yes" : "no";
  $("sync").textContent = s.last_sync ? s.last_sync + " (" + s.last_sync_seconds + " s)" : "never";
  $("counts").textContent = s.counts.virtual_services + " virtual services, " +
    s.counts.real_servers + " real servers";
  $("error").textContent = s.last_error ? "last error: " + s.last_error : "";
  const b = s.bgp;
  $("bgp-box").hidden = !b;
  if (b) {
    const up = b.peers.filter((p) => p.state === "Established").length;
    $("bgp").textContent = b.maintenance ? "MAINTENANCE: " + b.maintenance
      : b.announced + " announced, " + b.withdrawn + " withdrawn · sessions " + up + "/" +
        b.peers.length;
    $("bgp").className = "pill " + (b.maintenance || up < b.peers.length ? "bad" : "ok");
    $("bgp").title = b.routes.map((r) => r.vip + ": " + r.reason).join("\\n");
  }
  const main = $("services");
  main.replaceChildren();
  const seen = new Set(data.services.map((vs) => vs.service));
  for (const key of history.keys()) if (!seen.has(key)) history.delete(key);
  draining = 0;
  if (!data.services.length) main.append(text("div", "no virtual services", ""));
  for (const vs of data.services) {
    const box = text("section", "", "vs");
    box.dataset.service = vs.service;
    box.append(text("h2", vs.service));
    const o = vs.origin;
    const from = o.kind === "static" ? "static/" + o.name
      : (o.cluster ? o.cluster + "/" : "") + o.namespace + "/" + o.name + ":" + o.port_name;
    box.append(text("div", from + " · " + vs.scheduler + " (" + vs.scheduler_source + ")" +
      (vs.flags.length ? " " + vs.flags.join(",") : "") + " · " + vs.counters.connections +
      " connections" + (vs.programmed ? "" : " · NOT PROGRAMMED") +
      (vs.syn_guard ? " · SYN guard" : "") + limits(vs.limits), "meta"));
    box.append(health(vs), rates(vs));
    const table = document.createElement("table");
    const head = document.createElement("tr");
    for (const [h, c] of [["real server", ""], ["fwd", "wide"], ["weight", "n"], ["state", ""],
                          ["active", "n"], ["inactive", "n wide"], ["total", "n wide"]]) {
      head.append(text("th", h, c));
    }
    table.append(head);
    for (const rs of vs.real_servers) {
      const row = document.createElement("tr");
      const addr = rs.address.includes(":") ? "[" + rs.address + "]" : rs.address;
      row.append(text("td", addr + ":" + rs.port, "addr"), text("td", rs.forwarding, "wide"),
        text("td", rs.weight, "n"), text("td", rs.state, rs.state),
        text("td", rs.active_connections, "n"), text("td", rs.inactive_connections, "n wide"),
        text("td", rs.counters.connections, "n wide"));
      table.append(row);
    }
    box.append(table);
    main.append(box);
  }
  $("drains").textContent = draining ? draining + " real server" + (draining > 1 ? "s" : "") +
    " draining" : "";
  // Whether the page fits its window (no sideways scrolling): the screenshot test reads it.
  const doc = document.documentElement;
  doc.dataset.fits = String(Math.max(doc.scrollWidth, document.body.scrollWidth) <=
                            window.innerWidth);
}
function limits(l) {  // the rates in force, and what each dropped
  if (!l) return "";
  const part = (rate, what, dropped) => rate ? rate + "/s " + what + " (" + dropped +
    " dropped)" : "";
  return " · limits " + [part(l.client_rate, "per client", l.dropped_over_client_rate),
    part(l.service_rate, "in all", l.dropped_over_service_rate)].filter(Boolean).join(", ");
}
function token() { return sessionStorage.getItem("director-token") || ""; }
$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("director-token", $("token").value.trim());
  refresh();
});
async function refresh() {
  try {
    const headers = token() ? {Authorization: "Bearer " + token()} : {};
    const response = await fetch("/ui/status", {cache: "no-store", headers});
    const asked = response.status === 401 || response.status === 403;
    $("login").hidden = !asked;
    if (asked) {
      $("refused").textContent = token() ? "(that token was refused)" : "";
      $("empty").textContent = "the status needs the token";
    } else if (response.ok) render(await response.json());
    else $("error").textContent = "status: HTTP " + response.status;
  } catch (e) { $("error").textContent = "director unreachable"; }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"""
