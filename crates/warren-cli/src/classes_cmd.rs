//! `warren ws classes`: the machine classes an agent offers, for `ws create --class` and
//! `ws resize --class`.

use crate::commands::print;
use crate::output::Format;
use crate::CliError;
use comfy_table::{presets, Table};
use warren_client::Client;
use warren_types::machine::MachineClass;

/// One agent's classes, as printed (`-o json` too).
#[derive(Debug, serde::Serialize)]
pub struct AgentClasses {
    pub agent: String,
    /// The class a workspace gets when its creator names none.
    pub default: Option<String>,
    /// Whether a size in numbers (`--cpu`, `--memory`) is taken instead.
    pub custom_sizes: bool,
    pub classes: Vec<MachineClass>,
}

/// The classes of `agent`, or of every agent.
pub async fn run(c: &Client, out: Format, agent: Option<&str>) -> Result<(), CliError> {
    let agents = match agent {
        Some(a) => vec![c.get_agent(a).await?],
        None => c.list_agents().await?,
    };
    let list: Vec<AgentClasses> = agents
        .into_iter()
        .map(|a| AgentClasses {
            default: a.config.default_class().map(|c| c.name.clone()),
            custom_sizes: a.config.custom_sizes || a.config.machine_classes.is_empty(),
            classes: a.config.machine_classes,
            agent: a.name,
        })
        .collect();
    print(out, &list, |l| table(l));
    Ok(())
}

fn table(list: &[AgentClasses]) -> String {
    let mut text = String::new();
    for a in list {
        if a.classes.is_empty() {
            text.push_str(&format!(
                "Agent {} has no machine classes: give a size with --cpu and --memory.\n",
                a.agent
            ));
            continue;
        }
        let mut t = Table::new();
        t.load_preset(presets::NOTHING);
        t.set_header([
            "CLASS",
            "CPU",
            "MEMORY",
            "STORAGE",
            "DEVICES",
            "WEIGHT",
            "DESCRIPTION",
        ]);
        for c in &a.classes {
            let name = if a.default.as_deref() == Some(c.name.as_str()) {
                format!("{} (default)", c.name)
            } else {
                c.name.clone()
            };
            let devices: Vec<String> = c.devices.iter().map(|(n, k)| format!("{k}× {n}")).collect();
            let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            t.add_row(vec![
                name,
                or_dash(&c.cpu),
                or_dash(&c.memory),
                or_dash(&c.storage),
                if devices.is_empty() {
                    "-".into()
                } else {
                    devices.join(", ")
                },
                c.weight().to_string(),
                c.description.clone(),
            ]);
        }
        text.push_str(&format!("Agent {}:\n{t}\n", a.agent));
        if !a.custom_sizes {
            text.push_str("  (this agent takes a class only, not --cpu or --memory)\n");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_marks_the_default_and_says_when_numbers_are_refused() {
        let list = vec![
            AgentClasses {
                agent: "gpu-farm".into(),
                default: Some("small".into()),
                custom_sizes: false,
                classes: vec![
                    MachineClass {
                        name: "small".into(),
                        cpu: Some("2".into()),
                        memory: Some("4Gi".into()),
                        ..Default::default()
                    },
                    MachineClass {
                        name: "gpu".into(),
                        description: "one A10".into(),
                        devices: [("nvidia.com/gpu".to_owned(), 1)].into(),
                        weight: Some(8),
                        ..Default::default()
                    },
                ],
            },
            AgentClasses {
                agent: "local".into(),
                default: None,
                custom_sizes: true,
                classes: vec![],
            },
        ];
        let t = table(&list);
        assert!(t.contains("small (default)"), "{t}");
        assert!(t.contains("1× nvidia.com/gpu"), "{t}");
        assert!(t.contains("one A10"), "{t}");
        assert!(t.contains("takes a class only"), "{t}");
        assert!(t.contains("Agent local has no machine classes"), "{t}");
    }
}
