"""The Job Inbox admin page: one HTML document with its CSS and JS inline, no build step, no
external asset, served under a Content-Security-Policy that allows only this response's
nonce to run or style anything and only this origin to be called.

The page holds no data: it asks for a management token once (kept in ``sessionStorage``,
gone with the tab), calls the API with ``Authorization: Bearer`` like any client, and
renders every value with ``textContent`` (never as HTML).
"""

from __future__ import annotations

import html
import secrets

from ..http import Response

_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def content_security_policy(nonce: str) -> str:
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            f"style-src 'nonce-{nonce}'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def page_response(
    *, base: str, target: str, refresh_seconds: float = 15, head: bool = False
) -> Response:
    """The admin page for an app mounted at ``base`` (``""`` at the root)."""
    nonce = secrets.token_urlsafe(18)
    body = (
        _PAGE.replace("{{nonce}}", nonce)
        .replace("{{base}}", html.escape(base, quote=True))
        .replace("{{target}}", html.escape(target, quote=True))
        .replace("{{refresh}}", html.escape(f"{refresh_seconds:g}", quote=True))
    ).encode("utf-8")
    headers = dict(_PAGE_HEADERS)
    headers["Content-Security-Policy"] = content_security_policy(nonce)
    response = Response(200, body, headers=headers, content_type="text/html; charset=utf-8")
    if head:
        response.body = b""
    return response


_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Job Inbox · {{target}}</title>
<link rel="icon" href="data:,">
<style nonce="{{nonce}}">
:root { color-scheme: light dark; --line: #8884; --muted: #777; --bad: #c0392b; --ok: #1e8449; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; padding: 1rem 1.5rem; }
header { display: flex; gap: 1rem; align-items: baseline; flex-wrap: wrap; }
h1 { font-size: 1.3rem; margin: 0 0 .5rem; }
.muted { color: var(--muted); }
.bar { display: flex; gap: .75rem; align-items: center; flex-wrap: wrap; margin: .5rem 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); white-space: nowrap; }
td.code { font-family: ui-monospace, monospace; }
.state { font-weight: 600; }
.state-dead { color: var(--bad); } .state-succeeded { color: var(--ok); }
.notice { padding: .75rem 1rem; border: 1px solid var(--line); border-radius: 6px; margin: .75rem 0; }
.notice.error { border-color: var(--bad); }
[hidden] { display: none !important; }
dialog { max-width: 52rem; width: 95vw; border: 1px solid var(--line); border-radius: 8px; }
dialog::backdrop { background: #0006; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dt { color: var(--muted); } dd { margin: 0; }
.danger { color: #fff; background: var(--bad); border: 0; padding: .35rem .8rem; border-radius: 4px; }
button { cursor: pointer; }
</style>
</head>
<body data-base="{{base}}" data-target="{{target}}" data-refresh="{{refresh}}">
<header>
  <h1>Job Inbox <span class="muted">· {{target}}</span></h1>
  <span id="whoami" class="muted"></span>
  <button id="show-audit" type="button" hidden aria-expanded="false">Audit log</button>
  <button id="sign-out" type="button" hidden>Sign out</button>
</header>

<section id="audit" hidden aria-label="Audit log">
  <h2>Audit log <span class="muted">(newest first)</span></h2>
  <p id="audit-empty" class="muted" hidden>No cancel or replay yet.</p>
  <table id="audit-table"><thead><tr><th>At (UTC)</th><th>Actor</th><th>Action</th><th>Job</th>
    <th>Outcome</th><th>Code</th><th>New job</th></tr></thead><tbody id="audit-rows"></tbody></table>
  <button id="audit-more" type="button" hidden>Older entries</button>
</section>

<section id="sign-in" hidden>
  <form id="token-form" class="notice">
    <label for="token-input">Management token</label>
    <input id="token-input" type="password" autocomplete="off" required size="40">
    <button type="submit">Open the inbox</button>
    <p class="muted">Kept in this tab only (sessionStorage) and sent as Authorization: Bearer.</p>
  </form>
</section>

<main id="inbox" hidden>
  <div class="bar">
    <label>Queue <select id="queue-filter"><option value="">all</option></select></label>
    <label>State <select id="state-filter">
      <option value="">all</option><option>queued</option><option>leased</option>
      <option>retry_wait</option><option>succeeded</option><option>dead</option>
      <option>cancelled</option></select></label>
    <label>Tenant <input id="tenant-filter" type="search" size="14" maxlength="200"
      autocomplete="off" placeholder="any"></label>
    <span id="status" class="muted" role="status" aria-live="polite"></span>
  </div>
  <div id="loading" class="notice" hidden>Loading…</div>
  <div id="error" class="notice error" role="alert" hidden></div>
  <div id="unauthorized" class="notice error" role="alert" hidden></div>
  <div id="empty" class="notice" hidden>No jobs match these filters.</div>
  <table id="jobs-table" hidden>
    <thead><tr><th>Job</th><th>Queue</th><th>State</th><th>Attempts</th><th>Last code</th>
      <th>Tenant</th><th>Enqueued (UTC)</th><th>Finished (UTC)</th></tr></thead>
    <tbody id="jobs"></tbody>
  </table>
  <div class="bar">
    <button id="prev" type="button" disabled>← Newer</button>
    <span id="page-number" class="muted">page 1</span>
    <button id="next" type="button" disabled>Older →</button>
  </div>
</main>

<dialog id="job-dialog" aria-labelledby="dialog-title">
  <h2 id="dialog-title">Job</h2>
  <dl id="job-fields"></dl>
  <h3>Attempts</h3>
  <p id="no-attempts" class="muted" hidden>No attempt has ended yet.</p>
  <table id="attempts-table"><thead><tr><th>#</th><th>Started</th><th>Ended</th>
    <th>Outcome</th><th>Code</th><th>Late outcome</th></tr></thead><tbody id="attempts"></tbody></table>
  <div id="write-controls" class="bar" hidden>
    <button id="cancel-job" type="button">Cancel job…</button>
    <button id="replay-job" type="button">Replay job…</button>
  </div>
  <div id="confirm" class="notice" hidden>
    <p id="confirm-text"></p>
    <button id="confirm-action" type="button" class="danger">Confirm</button>
    <button id="confirm-back" type="button">Back</button>
  </div>
  <div id="action-result" class="notice" role="status" hidden></div>
  <div class="bar"><button id="dialog-close" type="button">Close</button></div>
</dialog>

<script nonce="{{nonce}}">
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const base = document.body.dataset.base;
  const refreshMs = Math.max(1, Number(document.body.dataset.refresh) || 15) * 1000;
  const TOKEN = "drainpipe.jobInbox.token";
  const LIVE = new Set(["queued", "leased", "retry_wait"]);
  const view = {
    cursors: [""], page: 0, next: null, role: null, loading: false, refreshes: 0, wantedQueue: null,
  };
  let opener = null, openJob = null, pending = null;

  const token = () => sessionStorage.getItem(TOKEN);
  const show = (id, on) => { $(id).hidden = !on; };
  const utc = (iso) => iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace(/\+00:00$|Z$/, "") : "";
  const cell = (row, text, cls) => {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  };

  class Problem extends Error {
    constructor(status, body) {
      super((body && (body.detail || body.title)) || ("HTTP " + status));
      this.status = status; this.code = body && body.code; this.title = body && body.title;
    }
  }

  async function call(method, path, headers) {
    const response = await fetch(base + path, {
      method, headers: Object.assign({ Authorization: "Bearer " + token() }, headers || {}),
      credentials: "omit", cache: "no-store",
    });
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (!response.ok) throw new Problem(response.status, body);
    return { body, replayed: response.headers.get("Idempotency-Replayed") === "true" };
  }

  function signIn(message) {
    show("inbox", false); show("sign-out", false); show("sign-in", true);
    show("audit", false); show("show-audit", false);
    $("whoami").textContent = message || "";
    $("token-input").value = "";
    $("token-input").focus();
  }

  function notAuthorized(error) {
    if (error.status === 401) {
      sessionStorage.removeItem(TOKEN);
      signIn("That token was not accepted; paste a valid one.");
      return true;
    }
    if (error.status === 403) {
      $("unauthorized").textContent = "Not authorized: " + error.message;
      show("unauthorized", true);
      return true;
    }
    return false;
  }

  function query() {
    const params = new URLSearchParams({ limit: "50" });
    const queue = $("queue-filter").value, state = $("state-filter").value;
    const tenant = $("tenant-filter").value.trim();
    if (queue) params.set("queue", queue);
    if (state) params.set("state", state);
    if (tenant) params.set("tenant", tenant);
    const cursor = view.cursors[view.page];
    if (cursor) params.set("cursor", cursor);
    return "/jobs?" + params.toString();
  }

  function renderQueues(queues) {
    const select = $("queue-filter");
    const known = new Set([...select.options].map((o) => o.value));
    for (const name of queues || []) {
      if (!known.has(name)) { const o = document.createElement("option"); o.textContent = name; select.appendChild(o); }
    }
    if (view.wantedQueue && select.value !== view.wantedQueue) {
      select.value = view.wantedQueue;  // from the link; the options arrive with the first page
      view.wantedQueue = null;
      if (select.value) { view.cursors = [""]; view.page = 0; load("filter"); }
    }
  }

  // the filters live in the URL's fragment, so a link shows the same list to a colleague
  function filtersToHash() {
    const params = new URLSearchParams();
    for (const [name, id] of [["queue", "queue-filter"], ["state", "state-filter"], ["tenant", "tenant-filter"]]) {
      const value = $(id).value.trim();
      if (value) params.set(name, value);
    }
    history.replaceState(null, "", params.toString() ? "#" + params.toString() : location.pathname + location.search);
  }
  function filtersFromHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const state = params.get("state") || "";
    if ([...$("state-filter").options].some((o) => o.value === state)) $("state-filter").value = state;
    $("tenant-filter").value = params.get("tenant") || "";
    view.wantedQueue = params.get("queue");
  }

  function renderJobs(items) {
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.job : null;
    const tbody = $("jobs");
    tbody.replaceChildren();
    for (const job of items) {
      const row = document.createElement("tr");
      const first = document.createElement("td");
      const open = document.createElement("button");
      open.type = "button"; open.className = "open-job";
      open.dataset.job = job.queue + "/" + job.id;
      open.textContent = "#" + job.id;
      open.setAttribute("aria-label", "History of job " + job.id + " in " + job.queue);
      open.addEventListener("click", () => openDialog(job.queue, job.id, open));
      first.appendChild(open); row.appendChild(first);
      cell(row, job.queue);
      cell(row, job.state, "state state-" + job.state);
      cell(row, job.attempts + " / " + job.max_attempts);
      cell(row, job.last_code, "code");
      cell(row, job.tenant);
      cell(row, utc(job.enqueued_at));
      cell(row, utc(job.finished_at));
      tbody.appendChild(row);
      if (focused && focused === open.dataset.job) open.focus();
    }
    show("jobs-table", items.length > 0);
    show("empty", items.length === 0);
  }

  async function load(reason) {
    if (!token()) { signIn(); return; }
    view.loading = true;
    show("loading", reason !== "refresh");
    try {
      const { body } = await call("GET", query());
      show("error", false); show("unauthorized", false);
      view.role = body.meta.role; view.next = body.meta.next_cursor;
      show("show-audit", view.role === "admin");
      if (view.role === "admin" && !$("audit").hidden && reason === "refresh") loadAudit(false);
      $("whoami").textContent = body.meta.actor + " (" + body.meta.role + ")";
      renderQueues(body.meta.queues);
      renderJobs(body.data);
      $("prev").disabled = view.page === 0;
      $("next").disabled = !view.next;
      $("page-number").textContent = "page " + (view.page + 1);
      if (reason === "refresh") view.refreshes += 1;
      document.body.dataset.refreshes = String(view.refreshes);
      $("status").textContent = "Updated " + new Date().toISOString().slice(11, 19) +
        " UTC · refreshes every " + (refreshMs / 1000) + " s";
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = error instanceof Problem
          ? "Could not load jobs: " + error.message + (error.code ? " (" + error.code + ")" : "")
          : "Could not reach the server; retrying in " + (refreshMs / 1000) + " s.";
        show("error", true);
        if (error.code === "CURSOR_INVALID") { view.cursors = [""]; view.page = 0; }
      }
    } finally {
      view.loading = false;
      show("loading", false);
    }
  }

  let auditNext = null;
  async function loadAudit(more) {
    try {
      const params = new URLSearchParams({ limit: "50" });
      if (more && auditNext) params.set("cursor", auditNext);
      const { body } = await call("GET", "/audit?" + params.toString());
      const tbody = $("audit-rows");
      if (!more) tbody.replaceChildren();
      for (const entry of body.data) {
        const row = document.createElement("tr");
        cell(row, utc(entry.at)); cell(row, entry.actor); cell(row, entry.action);
        cell(row, entry.queue + " #" + entry.job_id); cell(row, entry.outcome);
        cell(row, entry.code, "code"); cell(row, entry.new_job_id == null ? "" : "#" + entry.new_job_id);
        tbody.appendChild(row);
      }
      auditNext = body.meta.next_cursor;
      show("audit-more", !!auditNext);
      show("audit-empty", tbody.children.length === 0);
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = "Could not load the audit log: " + error.message;
        show("error", true);
      }
    }
  }
  $("show-audit").addEventListener("click", () => {
    const open = $("audit").hidden;
    show("audit", open);
    $("show-audit").setAttribute("aria-expanded", String(open));
    if (open) loadAudit(false);
  });
  $("audit-more").addEventListener("click", () => loadAudit(true));

  function field(list, name, value) {
    const dt = document.createElement("dt"); dt.textContent = name;
    const dd = document.createElement("dd"); dd.textContent = value == null || value === "" ? "—" : String(value);
    list.append(dt, dd);
  }

  function renderDialog(job) {
    openJob = job;
    $("dialog-title").textContent = "Job #" + job.id + " in " + job.queue;
    const list = $("job-fields"); list.replaceChildren();
    field(list, "state", job.state);
    field(list, "attempts", job.attempts + " of " + job.max_attempts + " (" + job.attempts_left + " left)");
    field(list, "last code", job.last_code);
    field(list, "tenant", job.tenant);
    field(list, "dedupe key", job.dedupe_key);
    field(list, "enqueued", utc(job.enqueued_at));
    field(list, "eligible", utc(job.eligible_at));
    field(list, "started", utc(job.started_at));
    field(list, "finished", utc(job.finished_at));
    field(list, "deadline", utc(job.deadline));
    field(list, "replay of", job.parent_id == null ? null : "#" + job.parent_id);
    field(list, "replayed by", job.replayed_by == null ? null : "#" + job.replayed_by);
    const tbody = $("attempts"); tbody.replaceChildren();
    for (const a of job.history || []) {
      const row = document.createElement("tr");
      cell(row, a.number); cell(row, utc(a.started_at)); cell(row, utc(a.ended_at));
      cell(row, a.outcome); cell(row, a.code, "code"); cell(row, a.late_outcome);
      tbody.appendChild(row);
    }
    show("no-attempts", !(job.history || []).length);
    const admin = view.role === "admin";
    show("write-controls", admin);
    if (admin) {
      $("cancel-job").disabled = !LIVE.has(job.state);
      $("replay-job").disabled = !(job.state === "dead" && job.replayed_by == null);
    }
  }

  async function openDialog(queue, id, button) {
    opener = button;
    show("confirm", false); show("action-result", false); pending = null;
    try {
      const { body } = await call("GET", "/jobs/" + encodeURIComponent(queue) + "/" + id);
      renderDialog(body.data);
      if (!$("job-dialog").open) $("job-dialog").showModal();
      $("dialog-close").focus();
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = "Could not open job " + id + ": " + error.message;
        show("error", true);
      }
    }
  }

  function closeDialog() { if ($("job-dialog").open) $("job-dialog").close(); }

  // The dialog's close event fires for Escape, the Close button and close() alike.
  $("job-dialog").addEventListener("close", () => {
    pending = null; openJob = null;
    if (opener && opener.isConnected) opener.focus();
    else if (opener && opener.dataset.job) {
      const again = document.querySelector('button.open-job[data-job="' + CSS.escape(opener.dataset.job) + '"]');
      if (again) again.focus();
    }
  });
  $("dialog-close").addEventListener("click", closeDialog);

  function confirmStep(action) {
    // one Idempotency-Key per confirmed replay, made when the step opens and kept for retries
    pending = { action, key: action === "replay" ? crypto.randomUUID() : null };
    $("confirm-text").textContent = action === "cancel"
      ? "Cancel job #" + openJob.id + "? It will never run again; a cancel cannot undo what a worker already sent."
      : "Replay job #" + openJob.id + "? A new job with the same payload is enqueued, linked to this one.";
    $("confirm-action").textContent = action === "cancel" ? "Yes, cancel it" : "Yes, replay it";
    show("action-result", false); show("confirm", true);
    $("confirm-action").focus();
  }
  $("cancel-job").addEventListener("click", () => confirmStep("cancel"));
  $("replay-job").addEventListener("click", () => confirmStep("replay"));
  $("confirm-back").addEventListener("click", () => { pending = null; show("confirm", false); });

  $("confirm-action").addEventListener("click", async () => {
    if (!pending || !openJob) return;
    const job = openJob, step = pending;
    const path = "/jobs/" + encodeURIComponent(job.queue) + "/" + job.id + "/" + step.action;
    $("confirm-action").disabled = true;
    $("action-result").dataset.code = "";
    try {
      const headers = step.key ? { "Idempotency-Key": step.key } : {};
      const { body, replayed } = await call("POST", path, headers);
      pending = null; show("confirm", false);
      $("action-result").textContent = step.action === "cancel"
        ? "Job #" + job.id + " is cancelled."
        : "Replayed as job #" + body.data.id + (replayed ? " (already done earlier)." : ".");
      show("action-result", true);
      const { body: fresh } = await call("GET", "/jobs/" + encodeURIComponent(job.queue) + "/" + job.id);
      renderDialog(fresh.data);
      load("refresh");
    } catch (error) {
      const retryable = !(error instanceof Problem) || error.status >= 500 || error.code === "IDEMPOTENCY_KEY_IN_USE";
      // a refusal leads with its code (EVENT_EXPIRED, REPLAY_BLOCKED, the app's own check's)
      $("action-result").textContent = retryable
        ? "Not confirmed yet: " + error.message + (error.code ? " (" + error.code + ")" : "") +
          ". Confirm again to retry with the same key."
        : "Refused" + (error.code ? " (" + error.code + ")" : "") + ": " + error.message;
      $("action-result").dataset.code = retryable ? "" : (error.code || "");
      show("action-result", true);
      if (!retryable) { pending = null; show("confirm", false); }
    } finally {
      $("confirm-action").disabled = false;
    }
  });

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token-input").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN, value);
    start();
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN); closeDialog(); show("audit", false); show("show-audit", false); signIn();
  });
  for (const id of ["queue-filter", "state-filter", "tenant-filter"]) {
    $(id).addEventListener("change", () => {
      view.cursors = [""]; view.page = 0; filtersToHash(); load("filter");
    });
  }
  $("next").addEventListener("click", () => {
    if (!view.next) return;
    view.cursors = view.cursors.slice(0, view.page + 1).concat([view.next]);
    view.page += 1; load("page");
  });
  $("prev").addEventListener("click", () => {
    if (view.page === 0) return;
    view.page -= 1; load("page");
  });

  let timer = null;
  function start() {
    show("sign-in", false); show("inbox", true); show("sign-out", true);
    load("start");
    if (timer === null) {
      // the current page (its cursor) is fetched again: position and an open dialog stay
      timer = setInterval(() => { if (token() && !view.loading) load("refresh"); }, refreshMs);
    }
  }
  filtersFromHash();
  if (token()) start(); else signIn();
})();
</script>
</body>
</html>
"""
