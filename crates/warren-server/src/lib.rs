//! warren-server: placeholder until its first module lands.
