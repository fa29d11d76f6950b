// The web terminal page: xterm.js bridged to the proxy's WebSocket at /ws.
// Binary messages carry terminal bytes both ways; text messages are JSON:
// {"type":"resize","cols":C,"rows":R} from here, {"type":"exit","code":N} and
// {"type":"error","message":M} from the proxy. The body's data-state ("connecting",
// "connected", "reconnecting", "exited", "closed"), data-connections and data-exit-code let
// tests and users see how it went.
(function () {
  "use strict";
  const body = document.body;
  const term = new Terminal({
    cursorBlink: true,
    scrollback: 5000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  try { fit.fit(); } catch (e) { /* not laid out yet: the default size stands */ }

  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const encoder = new TextEncoder();
  // A connection lost while the shell ran (a proxy replica went away, the network dropped)
  // is made again, with a growing pause, up to MAX_RETRIES times in a row: the proxy's
  // other replicas take the same session cookie. The shell is a new one; what ran in the old
  // one ended with its connection. A first connection that fails is not retried.
  const MAX_RETRIES = 8;
  let ws = null;
  let ended = false;
  let opened = 0;
  let retries = 0;

  function connect() {
    ws = new WebSocket(
      scheme + "//" + location.host + "/ws?cols=" + term.cols + "&rows=" + term.rows);
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      if (opened > 0) {
        term.write("\r\n\x1b[2m[reconnected: a new shell]\x1b[0m\r\n");
      }
      opened += 1;
      retries = 0;
      body.dataset.connections = String(opened);
      body.dataset.state = "connected";
      term.focus();
    };
    ws.onmessage = function (ev) {
      if (typeof ev.data !== "string") {
        term.write(new Uint8Array(ev.data));
        return;
      }
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      if (msg.type === "exit") {
        ended = true;
        body.dataset.state = "exited";
        body.dataset.exitCode = msg.code === null ? "" : String(msg.code);
        const how = msg.code === null ? (msg.message || "unknown status") : "code " + msg.code;
        term.write("\r\n\x1b[2m[process exited: " + how + "]\x1b[0m\r\n");
      } else if (msg.type === "error") {
        ended = true;
        body.dataset.state = "closed";
        term.write("\r\n\x1b[31m" + msg.message + "\x1b[0m\r\n");
      }
    };
    ws.onclose = function () {
      if (ended) return;
      if (opened > 0 && retries < MAX_RETRIES) {
        if (retries === 0) {
          term.write("\r\n\x1b[2m[connection lost: reconnecting…]\x1b[0m\r\n");
        }
        body.dataset.state = "reconnecting";
        const pause = Math.min(250 * Math.pow(2, retries), 8000);
        retries += 1;
        setTimeout(connect, pause);
        return;
      }
      body.dataset.state = "closed";
      term.write("\r\n\x1b[2m[connection closed]\x1b[0m\r\n");
    };
  }
  connect();

  function send(data) {
    if (ws.readyState === WebSocket.OPEN) ws.send(data);
  }
  term.onData(function (d) { send(encoder.encode(d)); });
  term.onBinary(function (d) {
    const bytes = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) bytes[i] = d.charCodeAt(i) & 0xff;
    send(bytes);
  });
  term.onResize(function (size) {
    send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows }));
  });
  window.addEventListener("resize", function () {
    try { fit.fit(); } catch (e) { /* hidden */ }
  });
  window.warrenTerminal = term;
})();
