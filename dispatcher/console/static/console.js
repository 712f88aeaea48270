// The longjobs console's only script (no inline script: the CSP forbids it).
//
// Following: a page whose <main> has data-refresh="N" follows the state it shows: every N
// seconds (at most 5) it reads its own address again and puts the new <main> in place,
// without a reload. It waits while a field of the page is being edited or text is selected,
// stops once a field was changed (a filter being set up is never put back), and keeps open
// the <details> that were open.
//
// The team console (a page with <meta name="longjobs-login">, dispatcher/console/team.py):
// its pages are read with the sign-in's token in the Authorization header, which only a
// script can send. This script signs in (OAuth 2.0's code flow with PKCE: a public client,
// no secret; the token kept in this tab's sessionStorage only), then reads the page the
// address names from /x/<address> and puts its <header> and <main> in place; links, forms
// and the back button go the same way. A change is a POST it sends with the token.
//
// Whatever the server sent is taken as the server escaped it; nothing of it runs (markup
// parsed by DOMParser runs no script).
(function () {
  "use strict";
  var login = document.querySelector('meta[name="longjobs-login"]');
  var cfg = login ? login.dataset : null;
  var store = window.sessionStorage;
  var timer = null;
  var busy = false;
  var changed = false;

  function here() { return window.location.pathname + window.location.search; }

  // -- following ------------------------------------------------------------------------------
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
    var main = document.querySelector("main[data-refresh]");
    if (!main || busy || changed || editing() || document.hidden) { return; }
    if (cfg && !token()) { return; }  // signed out: the next navigation signs in
    busy = true;
    fetch(pageUrl(here()), { credentials: "same-origin", cache: "no-store",
                             headers: headers({ "X-Longjobs-Refresh": "1" }) })
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

  // Where a page is read from, and with what: the team console's from /x, with its token.
  function pageUrl(address) { return cfg ? cfg.base + address : address; }
  function headers(extra) {
    var h = extra || {};
    if (cfg) { h.Authorization = "Bearer " + token(); }
    return h;
  }

  function follow() {
    window.clearInterval(timer);
    changed = false;
    var main = document.querySelector("main[data-refresh]");
    if (!main) { return; }
    var every = Math.min(5, Math.max(1, Number(main.getAttribute("data-refresh")) || 3));
    main.addEventListener("input", function () { changed = true; });
    main.addEventListener("change", function () { changed = true; });
    timer = window.setInterval(refresh, every * 1000);
  }

  if (!cfg) { follow(); return; }

  // -- the team console: signing in -----------------------------------------------------------
  function b64url(bytes) {
    var s = "";
    bytes.forEach(function (b) { s += String.fromCharCode(b); });
    return window.btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function randomText() {
    var a = new Uint8Array(32);
    window.crypto.getRandomValues(a);
    return b64url(a);
  }
  function redirectUri() { return window.location.origin + "/"; }
  function token() {
    var t = store.getItem("longjobs.token");
    return t && Date.now() < Number(store.getItem("longjobs.until") || 0) ? t : null;
  }

  function signIn(target) {
    var verifier = randomText();
    var state = randomText();
    store.setItem("longjobs.verifier", verifier);
    store.setItem("longjobs.state", state);
    store.setItem("longjobs.target", target);
    window.crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)).then(function (d) {
      var q = new URLSearchParams({ response_type: "code", client_id: cfg.clientId,
                                    redirect_uri: redirectUri(), scope: cfg.scopes,
                                    state: state, code_challenge: b64url(new Uint8Array(d)),
                                    code_challenge_method: "S256" });
      window.location.assign(cfg.authorize + "?" + q.toString());
    });
  }

  function finishSignIn(params) {
    if (!params.get("state") || params.get("state") !== store.getItem("longjobs.state")) {
      return Promise.reject(new Error("the sign-in's answer is not the one this tab asked for"));
    }
    var body = new URLSearchParams({ grant_type: "authorization_code", client_id: cfg.clientId,
                                     code: params.get("code") || "", redirect_uri: redirectUri(),
                                     code_verifier: store.getItem("longjobs.verifier") || "" });
    return fetch(cfg.token, { method: "POST", body: body,
                              headers: { "Content-Type": "application/x-www-form-urlencoded" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("the issuer refused the sign-in (" + r.status + ")"); }
        return r.json();
      })
      .then(function (t) {
        var seconds = Number(t.expires_in) || 3600;
        store.setItem("longjobs.token", String(t.access_token));
        store.setItem("longjobs.until", String(Date.now() + (seconds - 60) * 1000));
        store.removeItem("longjobs.verifier");
        store.removeItem("longjobs.state");
        var target = store.getItem("longjobs.target") || "/";
        store.removeItem("longjobs.target");
        window.history.replaceState(null, "", target);
        return target;
      });
  }

  function signOut() {
    store.clear();
    if (cfg.logout) {
      window.location.assign(cfg.logout + "?" + new URLSearchParams(
        { client_id: cfg.clientId, logout_uri: redirectUri() }).toString());
    } else {
      window.location.assign("/");
    }
  }

  // -- the team console: reading pages --------------------------------------------------------
  function problem(text) {
    var main = document.createElement("main");
    var p = document.createElement("p");
    p.className = "problem";
    p.setAttribute("role", "alert");
    p.textContent = text;
    var again = document.createElement("a");
    again.href = "/";
    again.textContent = "Start again from the overview";
    main.append(p, again);
    document.querySelector("main").replaceWith(main);
  }

  function show(html, address, push) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var main = doc.querySelector("main");
    if (!main) { problem("The console answered without a page."); return; }
    var header = doc.querySelector("header");
    if (header) {
      if (!header.querySelector(".sign-out")) {
        var out = document.createElement("button");
        out.type = "button";
        out.className = "sign-out";
        out.textContent = "Sign out";
        out.addEventListener("click", signOut);
        header.append(out);
      }
      document.querySelector("header").replaceWith(document.adoptNode(header));
    }
    document.querySelector("main").replaceWith(document.adoptNode(main));
    document.title = doc.title;
    if (push) { window.history.pushState(null, "", address); }
    else if (address !== here()) { window.history.replaceState(null, "", address); }
    follow();
  }

  function load(address, init, push) {
    if (!token()) { signIn(address); return; }
    var options = { credentials: "same-origin", cache: "no-store", method: init.method || "GET",
                    headers: headers(init.headers) };
    if (init.body) { options.body = init.body; }
    fetch(pageUrl(address), options)
      .then(function (r) {
        if (r.status === 401) { store.removeItem("longjobs.token"); signIn(address); return; }
        // Where a change's answer led (its redirect, followed with the token), less /x.
        var landed = new URL(r.url);
        var shown = landed.pathname.indexOf(cfg.base + "/") === 0
          ? landed.pathname.slice(cfg.base.length) + landed.search : address;
        return r.text().then(function (text) {
          if ((r.headers.get("content-type") || "").indexOf("text/html") === 0) {
            show(text, shown, push);
          } else {
            problem(text);
          }
        });
      })
      .catch(function (e) { problem("The console did not answer: " + e.message); });
  }

  document.addEventListener("click", function (e) {
    var a = e.target.closest ? e.target.closest("a[href]") : null;
    if (!a || a.target || e.defaultPrevented || e.button !== 0 ||
        e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) { return; }
    var u = new URL(a.getAttribute("href"), window.location.href);
    if (u.origin !== window.location.origin || u.pathname.indexOf("/static/") === 0) { return; }
    e.preventDefault();
    load(u.pathname + u.search, {}, true);
  });

  document.addEventListener("submit", function (e) {
    var form = e.target;
    e.preventDefault();
    var data = new URLSearchParams(new FormData(form, e.submitter || undefined));
    var action = new URL(form.getAttribute("action") || here(), window.location.href);
    if ((form.getAttribute("method") || "get").toLowerCase() === "post") {
      load(action.pathname + action.search,
           { method: "POST", body: data,
             headers: { "Content-Type": "application/x-www-form-urlencoded" } }, true);
    } else {
      load(action.pathname + "?" + data.toString(), {}, true);
    }
  });

  window.addEventListener("popstate", function () { load(here(), {}, false); });

  var params = new URLSearchParams(window.location.search);
  if (window.location.pathname === "/" && params.get("error")) {
    problem("Signing in failed: " + (params.get("error_description") || params.get("error")));
  } else if (window.location.pathname === "/" && params.get("code")) {
    finishSignIn(params).then(function (target) { load(target, {}, false); },
                              function (e) { problem("Signing in failed: " + e.message); });
  } else {
    load(here(), {}, false);
  }
})();
