// Multi-select of the library's and the trash's cards, and their bulk actions (docs/web.md).
// Without this script the page is a plain form of the checked boxes (POST /bulk answers a
// results page). With it: click and shift-click, the keyboard on focusable cards, select all,
// a live count, and each action sent in chunks to POST /bulk/items with its progress shown and
// every refused image named. The selection is the page's checkboxes: another page clears it.
"use strict";

(function () {
  const CHUNK = 10; // ids per request (the server takes at most 100): progress moves often
  const RUNNING = { move: "Moving", addTags: "Tagging", removeTags: "Untagging", delete: "Moving to the trash", restore: "Restoring", purge: "Purging" };
  const DONE = { move: "Moved", addTags: "Tagged", removeTags: "Untagged", delete: "Moved to the trash", restore: "Restored", purge: "Purged" };
  // Actions after which a done image no longer belongs on this page.
  const LEAVES = new Set(["delete", "restore", "purge"]);

  function plural(count) {
    return count === 1 ? "1 image" : count + " images";
  }

  function start() {
    const form = document.querySelector("[data-bulk-form]");
    const grid = document.querySelector("[data-bulk-items]");
    if (!form || !grid) return;
    const count = form.querySelector("[data-bulk-count]");
    const selectAll = form.querySelector("[data-bulk-all]");
    const clear = form.querySelector("[data-bulk-clear]");
    const actions = form.querySelector("[data-bulk-actions]");
    const panel = form.querySelector("[data-bulk-run]");
    const label = form.querySelector("[data-bulk-label]");
    const progress = form.querySelector("[data-bulk-progress]");
    const doneLine = form.querySelector("[data-bulk-done]");
    const outcome = form.querySelector("[data-bulk-outcome]");
    const refusedList = form.querySelector("[data-bulk-refused]");
    let anchor = null; // where a range starts: the card last clicked or toggled
    let running = false;

    const cards = () => Array.from(grid.querySelectorAll("[data-bulk-item]"));
    const box = (card) => card.querySelector(".bulk-check");
    const chosen = () => cards().filter((card) => box(card).checked);

    function show(say) {
      const selected = chosen().length;
      cards().forEach((card) => card.classList.toggle("is-selected", box(card).checked));
      actions.hidden = selected === 0;
      clear.hidden = selected === 0;
      selectAll.hidden = cards().length === 0 || selected === cards().length;
      if (say === null) return; // at the start: the page's own words stay, nothing is announced
      count.textContent = say || (selected === 0 ? "No image selected." : plural(selected) + " selected.");
    }

    function setRange(from, to) {
      const list = cards();
      let first = list.indexOf(from);
      let last = list.indexOf(to);
      if (first < 0) first = last;
      if (first > last) [first, last] = [last, first];
      for (let i = first; i <= last; i += 1) box(list[i]).checked = true;
    }

    function toggle(card, range) {
      if (range && anchor && anchor.isConnected) setRange(anchor, card);
      else box(card).checked = !box(card).checked;
      anchor = card;
      show();
    }

    function choose(checked) {
      cards().forEach((card) => { box(card).checked = checked; });
      show(checked ? "All " + plural(cards().length) + " on this page selected." : "Selection cleared.");
    }

    // Roving focus: one card is in the tab order; the arrows move between them.
    function focusCard(card) {
      cards().forEach((other) => { other.tabIndex = other === card ? 0 : -1; });
      card.focus();
    }

    cards().forEach((card, i) => {
      card.tabIndex = i === 0 ? 0 : -1;
      box(card).tabIndex = -1; // the card is the keyboard's control; a click still works
    });
    show(null);

    grid.addEventListener("click", (event) => {
      const card = event.target.closest("[data-bulk-item]");
      if (!card || running) return;
      if (event.target === box(card)) {
        // The box has toggled itself; a shift-click makes it a range instead.
        if (event.shiftKey && anchor && anchor !== card && anchor.isConnected) setRange(anchor, card);
        anchor = card;
        show();
        return;
      }
      if (event.target.closest("a, button, label, input, form, dialog")) return; // their own job
      toggle(card, event.shiftKey);
    });
    grid.addEventListener("focusin", (event) => {
      const card = event.target.closest("[data-bulk-item]");
      if (card && event.target === card) cards().forEach((other) => { other.tabIndex = other === card ? 0 : -1; });
    });

    function columns(list) {
      const top = list[0].offsetTop;
      return Math.max(1, list.filter((card) => card.offsetTop === top).length);
    }

    grid.addEventListener("keydown", (event) => {
      const card = event.target;
      if (!card.matches || !card.matches("[data-bulk-item]") || running) return; // keys inside a card keep their meaning
      const list = cards();
      const at = list.indexOf(card);
      let next = null;
      switch (event.key) {
        case " ":
          event.preventDefault();
          toggle(card, event.shiftKey);
          return;
        case "Enter": {
          const link = card.querySelector("a[href]");
          if (link) link.click();
          return;
        }
        case "ArrowRight": next = list[at + 1]; break;
        case "ArrowLeft": next = list[at - 1]; break;
        case "ArrowDown": next = list[Math.min(at + columns(list), list.length - 1)]; break;
        case "ArrowUp": next = list[Math.max(at - columns(list), 0)]; break;
        case "Home": next = list[0]; break;
        case "End": next = list[list.length - 1]; break;
        default: return;
      }
      event.preventDefault();
      if (!next || next === card) return;
      if (event.shiftKey) {
        if (!anchor || !anchor.isConnected) anchor = card;
        setRange(anchor, next);
        show();
      }
      focusCard(next);
    });

    const typing = (target) => Boolean(target.closest && target.closest("input:not([type=checkbox]), textarea, select, [contenteditable]"));
    document.addEventListener("keydown", (event) => {
      if (running || typing(event.target) || document.querySelector("dialog[open]")) return;
      if ((event.ctrlKey || event.metaKey) && !event.altKey && event.key.toLowerCase() === "a") {
        event.preventDefault();
        choose(true);
      } else if (event.key === "Escape" && chosen().length) {
        choose(false);
      }
    });
    selectAll.addEventListener("click", () => choose(true));
    clear.addEventListener("click", () => choose(false));

    function refusedItem(card, assetId, error) {
      const item = document.createElement("li");
      const title = document.createElement("strong");
      title.textContent = card ? card.dataset.title : assetId;
      const id = document.createElement("code");
      id.textContent = assetId;
      const code = document.createElement("code");
      code.className = "code";
      code.textContent = error.code;
      item.append(title, " (", id, "): ", error.message + " ", code);
      return item;
    }

    function buttons(disabled) {
      form.querySelectorAll("button").forEach((button) => { button.disabled = disabled; });
    }

    async function runAction(action, picked) {
      const body = { action };
      if (action === "move") body.place = form.elements.place.value;
      if (action === "addTags" || action === "removeTags") {
        body.tags = form.elements.tag.value.split(",").map((tag) => tag.trim()).filter(Boolean);
        if (!body.tags.length) {
          outcome.textContent = "Type the tag to add or remove first.";
          panel.hidden = false;
          form.elements.tag.focus();
          return;
        }
      }
      const total = picked.length;
      const byId = new Map(picked.map((card) => [box(card).value, card]));
      running = true;
      buttons(true);
      panel.hidden = false;
      label.textContent = RUNNING[action] + "…";
      progress.max = total;
      progress.value = 0;
      doneLine.textContent = "0 of " + total;
      outcome.textContent = "";
      refusedList.replaceChildren();
      refusedList.hidden = true;
      let done = 0;
      let succeeded = 0;
      let stopped = null;
      for (let first = 0; first < total; first += CHUNK) {
        const ids = picked.slice(first, first + CHUNK).map((card) => box(card).value);
        let answer;
        try {
          answer = await window.memory.call("/bulk/items", { method: "POST", body: Object.assign({ assetIds: ids }, body) });
        } catch (error) {
          stopped = error;
          break;
        }
        for (const item of answer.items) {
          const card = byId.get(item.assetId);
          if (item.ok) {
            succeeded += 1;
            if (card && LEAVES.has(action)) card.remove();
            else if (card) box(card).checked = false;
          } else {
            refusedList.append(refusedItem(card, item.assetId, item.error));
            refusedList.hidden = false;
          }
        }
        done += ids.length;
        progress.value = done;
        doneLine.textContent = done + " of " + total;
      }
      running = false;
      buttons(false);
      label.textContent = stopped ? "Stopped:" : "Done:";
      const refused = done - succeeded;
      let said = DONE[action] + " " + succeeded + " of " + plural(total) + ".";
      if (refused) said += " " + plural(refused) + " refused (below, still selected); the others were done.";
      if (stopped) said += " Stopped: " + stopped.message + (stopped.code ? " (" + stopped.code + ")" : "") + "; the rest were not sent.";
      outcome.textContent = said;
      const first = cards()[0];
      if (first && !cards().some((card) => card.tabIndex === 0)) first.tabIndex = 0;
      show();
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const submitter = event.submitter;
      const action = submitter && submitter.name === "action" ? submitter.value : null;
      if (!action || running) return;
      const picked = chosen();
      if (!picked.length) return;
      const dialogId = submitter.dataset.bulkConfirm;
      const dialog = dialogId ? document.getElementById(dialogId) : null;
      if (!dialog) {
        runAction(action, picked);
        return;
      }
      dialog.querySelector("[data-bulk-confirm-count]").textContent = "These " + plural(picked.length);
      dialog.showModal();
      // What is confirmed here cannot be undone: the safe choice takes the focus.
      dialog.querySelector("[data-confirm-no]").focus();
      dialog.onclose = null;
      dialog.querySelector("[data-confirm-yes]").onclick = () => {
        dialog.close();
        runAction(action, picked);
      };
      dialog.querySelector("[data-confirm-no]").onclick = () => dialog.close();
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
