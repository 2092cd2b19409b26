// Shoal dashboard: the only script besides htmx (served from /ui/static: the pages' CSP
// allows no inline or remote script).
// Live logs follow their tail unless the reader scrolled up (issue 25 item 2): the poll
// replaces each worker's <pre>, which would reset its scroll to the top every 2 s. Before
// the swap each box's position is noted; after it, a box that was at its bottom (or is
// new) is scrolled to the new bottom, and one the reader scrolled up keeps its place.
(function () {
  "use strict";
  var NEAR = 8; // px from the bottom that still counts as following
  var kept = {};
  function logsOf(event) {
    var target = event.detail && event.detail.target;
    return target && target.id === "logs" ? target : null;
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    var box = logsOf(event);
    if (!box) return;
    kept = {};
    box.querySelectorAll("pre.log").forEach(function (pre) {
      var bottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight <= NEAR;
      kept[pre.dataset.worker] = bottom ? null : pre.scrollTop;
    });
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    var box = logsOf(event);
    if (!box) return;
    box.querySelectorAll("pre.log").forEach(function (pre) {
      var top = kept[pre.dataset.worker];
      pre.scrollTop = top === undefined || top === null ? pre.scrollHeight : top;
    });
  });
})();
