// Tenantry operator console: the live parts of server-rendered pages. No framework, no
// external fetches; everything it writes into the page goes through textContent.
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

  // Run page: follow the run's event log over SSE and keep the summary current.
  function liveRun(tbody) {
    var terminal = (tbody.getAttribute("data-terminal") || "").split(" ");
    var types = (tbody.getAttribute("data-types") || "").split(" ");
    var summaryUrl = tbody.getAttribute("data-summary");
    var state = document.getElementById("stream-state");
    var pendingSummary = null;

    function refreshSummary() {
      if (pendingSummary) return;
      pendingSummary = setTimeout(function () {
        pendingSummary = null;
        fetch(summaryUrl, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (s) {
            if (!s) return;
            var status = document.getElementById("run-status");
            status.textContent = s.status;
            status.className = "status s-" + s.status;
            document.getElementById("run-steps").textContent = s.steps;
            document.getElementById("run-input-tokens").textContent = s.input_tokens.toLocaleString("en-US");
            document.getElementById("run-output-tokens").textContent = s.output_tokens.toLocaleString("en-US");
            document.getElementById("run-cost").textContent = s.cost;
          })
          .catch(function () {});
      }, 150);
    }

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
      cell.appendChild(text("code", compact(ev.data)));
      row.appendChild(cell);
      tbody.appendChild(row);
      tbody.setAttribute("data-after", String(ev.seq));
      if (ev.type === "ApprovalDecided" && ev.data && ev.data.approval_id) {
        var card = document.querySelector('article.approval[data-approval="' + ev.data.approval_id + '"]');
        if (card) {
          card.classList.add("decided");
          var form = card.querySelector("form.decide");
          if (form) form.replaceWith(text("p", "Decided: " + ev.data.decision +
            (ev.data.decided_by ? " by " + ev.data.decided_by : ""), "muted"));
        }
      }
      if (ev.type === "ApprovalRequested") {
        var box = document.getElementById("run-approvals");
        var none = document.getElementById("no-approvals");
        if (none) none.remove();
        var note = text("p", "Approval requested for tool " + ev.data.tool + " \u2014 reload to decide here, or use the inbox.", "notice");
        box.appendChild(note);
      }
      refreshSummary();
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
    if (events) liveRun(events);
  });
})();
