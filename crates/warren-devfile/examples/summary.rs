//! Prints `summary` (or the errors) and the rendered YAML of a devfile: what `warren devfile
//! validate` / `render` show. Usage: `cargo run -p warren-devfile --example summary FILE`.

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: summary FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("reading {path}: {e}");
            std::process::exit(2);
        }
    };
    match warren_devfile::parse_devfile(&text) {
        Ok(d) => {
            print!("{}", warren_devfile::summary(&d));
            let config = warren_types::config::AgentConfig::default();
            match warren_devfile::render_preview(&d, "preview", &config) {
                Ok(r) => print!("---\n{}", warren_devfile::objects_to_yaml(&r.objects)),
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            }
        }
        Err(errors) => {
            eprintln!("{errors}");
            std::process::exit(1);
        }
    }
}
