//! warren-agent: placeholder until its first module lands.
