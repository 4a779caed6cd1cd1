// peftlife timeline page: clicking a column opens its iteration's calls; the drain folds.
(function () {
  "use strict";
  var grid = document.querySelector("table.grid");
  if (!grid) return;
  function show(iteration) {
    document.querySelectorAll("section.detail").forEach(function (d) {
      d.hidden = d.getAttribute("data-iteration") !== iteration;
    });
    grid.querySelectorAll(".selected").forEach(function (c) { c.classList.remove("selected"); });
    grid.querySelectorAll('[data-iteration="' + iteration + '"]').forEach(function (c) {
      c.classList.add("selected");
    });
  }
  // The page opens on the violating iteration's calls: mark its column as clicking would.
  var opened = document.querySelector("section.detail:not([hidden])");
  if (opened) show(opened.getAttribute("data-iteration"));
  grid.querySelectorAll("th.col button").forEach(function (b) {
    b.addEventListener("click", function () {
      show(b.closest("th").getAttribute("data-iteration"));
    });
  });
  grid.querySelectorAll("button.drain-toggle").forEach(function (b) {
    b.addEventListener("click", function () {
      var folded = grid.classList.toggle("folded");
      grid.querySelectorAll("button.drain-toggle").forEach(function (t) {
        t.setAttribute("aria-expanded", folded ? "false" : "true");
      });
    });
  });
})();
