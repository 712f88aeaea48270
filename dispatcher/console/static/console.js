// The longjobs console's only script (no inline script: the CSP forbids it).
// A page whose <main> has data-refresh="N" follows the state it shows: every N seconds
// (at most 5) it reads its own URL again and puts the new <main> in place, without a
// reload. It waits while a field of the page is being edited or text is selected, stops
// once a field was changed (a filter being set up is never put back), and keeps open the
// <details> that were open. Whatever the server sent is taken as the
// server escaped it; nothing of it runs (markup parsed by DOMParser runs no script).
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  if (!main) { return; }
  var every = Math.min(5, Math.max(1, Number(main.getAttribute("data-refresh")) || 3));
  var busy = false;
  var changed = false;
  main.addEventListener("input", function () { changed = true; });
  main.addEventListener("change", function () { changed = true; });

  function editing() {
    var a = document.activeElement;
    if (a && a !== document.body && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) { return true; }
    var sel = window.getSelection && window.getSelection();
    return !!(sel && !sel.isCollapsed);
  }

  function openDetails(root) {
    var open = {};
    root.querySelectorAll("details[id]").forEach(function (d) { open[d.id] = d.open; });
    return open;
  }

  function refresh() {
    if (busy || changed || editing() || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store",
                                  headers: { "X-Longjobs-Refresh": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || changed || editing()) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (!fresh) { return; }
        var open = openDetails(main);
        main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
        main.querySelectorAll("details[id]").forEach(function (d) {
          if (Object.prototype.hasOwnProperty.call(open, d.id)) { d.open = open[d.id]; }
        });
        if (!fresh.hasAttribute("data-refresh")) {  // it stopped changing: stop following
          main.removeAttribute("data-refresh");
          window.clearInterval(timer);
        }
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { busy = false; });
  }

  var timer = window.setInterval(refresh, every * 1000);
})();
