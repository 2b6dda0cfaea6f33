// Shared behaviour of every page: the CSRF-aware fetch, confirm dialogs, and small helpers.
// Loaded with the page's CSP nonce; no inline handlers anywhere (the CSP forbids them).
"use strict";

(function () {
  const csrf = () => {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  };

  // fetch() for the app's JSON endpoints: same origin, the CSRF header on changes, and the
  // server's {"error": {"code", "message"}} turned into an Error with .code.
  async function call(url, options = {}) {
    const method = (options.method || "GET").toUpperCase();
    const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
    if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrf();
    let body = options.body;
    if (body !== undefined && !(body instanceof FormData) && typeof body !== "string") {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(body);
    }
    const response = await fetch(url, Object.assign({}, options, { method, headers, body, credentials: "same-origin" }));
    let data = null;
    const type = response.headers.get("content-type") || "";
    if (type.includes("application/json")) data = await response.json();
    if (!response.ok) {
      const failure = (data && data.error) || { code: "http_" + response.status, message: response.statusText || "request failed" };
      const error = new Error(failure.message);
      error.code = failure.code;
      error.status = response.status;
      if (response.status === 401) {
        window.location.assign("/sign-in?next=" + encodeURIComponent(window.location.pathname + window.location.search));
      }
      throw error;
    }
    return data;
  }

  // <form data-confirm="dialog-id">: submitting opens the <dialog>; its confirm button submits.
  function wireConfirmations(root) {
    root.querySelectorAll("form[data-confirm]").forEach((form) => {
      const dialog = document.getElementById(form.dataset.confirm);
      if (!dialog || typeof dialog.showModal !== "function") return;
      form.addEventListener("submit", (event) => {
        if (form.dataset.confirmed === "yes") return;
        event.preventDefault();
        dialog.showModal();
        // What is confirmed here cannot be undone: the safe choice takes the focus.
        const first = dialog.querySelector("[data-confirm-no]") || dialog.querySelector("[data-confirm-yes]");
        if (first) first.focus();
      });
      dialog.querySelectorAll("[data-confirm-yes]").forEach((button) => {
        button.addEventListener("click", () => {
          form.dataset.confirmed = "yes";
          // Tells the server this was confirmed (without it, it asks on a page of its own).
          let flag = form.querySelector('input[name="confirmed"]');
          if (!flag) {
            flag = document.createElement("input");
            flag.type = "hidden";
            flag.name = "confirmed";
            form.appendChild(flag);
          }
          flag.value = "yes";
          dialog.close();
          form.requestSubmit();
        });
      });
      dialog.querySelectorAll("[data-confirm-no]").forEach((button) => {
        button.addEventListener("click", () => dialog.close());
      });
    });
  }

  function formatBytes(count) {
    if (count === null || count === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = Number(count);
    for (const unit of units) {
      if (Math.abs(value) < 1024 || unit === "TiB") return unit === "B" ? value.toFixed(0) + " B" : value.toFixed(1) + " " + unit;
      value /= 1024;
    }
    return value.toFixed(1) + " TiB";
  }

  // <details data-fold-narrow>: folded at phone widths, open (its summary hidden by the
  // stylesheet) at wider ones. Without scripts it stays open, as the page was before.
  function foldNarrow(root) {
    const narrow = window.matchMedia("(max-width: 640px)");
    const sections = root.querySelectorAll("details[data-fold-narrow]");
    const apply = () => sections.forEach((section) => { section.open = !narrow.matches; });
    apply();
    narrow.addEventListener("change", apply);
  }

  window.memory = { call, csrf, formatBytes, wireConfirmations };
  document.addEventListener("DOMContentLoaded", () => {
    wireConfirmations(document);
    foldNarrow(document);
  });
})();
