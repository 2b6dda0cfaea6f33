// The Keys page: copy a new key's secret, and keep a reload from showing it again.
"use strict";

(function () {
  document.addEventListener("DOMContentLoaded", () => {
    // The page that shows a new secret answered a POST: its address becomes /keys, so a
    // reload reads the list (without the secret) instead of sending the form again.
    const created = document.querySelector("[data-replace-url]");
    if (created) window.history.replaceState(null, "", created.dataset.replaceUrl);
    document.querySelectorAll("button[data-copy]").forEach((button) => {
      button.addEventListener("click", async () => {
        const source = document.getElementById(button.dataset.copy);
        const status = button.parentElement.querySelector(".copy-status");
        try {
          await navigator.clipboard.writeText(source.textContent.trim());
          if (status) status.textContent = "Copied.";
        } catch (error) {
          // No clipboard (an insecure origin, or refused): select it for a manual copy.
          window.getSelection().selectAllChildren(source);
          if (status) status.textContent = "Select and copy it by hand (Ctrl+C).";
        }
      });
    });
  });
})();
