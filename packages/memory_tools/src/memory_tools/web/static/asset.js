// The asset page: "Delete…" asks in a <dialog> instead of opening the confirmation page.
// Without scripts the link opens that page, which asks the same and posts the same form.
"use strict";

(function () {
  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("a[data-delete-dialog]").forEach((link) => {
      const dialog = document.getElementById(link.dataset.deleteDialog);
      if (!dialog || typeof dialog.showModal !== "function") return;
      link.addEventListener("click", (event) => {
        event.preventDefault();
        dialog.showModal();
        // Deleting is the destructive choice: the safe one takes the focus, so a stray Enter
        // keeps the image (as the trash's purge dialog does).
        const first = dialog.querySelector("[data-delete-no]") || dialog.querySelector("[data-delete-yes]");
        if (first) first.focus();
      });
      dialog.querySelectorAll("[data-delete-no]").forEach((cancel) => {
        cancel.addEventListener("click", (event) => {
          event.preventDefault();
          dialog.close();
          link.focus();
        });
      });
    });
  });
})();
