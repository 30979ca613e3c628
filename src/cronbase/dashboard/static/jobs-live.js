// The job lists refresh themselves every 5 seconds (htmx polling on #results, jobs.html). A
// refresh replaces the table, and with it the boxes the operator ticked and an open "select all
// matching" choice: while either is there, this skips the refresh (htmx polls again 5 s later).
// A file, not an inline handler or an hx-trigger filter: the CSP forbids inline script and
// htmx runs without eval.
"use strict";
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail && event.detail.elt;
  if (!elt || elt.id !== "results") {  // the refresh only: not a filter or an action
    return;
  }
  if (elt.querySelector("input[name=ids]:checked, details[open]")) {
    event.preventDefault();
  }
});
