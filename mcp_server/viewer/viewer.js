// The run viewer (served at /runs). Every value of a run is put in the page as text
// (textContent, createTextNode), never as markup: outputs full of HTML stay text.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const $ = (id) => document.getElementById(id);
  const openSteps = new Set();
  let current = null; // run id shown, or null for the list
  let source = null;
  let pending = false;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "className") node.className = value;
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }
  const clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };
  const json = (value) => JSON.stringify(value, null, 2);
  const pre = (value) => el("pre", {}, typeof value === "string" ? value : json(value));
  function when(seconds) { return seconds ? new Date(seconds * 1000).toLocaleString() : ""; }
  function took(seconds) {
    if (seconds === null || seconds === undefined) return "";
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 120) return `${seconds.toFixed(1)} s`;
    return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  }
  const badge = (status) => el("span", { className: `status s-${status}` }, status);
  function usage(u) {
    if (!u) return "";
    const cost = u.cost_usd ? `, $${Number(u.cost_usd).toFixed(4)}` : "";
    return `${u.total_tokens ?? (u.input_tokens || 0) + (u.output_tokens || 0)} tokens (${u.input_tokens || 0} in, ${u.output_tokens || 0} out${cost})`;
  }
  function progress(p) {
    if (!p) return "";
    const part = p.total ? `${p.progress}/${p.total}` : `${p.progress ?? ""}`;
    return p.message ? `${part} ${p.message}` : part;
  }

  async function api(path, options) {
    const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
    if (response.status === 401) { window.location.reload(); throw new Error("logged out"); }
    const data = await response.json();
    if (!response.ok) throw Object.assign(new Error((data.error && data.error.message) || data.text || response.statusText), { data });
    return data;
  }
  function post(path, body) {
    return api(path, { method: "POST", headers: { "content-type": "application/json", "x-csrf-token": csrf }, body: JSON.stringify(body || {}) });
  }

  // -- the list ------------------------------------------------------------------------------
  async function showList() {
    const params = new URLSearchParams();
    if ($("filter-status").value) params.set("status", $("filter-status").value);
    if ($("filter-pipeline").value.trim()) params.set("pipeline", $("filter-pipeline").value.trim());
    const data = await api(`/runs/api/runs?${params}`);
    const body = clear($("runs").querySelector("tbody"));
    for (const run of data.runs) {
      const row = el("tr", { "data-run": run.run_id },
        el("td", {}, el("code", {}, run.run_id)), el("td", {}, run.pipeline), el("td", {}, badge(run.status)),
        el("td", {}, when(run.started)), el("td", {}, took(run.duration)), el("td", {}, progress(run.progress)));
      row.addEventListener("click", () => { window.location.hash = `#run/${encodeURIComponent(run.run_id)}`; });
      body.appendChild(row);
    }
    $("no-runs").hidden = data.runs.length > 0;
  }

  // -- one run ---------------------------------------------------------------------------------
  const ORDER = ["failed", "running", "waiting", "queued", "cancelled", "interrupted", "stopped", "succeeded", "skipped"];
  function statusOf(id, steps) {
    const mine = steps.filter((s) => s.step_id === id).map((s) => s.status);
    if (!mine.length) return "pending";
    return ORDER.find((s) => mine.includes(s)) || mine[0];
  }
  function graphNode(node, steps) {
    const status = statusOf(node.id, steps);
    const box = el("div", { className: `node n-${status}`, "data-step": node.id, title: status },
      el("div", { className: "head" }, el("strong", {}, node.id), el("span", { className: "kind" }, `${node.kind}: ${node.label}`), badge(status)));
    if (node.children && node.children.length) {
      const inner = el("div", { className: "children" });
      for (const child of node.children) inner.appendChild(graphNode(child, steps));
      box.appendChild(inner);
    }
    return box;
  }
  function envelope(error) {
    const body = (error && error.error) || error;
    if (!body) return null;
    if (typeof body === "string") return el("div", {}, body);
    return el("div", {},
      el("span", { className: "type" }, body.type || "error"), ": ", body.message || "",
      body.hint ? el("div", { className: "hint" }, `hint: ${body.hint}`) : null,
      body.where ? el("div", { className: "hint" }, `where: ${body.where}`) : null);
  }
  function timeline(run, steps) {
    const box = clear($("timeline"));
    const starts = steps.map((s) => s.started).filter(Boolean);
    const start = starts.length ? Math.min(...starts) : run.started; // the first step, not the process start-up
    const end = Math.max(run.ended || Date.now() / 1000, ...steps.map((s) => s.ended || s.started || 0));
    const span = Math.max(end - start, 0.001);
    for (const step of steps) {
      if (!step.started) continue;
      const left = ((step.started - start) / span) * 100;
      const width = (((step.ended || end) - step.started) / span) * 100;
      const bar = el("div", { className: `bar s-${step.status}`, title: `${step.path}: ${step.status} ${took(step.duration)}` });
      bar.style.left = `${Math.max(0, left)}%`;
      bar.style.width = `${Math.max(0.3, width)}%`;
      box.appendChild(el("div", { className: "lane" }, el("span", { className: "name", title: step.path }, step.path), el("div", { className: "track" }, bar)));
    }
    if (!box.firstChild) box.appendChild(el("p", { className: "empty" }, "No steps recorded yet."));
  }
  function stepList(steps) {
    const box = clear($("steps"));
    for (const step of steps) {
      const details = el("details", { className: "step", "data-path": step.path },
        el("summary", {}, badge(step.status), el("code", {}, step.path), el("span", { className: "kind" }, step.kind), took(step.duration), usage(step.usage)));
      if (openSteps.has(step.path)) details.open = true;
      details.addEventListener("toggle", () => { if (details.open) openSteps.add(step.path); else openSteps.delete(step.path); });
      if (step.error) details.appendChild(el("div", { className: "error" }, envelope(step.error)));
      details.appendChild(el("div", {}, el("strong", {}, "Inputs"), pre(step.inputs ?? null)));
      details.appendChild(el("div", {}, el("strong", {}, "Outputs"), pre(step.outputs ?? null)));
      if (step.usage) details.appendChild(el("div", {}, el("strong", {}, "Usage "), usage(step.usage)));
      if (step.logs && step.logs.length) details.appendChild(el("div", {}, el("strong", {}, "Logs"), pre(step.logs.join("\n"))));
      box.appendChild(details);
    }
    if (!box.firstChild) box.appendChild(el("p", { className: "empty" }, "No steps recorded yet."));
  }
  // -- a waiting run's question: one field per property of its (flat) schema ------------------
  let asked = null; // the question the form shows: rebuilt only when it changes, so typing survives updates
  let fieldsOf = {}; // field name -> its input and schema
  function field(name, prop, required) {
    const choices = prop.enum || (prop.items && prop.items.enum) || null;
    let input;
    if (choices) {
      input = el("select", { multiple: prop.type === "array" ? "" : null });
      if (!required && prop.type !== "array") input.appendChild(el("option", { value: "" }, ""));
      for (const choice of choices) input.appendChild(el("option", { value: String(choice) }, String(choice)));
      if (prop.default !== undefined) input.value = String(prop.default);
    } else if (prop.type === "boolean") {
      input = el("input", { type: "checkbox" });
      input.checked = prop.default === true;
    } else if (prop.type === "integer" || prop.type === "number") {
      input = el("input", { type: "number", step: prop.type === "integer" ? "1" : "any" });
      if (prop.default !== undefined) input.value = String(prop.default);
    } else {
      input = el("input", { type: "text", autocomplete: "off" });
      if (prop.default !== undefined) input.value = String(prop.default);
    }
    input.dataset.field = name;
    input.id = `answer-${Object.keys(fieldsOf).length}`;
    fieldsOf[name] = { input, prop, choices };
    const label = el("label", { for: input.id }, prop.title || name, required ? " (required)" : "");
    return [label, el("div", {}, input, prop.description ? el("div", { className: "hint" }, prop.description) : null)];
  }
  function answerForm(asking) {
    const key = asking ? `${current}\n${asking.key || ""}\n${asking.question || ""}` : null;
    if (key === asked) return;
    asked = key;
    fieldsOf = {};
    const box = clear($("answer-fields"));
    $("answer-problem").textContent = "";
    if (!asking) return;
    $("question").textContent = asking.question || "This run waits for an answer.";
    const schema = asking.schema || {};
    const required = new Set(schema.required || []);
    for (const [name, prop] of Object.entries(schema.properties || {})) {
      for (const node of field(name, prop || {}, required.has(name))) box.appendChild(node);
    }
  }
  function answerOf() {
    const answer = {};
    for (const [name, { input, prop, choices }] of Object.entries(fieldsOf)) {
      if (prop.type === "array") answer[name] = [...input.selectedOptions].map((o) => o.value);
      else if (prop.type === "boolean" && !choices) answer[name] = input.checked;
      else if (input.value === "") continue; // left empty: the server says when it was required
      else if (prop.type === "integer" || prop.type === "number") answer[name] = Number.isNaN(Number(input.value)) ? input.value : Number(input.value);
      else answer[name] = input.value;
    }
    return answer;
  }

  async function showRun(id) {
    const data = await api(`/runs/api/runs/${encodeURIComponent(id)}`);
    const run = data.run;
    $("run-title").textContent = `${run.pipeline} - ${run.run_id}`;
    clear($("run-status")).appendChild(badge(run.status));
    const facts = clear($("run-facts"));
    const fact = (name, value) => { if (value) { facts.appendChild(el("dt", {}, name)); facts.appendChild(el("dd", {}, value)); } };
    fact("Started", when(run.started));
    fact("Ended", when(run.ended));
    fact("Duration", took(run.duration));
    fact("Progress", progress(run.progress));
    fact("Started by", run.started_by);
    fact("File", run.file);
    const problem = run.envelope || run.error;
    $("run-error").hidden = !problem;
    if (problem) clear($("run-error")).appendChild(envelope(problem));
    $("cancel").hidden = !data.actions.cancel;
    $("answer").hidden = !data.actions.answer;
    answerForm(data.actions.answer ? run.asking : null);
    const graph = clear($("graph"));
    if (data.graph) for (const node of data.graph) graph.appendChild(graphNode(node, data.steps));
    else graph.appendChild(el("p", { className: "empty" }, "No graph for this run."));
    timeline(run, data.steps);
    stepList(data.steps);
    const list = clear($("artifacts"));
    for (const file of data.artifacts) {
      const href = `/runs/api/runs/${encodeURIComponent(run.run_id)}/artifacts/${file.path.split("/").map(encodeURIComponent).join("/")}`;
      list.appendChild(el("li", {}, el("a", { href, download: "" }, file.path), ` (${file.bytes} bytes)`));
    }
    if (!data.artifacts.length) list.appendChild(el("li", { className: "empty" }, "none"));
    const io = clear($("io"));
    io.appendChild(el("div", {}, el("strong", {}, "Inputs"), pre(run.inputs)));
    if (run.result !== null && run.result !== undefined) io.appendChild(el("div", {}, el("strong", {}, "Result"), pre(run.result)));
  }

  // -- navigation and live updates -------------------------------------------------------------
  function listen() {
    if (source) source.close();
    source = new EventSource(current ? `/runs/api/events?run=${encodeURIComponent(current)}` : "/runs/api/events");
    source.addEventListener("change", refresh);
    source.onopen = () => { $("live").textContent = "live"; $("live").classList.add("on"); };
    source.onerror = () => { $("live").textContent = "reconnecting"; $("live").classList.remove("on"); };
  }
  async function refresh() {
    if (pending) return;
    pending = true;
    try {
      if (current) await showRun(current); else await showList();
      document.body.dataset.updated = String(Date.now());
    } catch (error) {
      console.error(error);
    } finally {
      pending = false;
    }
  }
  function route() {
    const match = /^#run\/(.+)$/.exec(window.location.hash);
    current = match ? decodeURIComponent(match[1]) : null;
    $("list-view").hidden = Boolean(current);
    $("run-view").hidden = !current;
    openSteps.clear();
    listen();
    refresh();
  }
  $("filter-status").addEventListener("change", refresh);
  $("filter-pipeline").addEventListener("input", refresh);
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); refresh(); });
  $("cancel").addEventListener("click", async () => {
    if (!current || !window.confirm("Cancel this run?")) return;
    try { await post(`/runs/api/runs/${encodeURIComponent(current)}/cancel`); } catch (error) { window.alert(error.message); }
    refresh();
  });
  $("answer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = $("answer").querySelector("button");
    button.disabled = true; // the answer resumes the run: the request ends when it ends or waits again
    try {
      await post(`/runs/api/runs/${encodeURIComponent(current)}/answer`, { answer: answerOf() });
      $("answer-problem").textContent = "";
    } catch (error) {
      const hint = error.data && error.data.error && error.data.error.hint;
      $("answer-problem").textContent = hint ? `${error.message} (${hint})` : error.message;
    } finally {
      button.disabled = false;
    }
    refresh();
  });
  window.addEventListener("hashchange", route);
  route();
})();
