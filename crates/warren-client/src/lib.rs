//! warren-client: placeholder until its first module lands.
