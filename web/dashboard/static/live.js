/* Live events: ask for new events every few seconds and put them on top.
   The server renders the rows (escaped by its templates); this only moves
   them into the table. Polling pauses while the tab is hidden. */
(function () {
  "use strict";
  var table = document.getElementById("live-feed");
  var rows = document.getElementById("live-rows");
  var status = document.getElementById("live-status");
  if (!table || !rows || !window.fetch || !window.JSON) { return; }

  var url = table.getAttribute("data-poll");
  var after = table.getAttribute("data-after") || "0";
  var marker = table.getAttribute("data-im") || "";
  var workspace = table.getAttribute("data-workspace");
  var every = (parseInt(table.getAttribute("data-every"), 10) || 5) * 1000;
  var keep = 200;
  var seen = {};
  var timer = null;
  var stopped = false;

  Array.prototype.forEach.call(rows.querySelectorAll("tr[data-key]"), function (tr) {
    seen[tr.getAttribute("data-key")] = true;
  });

  function say(text, state) {
    var label = status && status.querySelector(".live-status-text");
    if (label) { label.textContent = text; }
    if (status) { status.setAttribute("data-state", state || "ok"); }
  }

  function stop(text) {
    stopped = true;
    say(text, "stopped");
  }

  function insert(html) {
    var holder = document.createElement("tbody");
    holder.innerHTML = html;
    var fresh = Array.prototype.filter.call(holder.querySelectorAll("tr[data-key]"),
      function (tr) { return !seen[tr.getAttribute("data-key")]; });
    if (!fresh.length) { return 0; }
    var empty = rows.querySelector(".live-empty");
    if (empty) { empty.parentNode.removeChild(empty); }
    for (var i = fresh.length - 1; i >= 0; i--) {  // oldest first, so the newest ends on top
      seen[fresh[i].getAttribute("data-key")] = true;
      fresh[i].className = "is-new";
      rows.insertBefore(fresh[i], rows.firstChild);
    }
    var all = rows.querySelectorAll("tr[data-key]");
    for (var j = all.length - 1; j >= keep; j--) {
      delete seen[all[j].getAttribute("data-key")];
      rows.removeChild(all[j]);
    }
    return fresh.length;
  }

  function poll() {
    timer = null;
    if (stopped) { return; }
    if (document.hidden) { schedule(); return; }
    var query = "?after=" + encodeURIComponent(after) + "&im=" + encodeURIComponent(marker);
    fetch(url + query, {
      credentials: "same-origin", redirect: "manual", cache: "no-store",
      headers: { "Accept": "application/json" }
    }).then(function (resp) {
      if (resp.type === "opaqueredirect" || resp.status === 401 || resp.status === 403) {
        stop("Signed out: reload the page to sign in again");
        return null;
      }
      if (!resp.ok) { throw new Error("HTTP " + resp.status); }
      return resp.json();
    }).then(function (data) {
      if (!data) { return; }
      if (data.workspace !== workspace) {
        stop("The project or mode changed in another tab: reload to follow it");
        return;
      }
      var added = insert(data.html);
      after = String(data.after);
      marker = data.im;
      var now = new Date();
      say((added ? added + " new · " : "") + "updated " +
          now.toISOString().substring(11, 19) + " UTC", "ok");
    }).catch(function () {
      say("Connection lost; retrying", "error");
    }).then(schedule);
  }

  function schedule() {
    if (!stopped && timer === null) { timer = window.setTimeout(poll, every); }
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !stopped) {
      if (timer !== null) { window.clearTimeout(timer); timer = null; }
      poll();
    }
  });
  say("Live: updates every " + every / 1000 + " seconds", "ok");
  schedule();
})();
