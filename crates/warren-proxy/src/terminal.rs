//! The web terminal: a page hosting xterm.js and the WebSocket ⇄ exec bridge behind it.
