// Tenantry's consoles (the operator's at /console, the tenant's at /app): the live parts of
// server-rendered pages. No framework, no external fetches, no paths of its own: every URL
// comes from the page's data attributes. Everything it writes into the page goes through
// textContent, or is a fragment the server rendered with every value escaped.
"use strict";

(function () {
  // Runs list: re-fetch the rows (same filters, same page) every few seconds while visible.
  function liveRows(tbody) {
    var url = tbody.getAttribute("data-refresh");
    var busy = false;
    var timer = setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.status === 200) return r.text();
          clearInterval(timer); // logged out or gone: stop asking
          return null;
        })
        .then(function (html) {
          // Server-rendered with every value escaped by the template engine.
          if (html !== null) tbody.innerHTML = html;
        })
        .catch(function () { /* a missed refresh is retried on the next tick */ })
        .finally(function () { busy = false; });
    }, 3000);
  }

  function text(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) el.className = cls;
    return el;
  }

  function compact(data) {
    var s = JSON.stringify(data);
    return s.length > 160 ? s.slice(0, 159) + "\u2026" : s;
  }

  // An event's data as the page renders it (_payload.html): one line, expandable to all of
  // it, with links to what an output_ref or input_ref stands for when the page names
  // where those are read (data-blobs; the tenant console's page shows the data alone).
  function payload(ev, blobs) {
    var box = document.createElement("details");
    box.className = "payload";
    var summary = document.createElement("summary");
    summary.appendChild(text("code", compact(ev.data)));
    box.appendChild(summary);
    box.appendChild(text("pre", JSON.stringify(ev.data, null, 2)));
    if (!blobs) return box;
    ["output_ref", "input_ref"].forEach(function (field) {
      var ref = ev.data && ev.data[field];
      if (!ref) return;
      var url = blobs + "/" + encodeURIComponent(String(ev.seq)) + "/" + field;
      var line = text("p", field + " ", "ref");
      line.appendChild(text("code", String(ref)));
      line.appendChild(document.createTextNode(": "));
      var show = text("a", "show");
      show.href = url; show.target = "_blank"; show.rel = "noopener";
      line.appendChild(show);
      line.appendChild(document.createTextNode(" \u00b7 "));
      var save = text("a", "download");
      save.href = url + "?download=1";
      line.appendChild(save);
      box.appendChild(line);
    });
    // Blobs a call stored besides its output: a browser's screenshot is shown inline.
    ((ev.data && ev.data.blob_refs) || []).forEach(function (ref, n) {
      var url = blobs + "/" + encodeURIComponent(String(ev.seq)) + "/blob_refs?n=" + n;
      var line = text("p", "blob ", "ref");
      line.appendChild(text("code", String(ref)));
      line.appendChild(document.createTextNode(": "));
      var show = text("a", "show");
      show.href = url; show.target = "_blank"; show.rel = "noopener";
      line.appendChild(show);
      box.appendChild(line);
      if (ev.data.tool === "browser_screenshot") {
        var img = document.createElement("img");
        img.className = "shot"; img.src = url; img.alt = "screenshot taken by the run's browser";
        box.appendChild(img);
      }
    });
    return box;
  }

  // Run page, the parts above the events (status, finished time, usage, approvals, trace,
  // answer): fetched again as a fragment after events, at most one request in flight and
  // one a second, replacing each part whose HTML changed. A part holding the keyboard
  // focus (a comment being typed) waits for the next round; <details> keep their state.
  function liveParts(root) {
    var url = root.getAttribute("data-fragment");
    var shown = {};
    root.querySelectorAll("section[data-part]").forEach(function (part) {
      shown[part.getAttribute("data-part")] = part.innerHTML;
    });
    var timer = null, busy = false, again = false, last = 0;

    function apply(html) {
      var fresh = new DOMParser().parseFromString(html, "text/html");
      fresh.querySelectorAll("section[data-part]").forEach(function (part) {
        var name = part.getAttribute("data-part");
        var current = root.querySelector('section[data-part="' + name + '"]');
        if (!current || shown[name] === part.innerHTML) return;
        if (current.contains(document.activeElement) && document.activeElement !== document.body) return;
        var open = {};
        current.querySelectorAll("details[data-key]").forEach(function (d) {
          open[d.getAttribute("data-key")] = d.open;
        });
        shown[name] = part.innerHTML;
        // Server-rendered with every value escaped by the template engine.
        current.innerHTML = part.innerHTML;
        current.querySelectorAll("details[data-key]").forEach(function (d) {
          var key = d.getAttribute("data-key");
          if (Object.prototype.hasOwnProperty.call(open, key)) d.open = open[key];
        });
      });
    }

    function fetchNow() {
      timer = null;
      busy = true;
      last = Date.now();
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.status === 200 ? r.text() : null; })
        .then(function (html) { if (html !== null) apply(html); })
        .catch(function () { /* the next event asks again */ })
        .finally(function () {
          busy = false;
          if (again) { again = false; refresh(); }
        });
    }

    function refresh() {
      if (busy) { again = true; return; }
      if (timer) return;
      timer = setTimeout(fetchNow, Math.max(100, last + 1000 - Date.now()));
    }
    return refresh;
  }

  // Run page: follow the run's event log over SSE; the parts above follow it too.
  function liveRun(tbody, refreshParts) {
    var terminal = (tbody.getAttribute("data-terminal") || "").split(" ");
    var types = (tbody.getAttribute("data-types") || "").split(" ");
    var blobs = tbody.getAttribute("data-blobs");
    var state = document.getElementById("stream-state");

    if (tbody.getAttribute("data-ended") === "1") return;
    var after = tbody.getAttribute("data-after") || "0";
    var source = new EventSource(tbody.getAttribute("data-stream") + "?after=" + encodeURIComponent(after));
    if (state) state.textContent = "(live)";

    function onEvent(msg) {
      var ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      if (tbody.querySelector('tr[data-seq="' + ev.seq + '"]')) return; // already shown
      var row = document.createElement("tr");
      row.setAttribute("data-seq", String(ev.seq));
      row.setAttribute("data-type", ev.type);
      row.className = "fresh";
      row.appendChild(text("td", String(ev.seq), "num"));
      row.appendChild(text("td", (ev.created_at || "").replace("T", " ").slice(0, 19)));
      row.appendChild(text("td", ev.type));
      var cell = document.createElement("td");
      cell.appendChild(payload(ev, blobs));
      row.appendChild(cell);
      tbody.appendChild(row);
      tbody.setAttribute("data-after", String(ev.seq));
      if (refreshParts) refreshParts();
      if (terminal.indexOf(ev.type) >= 0) {
        source.close(); // ended: do not let EventSource reconnect
        if (state) state.textContent = "(run ended)";
      }
    }
    types.forEach(function (t) { if (t) source.addEventListener(t, onEvent); });
    source.onmessage = onEvent;
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED && state) state.textContent = "(disconnected: reload)";
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    var rows = document.getElementById("run-rows");
    if (rows) liveRows(rows);
    var events = document.getElementById("events");
    var parts = document.getElementById("run-live");
    if (events) liveRun(events, parts ? liveParts(parts) : null);
  });
})();

// "/" anywhere but in a field puts the keyboard in the header's search box (as on most
// consoles); Tab reaches it too, right after the page links.
(function () {
  document.addEventListener("keydown", function (e) {
    if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    var box = document.getElementById("console-search");
    if (!box) return;
    e.preventDefault();
    box.focus();
    box.select();
  });
})();
