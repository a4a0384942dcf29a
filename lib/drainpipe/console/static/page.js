"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const base = document.body.dataset.base;
  const refreshMs = Math.max(1, Number(document.body.dataset.refresh) || 15) * 1000;
  const TOKEN = "drainpipe.jobInbox.token";
  const LIVE = new Set(["queued", "leased", "retry_wait", "waiting"]);
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
      this.meta = body && body.meta;
    }
  }

  const FILTERS = [
    ["queue", "queue-filter"], ["state", "state-filter"], ["tenant", "tenant-filter"],
    ["id", "id-filter"], ["dedupe_key", "dedupe-filter"], ["code", "code-filter"],
    ["since", "since-filter"], ["until", "until-filter"],
  ];
  const BULK_KEYS = new Set(["queue", "state", "tenant", "code", "since", "until"]);
  const filterValues = () => {
    const values = {};
    for (const [name, id] of FILTERS) { const v = $(id).value.trim(); if (v) values[name] = v; }
    return values;
  };

  async function call(method, path, headers, json) {
    const options = {
      method, headers: Object.assign({ Authorization: "Bearer " + token() }, headers || {}),
      credentials: "omit", cache: "no-store",
    };
    if (json !== undefined) {
      options.body = JSON.stringify(json);
      options.headers["Content-Type"] = "application/json";
    }
    const response = await fetch(base + path, options);
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
    for (const [name, value] of Object.entries(filterValues())) params.set(name, value);
    const cursor = view.cursors[view.page];
    if (cursor) params.set("cursor", cursor);
    return "/jobs?" + params.toString();
  }

  function renderQueueOptions(queues) {
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
    const params = new URLSearchParams(filterValues());
    history.replaceState(null, "", params.toString() ? "#" + params.toString() : location.pathname + location.search);
  }
  function filtersFromHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const state = params.get("state") || "";
    if ([...$("state-filter").options].some((o) => o.value === state)) $("state-filter").value = state;
    for (const [name, id] of FILTERS) {
      if (name !== "queue" && name !== "state") $(id).value = params.get(name) || "";
    }
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
      const code = cell(row, job.last_code, "code");
      if (job.cause) {
        // the cause of death next to MAX_ATTEMPTS / DEADLINE_PASSED: the last attempt's code
        const cause = document.createElement("span");
        cause.className = "cause"; cause.textContent = " ← " + job.cause;
        cause.title = "the last attempt's code";
        code.appendChild(cause);
      }
      cell(row, job.tenant);
      cell(row, utc(job.enqueued_at));
      cell(row, utc(job.finished_at));
      tbody.appendChild(row);
      if (focused && focused === open.dataset.job) open.focus();
    }
    show("jobs-table", items.length > 0);
    show("empty", items.length === 0);
    view.listed = items.length;
    renderBulkControls();
  }

  // -- the overview: counts, lag, a sparkline of the last hour, pause/resume -------------
  const SVG = "http://www.w3.org/2000/svg";
  function sparkline(series) {
    const width = 180, height = 28, n = series.length || 1;
    const top = Math.max(1, ...series.map((p) => Math.max(p.enqueued, p.succeeded, p.failed)));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark"); svg.setAttribute("width", width); svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("role", "img");
    const sum = (key) => series.reduce((total, p) => total + p[key], 0);
    const label = sum("enqueued") + " enqueued, " + sum("succeeded") + " succeeded, " + sum("failed") + " failed in the last hour";
    svg.setAttribute("aria-label", label);
    const title = document.createElementNS(SVG, "title"); title.textContent = label; svg.appendChild(title);
    const x = (i) => (i * (width - 2)) / Math.max(n - 1, 1) + 1;
    const y = (v) => height - 2 - (v * (height - 4)) / top;
    series.forEach((p, i) => {
      if (!p.failed) return;
      const bar = document.createElementNS(SVG, "rect");
      const h = Math.max(2, (p.failed * (height - 4)) / top);
      bar.setAttribute("x", String(x(i) - 1)); bar.setAttribute("y", String(height - h));
      bar.setAttribute("width", "2"); bar.setAttribute("height", String(h)); bar.setAttribute("class", "fail");
      svg.appendChild(bar);
    });
    for (const [key, cls] of [["enqueued", "enq"], ["succeeded", "ok"]]) {
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", series.map((p, i) => x(i).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" "));
      line.setAttribute("class", cls);
      svg.appendChild(line);
    }
    return svg;
  }
  const lag = (seconds) => seconds == null ? "—"
    : seconds < 60 ? Math.round(seconds) + " s" : seconds < 3600 ? Math.round(seconds / 60) + " min"
    : (seconds / 3600).toFixed(1) + " h";

  function renderQueues(list) {
    const tbody = $("queues");
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.queueAction : null;
    tbody.replaceChildren();
    for (const q of list) {
      const row = document.createElement("tr");
      row.dataset.queue = q.queue;
      const name = document.createElement("td");
      const pick = document.createElement("button");
      pick.type = "button"; pick.className = "pick-queue"; pick.textContent = q.queue;
      pick.setAttribute("aria-label", "Show the jobs of " + q.queue);
      pick.addEventListener("click", () => {
        $("queue-filter").value = q.queue; view.cursors = [""]; view.page = 0; filtersToHash(); load("filter");
      });
      name.appendChild(pick); row.appendChild(name);
      for (const state of ["queued", "leased", "retry_wait", "succeeded", "dead", "cancelled"]) {
        cell(row, (q.counts[state] || 0).toLocaleString("en"), "num");
      }
      cell(row, lag(q.oldest_ready_age_s), "num");
      const spark = document.createElement("td"); spark.appendChild(sparkline(q.series)); row.appendChild(spark);
      const state = document.createElement("td");
      // held: {reason: n}, "paused" or what flow limits hold (docs/flow-control.md)
      const counts = Object.entries(q.held || {});
      const total = counts.reduce((sum, [, n]) => sum + n, 0);
      const why = q.paused ? "" : ": " + counts.map(([w, n]) => n + " " + w).join(", ");
      const held = total ? " (" + total + " held" + why + ")" : "";
      const label = document.createElement("span");
      label.textContent = (q.paused ? "paused" : "running") + held;
      label.className = q.paused ? "paused" : "muted";
      state.appendChild(label);
      if (view.role === "admin") {
        const toggle = document.createElement("button");
        toggle.type = "button"; toggle.textContent = q.paused ? "Resume" : "Pause";
        toggle.dataset.queueAction = (q.paused ? "resume/" : "pause/") + q.queue;
        toggle.setAttribute("aria-label", toggle.textContent + " " + q.queue);
        toggle.addEventListener("click", () => pauseQueue(q.queue, !q.paused));
        state.append(" ", toggle);
        if (focused && focused.endsWith("/" + q.queue)) setTimeout(() => toggle.focus(), 0);
      }
      row.appendChild(state);
      tbody.appendChild(row);
    }
  }

  async function loadQueues() {
    try {
      const { body } = await call("GET", "/queues");
      renderQueues(body.data);
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = "Could not load the queues: " + error.message + (error.code ? " (" + error.code + ")" : "");
        show("error", true);
      }
    }
  }

  // -- the agent inboxes (only when the app was given them): counts, streams, age --------
  const withInboxes = document.body.dataset.inboxes === "1";
  const EVENT_STATES = ["pending", "leased", "acked", "delivered", "failed", "expired"];

  function renderInboxes(list) {
    const tbody = $("inboxes");
    tbody.replaceChildren();
    for (const inbox of list) {
      const row = document.createElement("tr");
      row.dataset.inbox = inbox.inbox;
      cell(row, inbox.name).title = inbox.inbox;
      for (const state of EVENT_STATES) cell(row, (inbox.counts[state] || 0).toLocaleString("en"), "num");
      cell(row, inbox.open_streams.toLocaleString("en"), "num");
      cell(row, lag(inbox.oldest_open_age_s), "num");
      tbody.appendChild(row);
    }
  }

  async function loadInboxes() {
    if (!withInboxes) return;
    try {
      const { body } = await call("GET", "/inboxes");
      renderInboxes(body.data);
      show("agent-inboxes", true);
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = "Could not load the agent inboxes: " + error.message + (error.code ? " (" + error.code + ")" : "");
        show("error", true);
      }
    }
  }

  async function pauseQueue(queue, pause) {
    try {
      await call("POST", "/queues/" + encodeURIComponent(queue) + "/" + (pause ? "pause" : "resume"), {}, undefined);
      await loadQueues();
      load("refresh");
    } catch (error) {
      if (!(error instanceof Problem) || !notAuthorized(error)) {
        $("error").textContent = "Could not " + (pause ? "pause " : "resume ") + queue + ": " + error.message;
        show("error", true);
      }
    }
  }

  // -- bulk actions on the current filter, behind a typed count --------------------------
  let bulk = null;
  function renderBulkControls() {
    const admin = view.role === "admin";
    show("bulk-controls", admin);
    if (!admin) return;
    const values = filterValues();
    const unsupported = Object.keys(values).filter((name) => !BULK_KEYS.has(name));
    const none = !view.listed;
    $("bulk-cancel").disabled = $("bulk-replay").disabled = none || unsupported.length > 0;
    $("bulk-hint").textContent = unsupported.length
      ? "Bulk actions take queue, state, tenant, code, since and until; clear " + unsupported.join(", ") + "."
      : none ? "" : "Acts on every job matching the filters above.";
  }

  function bulkFilter() {
    const values = filterValues(), filter = {};
    for (const [name, value] of Object.entries(values)) if (BULK_KEYS.has(name)) filter[name] = value;
    return filter;
  }

  function describe(filter) {
    const parts = Object.entries(filter).map(([k, v]) => k + "=" + v);
    return parts.length ? parts.join(", ") : "no filter (every job)";
  }

  async function bulkStart(action) {
    // the count: asked with expected 0, which the server answers with the number it
    // matches now (409 BULK_COUNT_CHANGED) without acting; the list shows jobs, so it is not 0
    const filter = bulkFilter();
    show("bulk-result", false);
    try {
      const { body } = await call("POST", "/jobs/bulk/" + action, { "Idempotency-Key": crypto.randomUUID() },
        { filter, expected: 0 });
      $("bulk-result").textContent = "No job matches any more (" + body.data.matched + ").";
      show("bulk-result", true);
      return;
    } catch (error) {
      if (error instanceof Problem && error.code === "BULK_COUNT_CHANGED") {
        bulkConfirm(action, filter, error.meta.count);
        return;
      }
      if (error instanceof Problem && notAuthorized(error)) return;
      $("bulk-result").textContent = "Refused: " + error.message + (error.code ? " (" + error.code + ")" : "");
      show("bulk-result", true);
    }
  }

  function bulkConfirm(action, filter, count, changed) {
    bulk = { action, filter, count, key: crypto.randomUUID() };
    $("bulk-text").textContent = (changed ? "The count changed. " : "") +
      (action === "cancel" ? "Cancel " : "Replay ") + count.toLocaleString("en") + " job" + (count === 1 ? "" : "s") +
      " matching " + describe(filter) + "? " +
      (action === "cancel" ? "They will never run again." : "Each dead one is enqueued again, linked to it; the others are refused.");
    $("bulk-count").value = "";
    $("bulk-go").disabled = true;
    $("bulk-go").textContent = action === "cancel" ? "Cancel them" : "Replay them";
    show("bulk-confirm", true);
    $("bulk-count").focus();
  }
  $("bulk-count").addEventListener("input", () => {
    $("bulk-go").disabled = !bulk || $("bulk-count").value.trim().replace(/[,_ ]/g, "") !== String(bulk.count);
  });
  $("bulk-back").addEventListener("click", () => { bulk = null; show("bulk-confirm", false); });
  $("bulk-cancel").addEventListener("click", () => bulkStart("cancel"));
  $("bulk-replay").addEventListener("click", () => bulkStart("replay"));
  $("bulk-confirm").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!bulk || $("bulk-go").disabled) return;
    const step = bulk;
    $("bulk-go").disabled = true;
    try {
      const { body, replayed } = await call("POST", "/jobs/bulk/" + step.action, { "Idempotency-Key": step.key },
        { filter: step.filter, expected: step.count });
      bulk = null; show("bulk-confirm", false);
      const r = body.data;
      $("bulk-result").textContent = (step.action === "cancel" ? "Cancelled " : "Replayed ") + r.done + " of " +
        r.matched + (r.refused ? "; " + r.refused + " refused (by their state or the replay rules)" : "") +
        (replayed ? " (already done earlier)." : ".");
      show("bulk-result", true);
      loadQueues(); load("refresh");
    } catch (error) {
      if (error instanceof Problem && error.code === "BULK_COUNT_CHANGED") {
        bulkConfirm(step.action, step.filter, error.meta.count, true);
        return;
      }
      if (error instanceof Problem && notAuthorized(error)) return;
      const retryable = !(error instanceof Problem) || error.status >= 500 || error.code === "IDEMPOTENCY_KEY_IN_USE";
      $("bulk-result").textContent = (retryable ? "Not confirmed yet: " : "Refused: ") + error.message +
        (error.code ? " (" + error.code + ")" : "") + (retryable ? ". Confirm again to retry with the same key." : "");
      show("bulk-result", true);
      if (retryable) $("bulk-go").disabled = false; else { bulk = null; show("bulk-confirm", false); }
    }
  });

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
      renderQueueOptions(body.meta.queues);
      renderJobs(body.data);
      if (reason !== "page") { loadQueues(); loadInboxes(); }
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
        const counts = entry.detail && entry.detail.matched != null
          ? " (" + entry.detail.done + "/" + entry.detail.matched + " done)" : "";
        cell(row, (entry.queue || "all queues") + (entry.job_id == null ? counts : " #" + entry.job_id));
        cell(row, entry.outcome);
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
    field(list, "waiting for", job.waiting_for);
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
    const steps = $("steps"); steps.replaceChildren();
    for (const st of job.steps || []) {
      const row = document.createElement("tr");
      cell(row, st.number); cell(row, st.name); cell(row, st.state);
      cell(row, utc(st.started_at)); cell(row, utc(st.ended_at)); cell(row, st.code, "code");
      steps.appendChild(row);
    }
    show("no-steps", !(job.steps || []).length);
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
  for (const [, id] of FILTERS) {
    $(id).addEventListener("change", () => {
      view.cursors = [""]; view.page = 0; bulk = null; show("bulk-confirm", false); show("bulk-result", false);
      filtersToHash(); load("filter");
    });
  }

  // keyboard: / search, j/k next/previous job, n/p older/newer page, q the queues
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || $("inbox").hidden || $("job-dialog").open) return;
    const typing = event.target instanceof HTMLElement && event.target.closest("input, select, textarea");
    if (typing) return;
    const jobs = [...document.querySelectorAll("#jobs button.open-job")];
    const at = jobs.indexOf(document.activeElement);
    if (event.key === "/") { event.preventDefault(); $("id-filter").focus(); }
    else if (event.key === "j" && jobs.length) { event.preventDefault(); jobs[Math.min(at + 1, jobs.length - 1)].focus(); }
    else if (event.key === "k" && jobs.length) { event.preventDefault(); jobs[Math.max(at - 1, 0)].focus(); }
    else if (event.key === "n" && !$("next").disabled) { event.preventDefault(); $("next").click(); }
    else if (event.key === "p" && !$("prev").disabled) { event.preventDefault(); $("prev").click(); }
    else if (event.key === "q") {
      event.preventDefault();
      const first = document.querySelector("#queues button.pick-queue");
      if (first) first.focus();
    }
  });
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
