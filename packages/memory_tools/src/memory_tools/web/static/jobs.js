// The Jobs page: filters reload the rows (skeleton rows meanwhile), the rows are polled only
// while a queued, running or retrying row is shown, and a row's details open in a side panel.
"use strict";

(function () {
  const root = document.getElementById("jobs");
  if (!root) return;
  const form = root.querySelector(".jobs-toolbar");
  const table = root.querySelector(".jobs-table");
  const rows = document.getElementById("jobs-rows");
  const empty = document.getElementById("jobs-empty");
  const failure = document.getElementById("jobs-error");
  const live = document.getElementById("jobs-live");
  const older = root.querySelector("[data-older]");
  const newest = root.querySelector("[data-newest]");
  const panel = document.getElementById("job-panel");
  const panelBody = document.getElementById("job-panel-body");
  const panelTitle = document.getElementById("job-panel-title");
  const skeleton = document.getElementById("jobs-skeleton");
  const pollMs = Number(root.dataset.pollMs) || 1500;
  let timer = null;
  let generation = 0; // a newer load makes an older answer stale
  let opener = null;

  function filters() {
    const params = new URLSearchParams(window.location.search);
    const wanted = new URLSearchParams();
    for (const name of ["status", "type"]) {
      const value = form.elements[name].value;
      if (value) wanted.set(name, value);
    }
    if (params.get("cursor")) wanted.set("cursor", params.get("cursor"));
    return wanted;
  }

  function setLive(active) {
    root.dataset.active = active ? "true" : "false";
    live.dataset.state = active ? "live" : "idle";
    live.querySelector(".icon").textContent = active ? "●" : "○";
    const text = live.querySelector(".jobs-live-text");
    text.textContent = active ? "Live" : "Idle";
    text.title = active
      ? "The table refreshes while work is queued or running"
      : "No queued or running work shown: the table is not refreshing";
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = null;
    if (root.dataset.active === "true") {
      timer = window.setTimeout(() => load(false), pollMs);
    }
  }

  function showSkeleton() {
    rows.replaceChildren(skeleton.content.cloneNode(true));
    table.setAttribute("aria-busy", "true");
    empty.hidden = true;
    failure.hidden = true;
  }

  async function load(withSkeleton) {
    const mine = ++generation;
    window.clearTimeout(timer);
    timer = null;
    if (withSkeleton) showSkeleton();
    const query = filters().toString();
    try {
      const data = await window.memory.call("/jobs/rows" + (query ? "?" + query : ""));
      if (mine !== generation) return;
      // A refresh replaces the rows: a keyboard user on a row's link stays on that row's link.
      const focused = rows.contains(document.activeElement) ? document.activeElement.dataset.job : null;
      rows.innerHTML = data.html;
      if (focused) {
        const same = rows.querySelector('[data-job="' + CSS.escape(focused) + '"]');
        if (same) same.focus();
      }
      table.setAttribute("aria-busy", "false");
      failure.hidden = true;
      table.hidden = false;
      empty.hidden = data.count > 0;
      older.hidden = !data.older;
      older.href = data.older || "#";
      newest.hidden = !new URLSearchParams(window.location.search).get("cursor");
      setLive(data.active);
      schedule();
    } catch (error) {
      if (mine !== generation) return;
      rows.replaceChildren();
      table.setAttribute("aria-busy", "false");
      empty.hidden = true;
      failure.querySelector("[data-error-message]").textContent = error.message;
      failure.querySelector("[data-error-code]").textContent = error.code || "";
      failure.hidden = false;
      setLive(false); // no polling into an error: "Try again" is the way back
    }
  }

  function applyFilters(withCursor) {
    const wanted = filters();
    if (!withCursor) wanted.delete("cursor");
    const query = wanted.toString();
    window.history.replaceState(null, "", "/jobs" + (query ? "?" + query : ""));
    load(true);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    applyFilters(false);
  });
  form.elements.status.addEventListener("change", () => applyFilters(false));
  form.elements.type.addEventListener("change", () => applyFilters(false));
  root.querySelectorAll("[data-clear-filters]").forEach((link) => {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      form.elements.status.value = "";
      form.elements.type.value = "";
      applyFilters(false);
      form.elements.status.focus();
    });
  });
  root.querySelector("[data-refresh]").addEventListener("click", () => load(true));
  root.querySelector("[data-retry-load]").addEventListener("click", () => load(true));
  newest.addEventListener("click", (event) => {
    event.preventDefault();
    applyFilters(false);
  });
  older.addEventListener("click", (event) => {
    if (older.hidden || older.getAttribute("href") === "#") return;
    event.preventDefault();
    const target = new URL(older.href, window.location.href);
    window.history.replaceState(null, "", target.pathname + target.search);
    load(true);
  });

  // --- the side panel ---------------------------------------------------------------------

  async function openPanel(link) {
    opener = link;
    panelTitle.textContent = link.textContent.replace(/\s+/g, " ").trim();
    panelBody.replaceChildren();
    const placeholder = document.createElement("p");
    placeholder.innerHTML = '<span class="skeleton"></span>';
    panelBody.append(placeholder);
    panel.setAttribute("aria-busy", "true");
    if (!panel.open) panel.showModal();
    const back = window.location.pathname + window.location.search;
    const url = link.getAttribute("href") + "/panel?back=" + encodeURIComponent(back);
    try {
      const data = await window.memory.call(url);
      panelTitle.textContent = "Job " + link.dataset.job;
      panelBody.innerHTML = data.html;
    } catch (error) {
      panelBody.replaceChildren();
      const message = document.createElement("p");
      message.className = "flash flash-error";
      message.setAttribute("role", "alert");
      message.textContent = error.message + (error.code ? " (" + error.code + ")" : "");
      const again = document.createElement("button");
      again.type = "button";
      again.className = "button primary";
      again.textContent = "Try again";
      again.addEventListener("click", () => openPanel(link));
      panelBody.append(message, again);
    }
    panel.setAttribute("aria-busy", "false");
  }

  rows.addEventListener("click", (event) => {
    const link = event.target.closest(".jobs-details-link");
    if (!link || typeof panel.showModal !== "function") return;
    event.preventDefault();
    openPanel(link);
  });
  panel.querySelector("[data-close-panel]").addEventListener("click", () => panel.close());
  panel.addEventListener("close", () => {
    // The rows may have been replaced meanwhile: go back to the same job's link if it is there.
    const again = opener && rows.querySelector('[data-job="' + CSS.escape(opener.dataset.job) + '"]');
    if (again) again.focus();
    else if (opener && opener.isConnected) opener.focus();
  });

  schedule();
})();
