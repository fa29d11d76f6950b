//! `warren group` and `warren space group`: groups of users (kept by hand, or from the
//! identity provider's groups claim at each sign-in) and the roles they hold on spaces,
//! which hold for every member as if given to each.

use crate::commands::{client, done, print, show};
use crate::output::{self, Format};
use crate::{CliError, OutputArgs};
use clap::{Args, Subcommand};
use warren_types::api::{CreateGroupRequest, GroupSource, SpaceRole};

#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: GroupCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Make a group (admins).
    #[command(after_help = "Examples:\n  \
        warren group create platform-team --description \"The platform team\"\n  \
        warren group create /acme/platform --source oidc    # members from the provider's groups claim")]
    Create {
        /// Its name; for `--source oidc`, the value of the provider's groups claim.
        name: String,
        /// `local`: members added by admins; `oidc`: those whose sign-in's groups claim
        /// names it.
        #[arg(long, default_value = "local", value_parser = ["local", "oidc"])]
        source: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List the groups and how many members each has.
    #[command(visible_alias = "ls")]
    List,
    /// Show a group and its members (admins, and its members).
    Show { name: String },
    /// Remove a group and every role it held (admins).
    #[command(visible_alias = "remove")]
    Rm { name: String },
    /// Who is in a group.
    Member {
        #[command(subcommand)]
        cmd: GroupMemberCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupMemberCommand {
    /// Add a user to a local group (admins).
    #[command(after_help = "Example:\n  warren group member add platform-team alice")]
    Add { name: String, user: String },
    /// Take a user out of a group (admins). From an `oidc` group until their next sign-in:
    /// remove them at the provider to keep them out.
    #[command(visible_alias = "remove")]
    Rm { name: String, user: String },
}

/// `warren space group …`: the roles groups hold on a space.
#[derive(Debug, Subcommand)]
pub enum SpaceGroupCommand {
    /// The groups holding a role on a space directly.
    #[command(visible_alias = "ls")]
    List { path: String },
    /// Give a group a role on a space and everything below it (its owners, or an admin).
    #[command(
        after_help = "Example:\n  warren space group add acme/platform platform-team --role developer"
    )]
    Add {
        path: String,
        group: String,
        #[arg(long, default_value = "developer", value_parser = ["viewer", "developer", "owner"])]
        role: String,
    },
    /// Take a group's role on a space away.
    #[command(visible_alias = "remove")]
    Rm { path: String, group: String },
}

pub async fn group(out: Format, cmd: GroupCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        GroupCommand::Create {
            name,
            source,
            description,
        } => {
            let req = CreateGroupRequest {
                name,
                source: GroupSource::parse(&source).unwrap_or_default(),
                description,
            };
            let g = c.create_group(&req).await?;
            print(out, &g, |g| {
                format!("Group {:?} created ({}).", g.name, g.source.as_str())
            });
        }
        GroupCommand::List => print(out, &c.list_groups().await?, |g| output::groups(g)),
        GroupCommand::Show { name } => {
            show(out, "group", &name, c.get_group(&name).await, output::group)?
        }
        GroupCommand::Rm { name } => done(
            "group",
            &name,
            c.delete_group(&name).await,
            &format!("Group {name:?} removed, with every role it held."),
        )?,
        GroupCommand::Member {
            cmd: GroupMemberCommand::Add { name, user },
        } => {
            let m = c.add_group_member(&name, &user).await?;
            print(out, &m, |m| format!("{} is in group {name}.", m.username));
        }
        GroupCommand::Member {
            cmd: GroupMemberCommand::Rm { name, user },
        } => {
            c.remove_group_member(&name, &user).await?;
            eprintln!("{user:?} is no longer in group {name:?}.");
        }
    }
    Ok(())
}

pub async fn space_group(out: Format, cmd: SpaceGroupCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        SpaceGroupCommand::List { path } => {
            show(out, "space", &path, c.space_group_roles(&path).await, |r| {
                output::space_group_roles(r)
            })?
        }
        SpaceGroupCommand::Add { path, group, role } => {
            let role = SpaceRole::parse(&role).unwrap_or(SpaceRole::Developer);
            // Not `named`: a 404 may be the group's, and the server's message says whose.
            let r = c.set_space_group_role(&path, &group, role).await?;
            print(out, &r, |r| {
                format!(
                    "Group {} is {} of {path} and everything below it.",
                    r.group,
                    r.role.as_str()
                )
            });
        }
        SpaceGroupCommand::Rm { path, group } => {
            c.remove_space_group_role(&path, &group).await?;
            eprintln!("Group {group:?} no longer holds a role on space {path:?}.");
        }
    }
    Ok(())
}
