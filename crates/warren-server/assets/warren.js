// Warren's own script, loaded by every page after htmx (the CSP allows scripts from this
// origin only, none inline).
//
// Live views hold a server-sent-events connection. A page left for another must not keep
// it: Chromium keeps left pages in its back/forward cache with their event streams still
// open, and six connections to one host block every further request over HTTP/1.1. So
// every stream is made here (htmx's SSE extension asks `htmx.createEventSource`), closed
// when the page is hidden, and a page brought back from that cache reloads, to be current
// and live again.
(function () {
  var sources = [];
  if (window.htmx) {
    window.htmx.createEventSource = function (url) {
      var source = new EventSource(url, { withCredentials: true });
      sources.push(source);
      return source;
    };
  }
  window.addEventListener('pagehide', function () {
    sources.forEach(function (source) {
      source.close();
    });
    sources = [];
  });
  window.addEventListener('pageshow', function (event) {
    if (event.persisted) {
      window.location.reload();
    }
  });
})();
