// dque dashboard: live numbers and "select all". The pages work without it.
(function () {
  "use strict";
  // Elements marked data-live="N.key" show queue N's number `key`.
  function refresh() {
    if (!document.querySelector("[data-live]")) return;
    fetch("/live", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var parts = el.getAttribute("data-live").split(".");
          var q = data.queues[Number(parts[0])];
          if (q && parts[1] in q) el.textContent = String(q[parts[1]]);
        });
      })
      .catch(function () {});
  }
  setInterval(refresh, 3000);
  // A checkbox marked data-select-all checks every box of its form.
  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      all.form.querySelectorAll("input[name=id]").forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
})();
