"""The status page served at ``/``: one self-contained HTML document that refreshes itself
from ``/ui/status`` every two seconds (no page reload, no external assets)."""

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
  <span id="error" style="color:#ffb3b3"></span>
</header>
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
  if (!data.services.length) main.append(text("div", "no virtual services", ""));
  for (const vs of data.services) {
    const box = text("section", "", "vs");
    box.dataset.service = vs.service;
    box.append(text("h2", vs.service));
    const o = vs.origin;
    const from = o.kind === "static" ? "static/" + o.name
      : o.namespace + "/" + o.name + ":" + o.port_name;
    box.append(text("div", from + " · " + vs.scheduler + " (" + vs.scheduler_source + ")" +
      (vs.flags.length ? " " + vs.flags.join(",") : "") + " · " + vs.counters.connections +
      " connections" + (vs.programmed ? "" : " · NOT PROGRAMMED"), "meta"));
    const table = document.createElement("table");
    const head = document.createElement("tr");
    for (const [h, c] of [["real server", ""], ["fwd", ""], ["weight", "n"], ["state", ""],
                          ["active", "n"], ["inactive", "n"], ["total", "n"]]) {
      head.append(text("th", h, c));
    }
    table.append(head);
    for (const rs of vs.real_servers) {
      const row = document.createElement("tr");
      const addr = rs.address.includes(":") ? "[" + rs.address + "]" : rs.address;
      row.append(text("td", addr + ":" + rs.port), text("td", rs.forwarding),
        text("td", rs.weight, "n"), text("td", rs.state, rs.state),
        text("td", rs.active_connections, "n"), text("td", rs.inactive_connections, "n"),
        text("td", rs.counters.connections, "n"));
      table.append(row);
    }
    box.append(table);
    main.append(box);
  }
}
async function refresh() {
  try {
    const response = await fetch("/ui/status", {cache: "no-store"});
    if (response.ok) render(await response.json());
    else $("error").textContent = "status: HTTP " + response.status;
  } catch (e) { $("error").textContent = "director unreachable"; }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"""
