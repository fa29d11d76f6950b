//! The workspace's variables and the project's git source as the data of its two Secrets:
//! `<name>-env` (environment) and `<name>-files` (mounted files).

use super::names::{is_env_name, is_secret_key};
use super::{RenderError, RenderRequest};
use k8s_openapi::ByteString;
use std::collections::BTreeMap;
use warren_types::api::VariableKind;

/// The data of the `-env` and `-files` Secrets: the user's variables (checked: valid and
/// not reserved names, each given once) and the project's git URL and ref.
pub(super) type SecretData = BTreeMap<String, ByteString>;

pub(super) fn secret_data(
    req: &RenderRequest<'_>,
) -> Result<(SecretData, SecretData), RenderError> {
    let mut env_data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut file_data: BTreeMap<String, ByteString> = BTreeMap::new();
    for v in req.variables {
        let bad = |reason: &str| RenderError::Variable {
            key: v.key.clone(),
            reason: reason.into(),
        };
        let target = match v.kind {
            VariableKind::Env => {
                if !is_env_name(&v.key) {
                    return Err(bad("not a valid environment variable name (letters, digits, '_', not starting with a digit)"));
                }
                if v.key.starts_with("WARREN_")
                    || v.key == "PROJECTS_ROOT"
                    || v.key == "PROJECT_SOURCE"
                {
                    return Err(bad("reserved for Warren"));
                }
                &mut env_data
            }
            VariableKind::File => {
                if !is_secret_key(&v.key) {
                    return Err(bad(
                        "not a valid file name (letters, digits, '-', '_', '.')",
                    ));
                }
                &mut file_data
            }
        };
        if target
            .insert(v.key.clone(), ByteString(v.value.clone().into_bytes()))
            .is_some()
        {
            return Err(bad("given more than once"));
        }
    }
    if let Some(p) = &req.project {
        env_data.insert(
            "WARREN_PROJECT_GIT_URL".into(),
            ByteString(p.git_url.as_bytes().to_vec()),
        );
        env_data.insert(
            "WARREN_PROJECT_GIT_REF".into(),
            ByteString(p.git_ref.as_bytes().to_vec()),
        );
    }
    Ok((env_data, file_data))
}
