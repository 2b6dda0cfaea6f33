// The upload page: drop, pick or paste images, or give an image URL. Each file goes through
// the signed upload flow (start, PUT to the signed link, complete) with its own progress bar,
// then its row waits (long-poll, no tight loop) until the image is embedded.
(function () {
  "use strict";

  const form = document.getElementById("upload-form");
  const targetForm = document.getElementById("upload-target");
  if (!form) {
    return;
  }
  const maxBytes = Number(form.dataset.maxBytes);
  const types = form.dataset.types.split(",");
  const startUrl = form.dataset.startUrl;
  const urlSaveUrl = form.dataset.urlUrl;
  const stateUrl = form.dataset.stateUrl; // ends with "/": the asset id follows
  const assetUrl = form.dataset.assetUrl; // ends with "/": the asset id follows
  const list = document.getElementById("upload-list");
  const summary = document.getElementById("upload-summary");
  const input = document.getElementById("upload-files");
  const zone = document.getElementById("drop-zone");
  const urlForm = document.getElementById("upload-url-form");
  const urlInput = document.getElementById("upload-url");
  const template = document.getElementById("upload-row-template");
  const PARALLEL = 3;
  const WAIT_SECONDS = Number(form.dataset.waitSeconds);
  // Headers a page may not set: the browser sends them itself (Content-Length from the body).
  const FORBIDDEN = new Set(["content-length", "host", "connection"]);
  const STATES = {
    queued: ["\u25F7", "Queued"],
    uploading: ["\u2191", "Uploading"],
    checking: ["\u2026", "Checking"],
    fetching: ["\u2193", "Fetching"],
    pending: ["\u23F3", "Embedding"],
    running: ["\u23F3", "Embedding"],
    ready: ["\u2713", "Ready"],
    partial: ["\u26A0", "Partly embedded"],
    failed: ["\u2715", "Embedding failed"],
    refused: ["\u2715", "Refused"],
  };
  const queue = [];
  let active = 0;

  function humanSize(bytes) {
    if (bytes < 1024) {
      return bytes + " B";
    }
    const units = ["KB", "MB", "GB"];
    let value = bytes / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return value.toFixed(value < 10 ? 1 : 0) + " " + units[unit];
  }

  function target() {
    const data = new FormData(targetForm);
    const body = { vault: data.get("vault") || "Library" };
    if (data.get("projectId")) {
      body.projectId = data.get("projectId");
    }
    if (data.get("folderId")) {
      body.folderId = data.get("folderId");
    }
    const tags = String(new FormData(form).get("tags") || "")
      .split(",")
      .map(function (tag) { return tag.trim(); })
      .filter(Boolean);
    if (tags.length) {
      body.tags = tags;
    }
    return body;
  }

  function addRow(name, size) {
    const row = template.content.firstElementChild.cloneNode(true);
    row.querySelector(".upload-name").textContent = name;
    row.querySelector(".upload-size").textContent = size === null ? "" : humanSize(size);
    const bar = row.querySelector("progress");
    bar.setAttribute("aria-label", "Upload of " + name);
    if (size !== null) {
      bar.max = size;
      bar.value = 0;
    }
    list.prepend(row);
    list.hidden = false;
    setState(row, "queued");
    return row;
  }

  function setState(row, state) {
    const shown = STATES[state];
    row.dataset.state = state;
    row.querySelector(".status-icon").textContent = shown[0];
    row.querySelector(".status-text").textContent = shown[1];
    updateSummary();
  }

  function refuse(row, code, message) {
    const error = row.querySelector(".upload-error");
    error.querySelector(".error-code").textContent = code;
    error.querySelector(".error-message").textContent = message;
    error.hidden = false;
    row.querySelector("progress").classList.add("upload-bar-off");
    setState(row, "refused");
  }

  function updateSummary() {
    const rows = Array.from(list.children);
    const count = function (states) {
      return rows.filter(function (row) { return states.includes(row.dataset.state); }).length;
    };
    const done = count(["ready", "partial"]);
    const failed = count(["refused", "failed"]);
    const working = rows.length - done - failed;
    const parts = [done + " of " + rows.length + " ready"];
    if (working) {
      parts.push(working + " in progress");
    }
    if (failed) {
      parts.push(failed + " failed");
    }
    summary.textContent = rows.length ? parts.join(", ") : "";
  }

  // The app's JSON endpoints (app.js: same origin, the CSRF header, errors with a code).
  function postJson(url, body) {
    return window.memory.call(url, { method: "POST", body: body });
  }

  function Refusal(code, message) {
    this.code = code;
    this.message = message;
  }

  function put(row, ticket, file) {
    return new Promise(function (resolve, reject) {
      const xhr = new XMLHttpRequest();
      const bar = row.querySelector("progress");
      xhr.open(ticket.method, ticket.url);
      Object.keys(ticket.headers).forEach(function (name) {
        if (!FORBIDDEN.has(name.toLowerCase())) {
          xhr.setRequestHeader(name, ticket.headers[name]);
        }
      });
      xhr.upload.addEventListener("progress", function (event) {
        if (event.lengthComputable) {
          bar.max = event.total;
          bar.value = event.loaded;
        }
      });
      xhr.addEventListener("load", function () {
        if (xhr.status >= 200 && xhr.status < 300) {
          bar.value = bar.max;
          resolve();
        } else {
          const text = (xhr.responseText || "").slice(0, 300);
          reject(new Refusal("upload_refused", "the store refused the bytes (" + xhr.status + ")" + (text ? ": " + text : "")));
        }
      });
      xhr.addEventListener("error", function () {
        reject(new Refusal("network", "the upload did not reach the store"));
      });
      xhr.send(file);
    });
  }

  async function watch(row, saved) {
    const link = row.querySelector(".upload-link");
    link.href = assetUrl + encodeURIComponent(saved.assetId);
    link.setAttribute("aria-label", "Open " + row.querySelector(".upload-name").textContent);
    link.hidden = false;
    let state = saved.embeddingStatus;
    setState(row, state in STATES ? state : "pending");
    while (state === "pending" || state === "running") {
      let view;
      try {
        view = await window.memory.call(
          stateUrl + encodeURIComponent(saved.assetId) + "/state?waitSeconds=" + WAIT_SECONDS,
        );
      } catch (failure) {
        if (failure.code && failure.code !== "busy" && failure.code !== "unavailable") {
          refuse(row, failure.code, failure.message);
          return;
        }
        // The server is briefly unavailable (or the network dropped): ask again shortly.
        await new Promise(function (resolve) { setTimeout(resolve, 3000); });
        continue;
      }
      state = view.embeddingStatus;
      setState(row, state in STATES ? state : "pending");
      if (state === "failed" || state === "partial") {
        const error = row.querySelector(".upload-error");
        error.querySelector(".error-code").textContent = view.failureCode || "failed";
        error.querySelector(".error-message").textContent = view.failureMessage || "";
        error.hidden = false;
      }
    }
  }

  async function uploadFile(row, file) {
    setState(row, "uploading");
    const start = { contentType: file.type, contentLength: file.size };
    // The server keeps the name and, without a title, makes the title from it.
    if (file.name) start.fileName = file.name;
    const ticket = await postJson(startUrl, Object.assign(target(), start));
    await put(row, ticket, file);
    setState(row, "checking");
    const saved = await postJson(ticket.completeUrl, {});
    row.querySelector(".upload-size").textContent = humanSize(saved.bytes) + ", " + saved.width + "\u00D7" + saved.height;
    await watch(row, saved);
  }

  // Refused before sending, with the server's own words, where the browser can tell.
  function precheck(file) {
    if (!types.includes(file.type)) {
      return ["invalid_input", "contentType: must be " + types.join(", ").replace(/, ([^,]*)$/, " or $1") + (file.type ? " (this file is " + file.type + ")" : "")];
    }
    if (file.size < 1 || file.size > maxBytes) {
      return ["invalid_input", "contentLength: must be between 1 and " + maxBytes + " bytes (this file has " + file.size + ")"];
    }
    return null;
  }

  function addFiles(files) {
    Array.from(files).forEach(function (file) {
      const row = addRow(file.name || "pasted image", file.size);
      const refused = precheck(file);
      if (refused) {
        refuse(row, refused[0], refused[1]);
        return;
      }
      const job = function () { return uploadFile(row, file); };
      job.row = row;
      queue.push(job);
    });
    pump();
  }

  function pump() {
    while (active < PARALLEL && queue.length) {
      const job = queue.shift();
      active += 1;
      job()
        .catch(function (failure) {
          refuse(job.row, failure.code || "error", failure.message || String(failure));
        })
        .finally(function () {
          active -= 1;
          pump();
        });
    }
  }

  async function saveUrl(url) {
    const row = addRow(url, null);
    row.querySelector("progress").removeAttribute("value");
    setState(row, "fetching");
    try {
      const saved = await postJson(urlSaveUrl, Object.assign(target(), { sourceUrl: url }));
      const bar = row.querySelector("progress");
      bar.max = 1;
      bar.value = 1;
      row.querySelector(".upload-size").textContent = humanSize(saved.bytes) + ", " + saved.width + "\u00D7" + saved.height;
      await watch(row, saved);
    } catch (failure) {
      refuse(row, failure.code || "error", failure.message || String(failure));
    }
  }

  input.addEventListener("change", function () {
    addFiles(input.files);
    input.value = "";
  });
  ["dragenter", "dragover"].forEach(function (name) {
    zone.addEventListener(name, function (event) {
      event.preventDefault();
      zone.classList.add("drop-active");
    });
  });
  ["dragleave", "drop"].forEach(function (name) {
    zone.addEventListener(name, function (event) {
      event.preventDefault();
      zone.classList.remove("drop-active");
    });
  });
  zone.addEventListener("drop", function (event) {
    if (event.dataTransfer && event.dataTransfer.files.length) {
      addFiles(event.dataTransfer.files);
    }
  });
  // Dropping beside the zone must not open the file in place of the page.
  window.addEventListener("dragover", function (event) { event.preventDefault(); });
  window.addEventListener("drop", function (event) { event.preventDefault(); });
  document.addEventListener("paste", function (event) {
    const data = event.clipboardData;
    if (!data) {
      return;
    }
    if (data.files && data.files.length) {
      event.preventDefault();
      addFiles(data.files);
      return;
    }
    const text = data.getData("text/plain").trim();
    if (/^https?:\/\/\S+$/i.test(text) && event.target !== urlInput) {
      event.preventDefault();
      urlInput.value = text;
      urlInput.focus();
    }
  });
  // A new vault or project lists its own projects and folders: the page is drawn again.
  ["upload-vault", "upload-project"].forEach(function (id) {
    const select = document.getElementById(id);
    select.addEventListener("change", function () {
      if (id === "upload-vault") {
        document.getElementById("upload-project").value = "";
      }
      document.getElementById("upload-folder").value = "";
      targetForm.requestSubmit();
    });
  });
  window.addEventListener("beforeunload", function (event) {
    if (active > 0 || queue.length) {
      event.preventDefault();
    }
  });
  urlForm.addEventListener("submit", function (event) {
    event.preventDefault();
    const url = urlInput.value.trim();
    if (url) {
      urlInput.value = "";
      saveUrl(url);
    }
  });
})();
