// The mlsched dashboard: polls the controller's read-only JSON API and draws the overview, the
// job list, a job's page (at /job/<id>) and the live event feed. Text from the API is only ever
// set as textContent (job names are users' input).
"use strict";

const POLL_MS = 1000;
const HISTORY = 120; // samples kept for the "GPUs busy over time" chart
const busyHistory = [];
let lastSeq = -1;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  const sign = s < 0 ? "-" : "";
  s = Math.abs(s);
  if (s < 60) return sign + Math.round(s) + "s";
  if (s < 3600) return sign + Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
  if (s < 86400) return sign + Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return sign + Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

function clock(t) {
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19);
}

async function getJson(path) {
  const reply = await fetch(path, { cache: "no-store" });
  if (!reply.ok) throw new Error(path + ": HTTP " + reply.status);
  return reply.json();
}

function drawNodes(overview) {
  const box = document.getElementById("nodes");
  box.replaceChildren();
  for (const node of overview.nodes) {
    const card = el("div", null, "node" + (node.up ? "" : " down"));
    card.dataset.nodeId = node.id;
    const busy = node.gpus.filter((g) => g.job_id).length;
    card.append(el("b", node.id), el("span", ` ${busy}/${node.gpus.length} GPUs busy` + (node.up ? "" : " (down)")));
    card.append(el("br"));
    for (const gpu of node.gpus) {
      const cell = el("div", null, "gpu " + (gpu.job_id ? "busy" : "free"));
      cell.title = gpu.name;
      cell.append(el("div", `GPU ${gpu.index}` + (gpu.utilization === null ? "" : ` ${Math.round(gpu.utilization * 100)}%`)));
      cell.append(el("div", gpu.job_id ? gpu.job_id.slice(0, 12) : "free"));
      card.append(cell);
    }
    box.append(card);
  }
}

function drawLine(svg, points, yMax, color) {
  svg.replaceChildren();
  if (points.length < 2 || !(yMax > 0)) return;
  const [w, h] = [600, Number(svg.viewBox.baseVal.height)];
  const x0 = points[0][0], x1 = points[points.length - 1][0] || x0 + 1;
  const coords = points.map(([x, y]) =>
    `${((x - x0) / (x1 - x0 || 1)) * w},${h - (y / yMax) * (h - 4) - 2}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", coords.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", color);
  line.setAttribute("stroke-width", "2");
  svg.append(line);
}

function drawJobs(list) {
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  for (const job of list.jobs) {
    const row = el("tr");
    row.dataset.jobId = job.id;
    const link = el("a", job.id);
    link.href = "/job/" + encodeURIComponent(job.id);
    const cells = [link, job.name, job.user, el("span", job.state, "state-" + job.state), job.job_class,
      job.gpus, job.iteration, duration(job.deadline_slack_s), duration(job.estimate_remaining_s),
      job.estimate_reward === null ? "–" : job.estimate_reward.toFixed(1), duration(list.time - job.submit_time)];
    for (const value of cells) {
      const cell = el("td");
      if (value instanceof Node) cell.append(value); else cell.textContent = String(value);
      row.append(cell);
    }
    body.append(row);
  }
}

async function refreshOverview() {
  const [overview, list] = await Promise.all([getJson("/api/overview"), getJson("/api/jobs")]);
  const running = overview.jobs_by_state.RUNNING || 0;
  document.getElementById("summary").textContent =
    `policy ${overview.policy} · ${overview.nodes.length} nodes · ${overview.gpus_busy}/${overview.gpus_total} GPUs busy · ${running} running · ${clock(overview.time)}`;
  busyHistory.push([overview.time, overview.gpus_busy]);
  if (busyHistory.length > HISTORY) busyHistory.shift();
  drawNodes(overview);
  drawLine(document.getElementById("util-chart"), busyHistory, Math.max(1, overview.gpus_total), "#d9822b");
  drawJobs(list);
}

async function refreshJob(jobId) {
  const page = await getJson("/api/jobs/" + encodeURIComponent(jobId));
  const job = page.job;
  document.getElementById("summary").textContent = `job ${job.id} · ${clock(page.time)}`;
  document.getElementById("job-title").textContent = `${job.name} (${job.id})`;
  const facts = document.querySelector("#job-facts tbody");
  facts.replaceChildren();
  const est = page.estimate;
  const rows = [["State", job.state], ["Class", job.job_class], ["User", job.user], ["GPUs", job.gpus],
    ["Iteration", job.iteration], ["Suspensions", job.suspensions], ["Age", duration(page.time - job.submit_time)],
    ["Deadline slack", duration(job.deadline_slack_s)],
    ["Estimate", est ? `${est.phase}: ${duration(est.remaining_s)} left, ${est.iterations} iterations` : "–"],
    ["Reward", est ? est.reward.toFixed(2) : "–"], ["Message", job.message || "–"]];
  for (const [name, value] of rows) {
    const row = el("tr");
    row.append(el("th", name), el("td", value));
    facts.append(row);
  }
  const tasks = document.querySelector("#job-tasks tbody");
  tasks.replaceChildren();
  for (const t of page.tasks) {
    const row = el("tr");
    for (const value of [t.rank, t.attempt, t.node_id, t.gpus.join(","), t.state]) row.append(el("td", value));
    tasks.append(row);
  }
  const curve = page.metric_history;
  drawLine(document.getElementById("metric-chart"), curve, Math.max(...curve.map((p) => p[1]), 1e-9), "#1f3a5f");
  const timeline = document.getElementById("timeline");
  timeline.replaceChildren(...page.timeline.map((e) =>
    el("li", `${clock(e.time)} ${e.kind}${e.node_id ? " @" + e.node_id : ""}: ${e.message}`)));
}

async function refreshEvents() {
  const page = await getJson("/api/events?after=" + lastSeq);
  const feed = document.getElementById("events");
  for (const e of page.events) {
    const item = el("li", `${clock(e.time)} ${e.kind} ${e.job_id || e.node_id}: ${e.message}`);
    item.dataset.kind = e.kind;
    feed.prepend(item);
    lastSeq = e.seq;
  }
  while (feed.children.length > 300) feed.lastChild.remove();
}

async function tick() {
  const jobId = location.pathname.startsWith("/job/") ? decodeURIComponent(location.pathname.slice(5)) : "";
  document.getElementById("overview-page").hidden = Boolean(jobId);
  document.getElementById("job-page").hidden = !jobId;
  try {
    await (jobId ? refreshJob(jobId) : refreshOverview());
    await refreshEvents();
    document.body.dataset.loaded = "yes";
  } catch (err) {
    document.getElementById("summary").textContent = "cannot reach the controller: " + err.message;
  }
  setTimeout(tick, POLL_MS);
}

tick();
