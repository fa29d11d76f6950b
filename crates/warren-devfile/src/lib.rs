//! warren-devfile: placeholder until its first module lands.
