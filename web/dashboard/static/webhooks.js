/* Webhooks pages, progressive enhancement only (every page works without it):
   - a Copy button next to a newly shown signing secret;
   - a delivery still Queued or Sending reloads its page a few times, so the
     endpoint's answer shows up by itself (the server stops asking after a
     bounded number of reloads by leaving out data-refresh-url). */
(function () {
  "use strict";

  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), function (button) {
    var input = document.getElementById(button.getAttribute("data-copy"));
    if (!input) { return; }
    var label = button.querySelector("span");
    button.hidden = false;
    button.addEventListener("click", function () {
      function done(ok) {
        if (label) { label.textContent = ok ? "Copied" : "Press Ctrl+C"; }
        window.setTimeout(function () { if (label) { label.textContent = "Copy"; } }, 2000);
      }
      input.focus();
      input.select();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(input.value).then(function () { done(true); },
                                                        function () { done(false); });
      } else {
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        done(ok);
      }
    });
  });

  var waiting = document.querySelector("[data-refresh-url]");
  if (waiting) {
    Array.prototype.forEach.call(waiting.querySelectorAll(".wh-js-only"), function (el) {
      el.hidden = false;
    });
    var every = parseInt(waiting.getAttribute("data-refresh-ms"), 10) || 1500;
    window.setTimeout(function () {
      window.location.replace(waiting.getAttribute("data-refresh-url"));
    }, every);
  }
})();
