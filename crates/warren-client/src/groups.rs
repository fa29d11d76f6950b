//! The client's calls for groups and the roles they hold on spaces.

use super::*;
use warren_types::api::{
    CreateGroupRequest, Group, GroupDetail, GroupMember, SetSpaceMemberRequest, SpaceGroupRole,
    SpaceRole,
};

fn group(name: &str) -> Vec<String> {
    vec!["groups".to_owned(), name.to_owned()]
}

fn group_member(name: &str, user: &str) -> Vec<String> {
    let mut seg = group(name);
    seg.extend(["members".to_owned(), user.to_owned()]);
    seg
}

fn space_group(path: &str, name: &str) -> Vec<String> {
    vec![
        "spaces".to_owned(),
        path.to_owned(),
        "groups".to_owned(),
        name.to_owned(),
    ]
}

impl Client {
    pub async fn list_groups(&self) -> Result<Vec<Group>> {
        self.get(&["groups".to_owned()]).await
    }

    pub async fn create_group(&self, req: &CreateGroupRequest) -> Result<Group> {
        self.with_body(Method::POST, &["groups".to_owned()], req)
            .await
    }

    pub async fn get_group(&self, name: &str) -> Result<GroupDetail> {
        self.get(&group(name)).await
    }

    pub async fn delete_group(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &group(name)).await
    }

    pub async fn add_group_member(&self, name: &str, user: &str) -> Result<GroupMember> {
        self.call(Method::PUT, &group_member(name, user), &[], None::<&()>)
            .await
    }

    pub async fn remove_group_member(&self, name: &str, user: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &group_member(name, user))
            .await
    }

    pub async fn space_group_roles(&self, path: &str) -> Result<Vec<SpaceGroupRole>> {
        self.get(&["spaces".to_owned(), path.to_owned(), "groups".to_owned()])
            .await
    }

    pub async fn set_space_group_role(
        &self,
        path: &str,
        name: &str,
        role: SpaceRole,
    ) -> Result<SpaceGroupRole> {
        let body = SetSpaceMemberRequest { role };
        self.with_body(Method::PUT, &space_group(path, name), &body)
            .await
    }

    pub async fn remove_space_group_role(&self, path: &str, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &space_group(path, name))
            .await
    }
}
