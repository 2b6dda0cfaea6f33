// The search page: a text search is a plain GET (linkable); with a query image (chosen or
// pasted) the same form is sent as a multipart POST carrying the CSRF token.
(function () {
  "use strict";

  const form = document.getElementById("search-form");
  if (!form) {
    return;
  }
  const input = document.getElementById("search-image");
  const chosen = document.getElementById("search-image-chosen");
  const clear = document.getElementById("search-image-clear");
  const token = document.getElementById("search-csrf");
  const blanked = [];

  function show() {
    const file = input.files && input.files[0];
    if (file) {
      chosen.textContent = (file.name || "pasted image") + " (" + Math.max(1, Math.round(file.size / 1024)) + " KB)";
      clear.hidden = false;
    } else {
      chosen.textContent = "";
      clear.hidden = true;
    }
  }

  input.addEventListener("change", show);
  clear.addEventListener("click", function () {
    input.value = "";
    show();
    input.focus();
  });
  // Dropped on the picker, as on the upload page: the first image file becomes the query.
  const zone = document.getElementById("search-drop");
  if (zone) {
    ["dragenter", "dragover"].forEach(function (kind) {
      zone.addEventListener(kind, function (event) {
        event.preventDefault();
        zone.classList.add("drop-active");
      });
    });
    zone.addEventListener("dragleave", function () { zone.classList.remove("drop-active"); });
    zone.addEventListener("drop", function (event) {
      event.preventDefault();
      zone.classList.remove("drop-active");
      const files = event.dataTransfer && event.dataTransfer.files;
      if (!files || !files.length) {
        return;
      }
      const transfer = new DataTransfer();
      transfer.items.add(files[0]);
      input.files = transfer.files;
      show();
    });
  }
  document.addEventListener("paste", function (event) {
    const files = event.clipboardData && event.clipboardData.files;
    if (!files || !files.length || !files[0].type.startsWith("image/")) {
      return;
    }
    event.preventDefault();
    const transfer = new DataTransfer();
    transfer.items.add(files[0]);
    input.files = transfer.files;
    show();
  });
  form.addEventListener("submit", function () {
    const withImage = input.files && input.files.length > 0;
    form.method = withImage ? "post" : "get";
    form.enctype = withImage ? "multipart/form-data" : "application/x-www-form-urlencoded";
    // The token goes only into a POST body, never into a linkable URL.
    token.disabled = !withImage;
    input.disabled = !withImage;
    if (!withImage) {
      // Empty fields stay out of the link: /search?query=harbour, not a line of blanks.
      Array.from(form.elements).forEach(function (field) {
        if (field.name && !field.disabled && field.type !== "checkbox" && field.value === "") {
          field.disabled = true;
          blanked.push(field);
        }
      });
    }
  });
  // Back from a POST result, the form may be restored with its inputs disabled.
  window.addEventListener("pageshow", function () {
    blanked.splice(0).forEach(function (field) { field.disabled = false; });
    input.disabled = false;
    token.disabled = true;
    show();
  });
  show();
})();
