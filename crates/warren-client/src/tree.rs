//! The client's calls for the tree: GitOps repositories and sources, projects, spaces and
//! mounts.

use super::*;

impl Client {
    // ---- GitOps ----

    pub async fn list_repositories(&self) -> Result<Vec<Repository>> {
        self.get(&routes::gitops_repositories()).await
    }

    pub async fn create_repository(&self, req: &CreateRepositoryRequest) -> Result<Repository> {
        self.with_body(Method::POST, &routes::gitops_repositories(), req)
            .await
    }

    pub async fn get_repository(&self, name: &str) -> Result<Repository> {
        self.get(&routes::gitops_repository(name)).await
    }

    pub async fn delete_repository(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::gitops_repository(name))
            .await
    }

    /// `PUT` (Some) or `DELETE` (None) `/gitops/repositories/{name}/credential`.
    pub async fn set_repository_credential(
        &self,
        name: &str,
        c: Option<&GitCredential>,
    ) -> Result<Repository> {
        let route = routes::gitops_repository_credential(name);
        match c {
            Some(c) => self.with_body(Method::PUT, &route, c).await,
            None => self.call(Method::DELETE, &route, &[], None::<&()>).await,
        }
    }

    /// `PUT` (Some) or `DELETE` (None) `/gitops/repositories/{name}/webhook_secret`.
    pub async fn set_webhook_secret(&self, name: &str, secret: Option<&str>) -> Result<Repository> {
        let route = routes::gitops_webhook_secret(name);
        match secret {
            Some(s) => {
                let req = WebhookSecretRequest {
                    secret: s.to_owned(),
                };
                self.with_body(Method::PUT, &route, &req).await
            }
            None => self.call(Method::DELETE, &route, &[], None::<&()>).await,
        }
    }

    pub async fn agent_gitops(&self, agent: &str) -> Result<AgentGitops> {
        self.get(&routes::agent_gitops(agent)).await
    }

    pub async fn set_agent_gitops(&self, agent: &str, config: &AgentGitops) -> Result<AgentGitops> {
        self.with_body(Method::PUT, &routes::agent_gitops(agent), config)
            .await
    }

    pub async fn gitops_status(&self, agent: &str) -> Result<Vec<SourceStatus>> {
        self.get(&routes::agent_gitops_status(agent)).await
    }

    pub async fn gitops_policy(&self) -> Result<Policy> {
        self.get(&routes::gitops_policy()).await
    }

    pub async fn set_gitops_policy(&self, policy: &Policy) -> Result<Policy> {
        self.with_body(Method::PUT, &routes::gitops_policy(), policy)
            .await
    }

    // ---- projects ----

    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        self.get(&routes::projects()).await
    }

    pub async fn create_project(&self, req: &CreateProjectRequest) -> Result<Project> {
        self.with_body(Method::POST, &routes::projects(), req).await
    }

    pub async fn get_project(&self, name_or_id: &str) -> Result<Project> {
        self.get(&routes::project(name_or_id)).await
    }

    pub async fn update_project(&self, name: &str, req: &UpdateProjectRequest) -> Result<Project> {
        self.with_body(Method::PATCH, &routes::project(name), req)
            .await
    }

    /// `PUT /projects/{name}/credential`.
    pub async fn set_project_credential(&self, name: &str, c: &GitCredential) -> Result<Project> {
        self.with_body(Method::PUT, &routes::project_credential(name), c)
            .await
    }

    /// `DELETE /projects/{name}/credential`.
    pub async fn delete_project_credential(&self, name: &str) -> Result<Project> {
        self.call(
            Method::DELETE,
            &routes::project_credential(name),
            &[],
            None::<&()>,
        )
        .await
    }

    /// `GET /projects/{name}/prebuilds`: the newest first.
    pub async fn list_prebuilds(&self, name: &str) -> Result<Vec<Prebuild>> {
        self.get(&routes::project_prebuilds(name)).await
    }

    /// `POST /projects/{name}/prebuilds`: a prebuild of `git_ref`'s (the default ref's)
    /// newest commit now.
    pub async fn run_prebuild(&self, name: &str, git_ref: Option<&str>) -> Result<Prebuild> {
        let req = RunPrebuildRequest {
            git_ref: git_ref.map(str::to_owned),
        };
        let route = routes::project_prebuilds(name);
        self.with_body(Method::POST, &route, &req).await
    }

    /// `PUT` or `DELETE /projects/{name}/prebuilds/settings`: prebuilds on (on `agent`) or off.
    pub async fn set_prebuilds(
        &self,
        name: &str,
        on: Option<SetPrebuildsRequest>,
    ) -> Result<Project> {
        let route = routes::project_prebuild_settings(name);
        match on {
            Some(req) => self.with_body(Method::PUT, &route, &req).await,
            None => self.call(Method::DELETE, &route, &[], None::<&()>).await,
        }
    }

    /// `PUT` or `DELETE /projects/{name}/prebuilds/webhook`: the secret the project's push
    /// webhook is checked with, set or removed.
    pub async fn set_prebuild_webhook_secret(
        &self,
        name: &str,
        secret: Option<&str>,
    ) -> Result<()> {
        let route = routes::project_prebuild_webhook(name);
        match secret {
            Some(secret) => {
                let req = warren_types::gitops::WebhookSecretRequest {
                    secret: secret.to_owned(),
                };
                let url = self.url(&route);
                self.send(Method::PUT, url, &[], Some(&req))
                    .await
                    .map(|_| ())
            }
            None => self.call_empty(Method::DELETE, &route).await,
        }
    }

    pub async fn list_project_members(&self, name: &str) -> Result<Vec<ProjectMember>> {
        self.get(&routes::project_members(name)).await
    }

    pub async fn set_project_member(
        &self,
        name: &str,
        user: &str,
        role: ProjectRole,
    ) -> Result<Vec<ProjectMember>> {
        self.call(
            Method::PUT,
            &routes::project_member(name, user),
            &[],
            Some(&SetProjectMemberRequest { role }),
        )
        .await
    }

    pub async fn remove_project_member(&self, name: &str, user: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::project_member(name, user))
            .await
    }

    pub async fn delete_project(&self, name_or_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &routes::project(name_or_id))
            .await
    }

    // ---- spaces ----

    /// The tree the caller sees, at or below `space` when given.
    pub async fn tree(&self, space: Option<&str>) -> Result<Tree> {
        let query: Vec<(&str, String)> =
            space.map(|s| ("space", s.to_owned())).into_iter().collect();
        self.call(Method::GET, &["tree".to_owned()], &query, None::<&()>)
            .await
    }

    pub async fn list_spaces(&self) -> Result<Vec<Space>> {
        self.get(&["spaces".to_owned()]).await
    }

    pub async fn create_space(&self, path: &str) -> Result<Space> {
        self.call(
            Method::POST,
            &["spaces".to_owned()],
            &[],
            Some(&CreateSpaceRequest {
                path: path.to_owned(),
            }),
        )
        .await
    }

    /// A space by path (its slashes travel encoded in one URL segment).
    pub async fn get_space(&self, path: &str) -> Result<Space> {
        self.call(
            Method::GET,
            &["spaces".to_owned(), path.to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn list_mounts(&self) -> Result<Vec<Mount>> {
        self.get(&["mounts".to_owned()]).await
    }

    pub async fn create_mount(&self, req: &CreateMountRequest) -> Result<Mount> {
        self.with_body(Method::POST, &["mounts".to_owned()], req)
            .await
    }

    pub async fn get_mount(&self, name: &str) -> Result<Mount> {
        self.call(
            Method::GET,
            &["mounts".to_owned(), name.to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn workspace_grants(&self, ws: &str) -> Result<Vec<WorkspaceGrant>> {
        let mut seg = routes::workspace(ws);
        seg.push("grants".to_owned());
        self.get(&seg).await
    }

    pub async fn grant_workspace(&self, ws: &str, user: &str) -> Result<Vec<WorkspaceGrant>> {
        let mut seg = routes::workspace(ws);
        seg.extend(["grants".to_owned(), user.to_owned()]);
        self.call(Method::PUT, &seg, &[], None::<&()>).await
    }

    pub async fn revoke_workspace_grant(&self, ws: &str, user: &str) -> Result<()> {
        let mut seg = routes::workspace(ws);
        seg.extend(["grants".to_owned(), user.to_owned()]);
        self.call_empty(Method::DELETE, &seg).await
    }

    pub async fn delete_mount(&self, name: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["mounts".to_owned(), name.to_owned()])
            .await
    }

    pub async fn delete_space(&self, path: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["spaces".to_owned(), path.to_owned()])
            .await
    }

    pub async fn space_members(&self, path: &str) -> Result<Vec<SpaceMember>> {
        self.call(
            Method::GET,
            &["spaces".to_owned(), path.to_owned(), "members".to_owned()],
            &[],
            None::<&()>,
        )
        .await
    }

    pub async fn set_space_member(
        &self,
        path: &str,
        user: &str,
        role: SpaceRole,
    ) -> Result<SpaceMember> {
        self.call(
            Method::PUT,
            &[
                "spaces".to_owned(),
                path.to_owned(),
                "members".to_owned(),
                user.to_owned(),
            ],
            &[],
            Some(&SetSpaceMemberRequest { role }),
        )
        .await
    }

    pub async fn remove_space_member(&self, path: &str, user: &str) -> Result<()> {
        self.call_empty(
            Method::DELETE,
            &[
                "spaces".to_owned(),
                path.to_owned(),
                "members".to_owned(),
                user.to_owned(),
            ],
        )
        .await
    }
}
