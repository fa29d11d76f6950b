//! The workspace's files on the agent's host: its private state directory, and the Secret
//! and ConfigMap files mounted into its containers (0600/0700, owned by the workspace user;
//! a pod from Git's as on Kubernetes: root's, 0644 or their `defaultMode`, in 0755
//! directories, so any user of the image, in any user namespace, reads them).

use super::plan::PodPlan;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

pub(super) fn create_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

pub(super) fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file(path, bytes, 0o600)
}

/// Writes `bytes` to `path`, created with `mode` (never wider for a moment) and set to it.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.sync_all()
}

/// A directory a pod's files are mounted from: private to the agent for a workspace's
/// (the pod's user owns it), readable by any user for a pod from Git's.
fn create_mounted_dir(path: &Path, plan: &PodPlan) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    create_private_dir(path)?;
    if plan.kubernetes {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Writes the Secret/ConfigMap files: 0700 directories and 0600 files owned by the pod's
/// user, so the non-root user can read them through the read-only bind mount. Files are
/// rewritten in place, so a single-file (subPath) bind keeps seeing the current contents.
pub(super) fn write_files(files_dir: &Path, plan: &PodPlan) -> std::io::Result<()> {
    create_private_dir(files_dir)?;
    let mut dirs = BTreeSet::new();
    for f in &plan.files {
        let path = files_dir.join(&f.path);
        let mut dir = path.parent().map(Path::to_path_buf);
        while let Some(d) = dir {
            if d == files_dir {
                break;
            }
            dirs.insert(d.clone());
            dir = d.parent().map(Path::to_path_buf);
        }
        if let Some(parent) = path.parent() {
            create_mounted_dir(parent, plan)?;
        }
        write_file(&path, &f.contents, f.mode.unwrap_or(0o600))?;
        chown_to(&path, plan)?;
    }
    // Volumes without data still get their (empty) directory to bind.
    for c in &plan.containers {
        for m in c
            .body
            .host_config
            .iter()
            .flat_map(|h| h.mounts.iter().flatten())
        {
            if m.typ == Some(bollard::models::MountType::BIND) {
                if let Some(src) = &m.source {
                    let p = PathBuf::from(src);
                    if p.starts_with(files_dir)
                        && !p.exists()
                        && !plan.files.iter().any(|f| files_dir.join(&f.path) == p)
                    {
                        create_mounted_dir(&p, plan)?;
                        dirs.insert(p);
                    }
                }
            }
        }
    }
    for d in dirs {
        if plan.kubernetes {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
        }
        chown_to(&d, plan)?;
    }
    // A key removed from a Secret or ConfigMap disappears from the mount, as on Kubernetes.
    let planned: BTreeSet<PathBuf> = plan.files.iter().map(|f| files_dir.join(&f.path)).collect();
    remove_unplanned(files_dir, &planned)
}

fn remove_unplanned(dir: &Path, planned: &BTreeSet<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            remove_unplanned(&path, planned)?;
        } else if !planned.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn chown_to(path: &Path, plan: &PodPlan) -> std::io::Result<()> {
    match std::os::unix::fs::chown(path, Some(plan.uid), Some(plan.gid)) {
        Ok(()) => Ok(()),
        // Not root (rootless engine): the files stay ours, which the engine maps to the
        // container's root; the workspace user may then not read them.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!(path = %path.display(), "cannot chown a workspace file (agent not running as root)");
            Ok(())
        }
        Err(e) => Err(e),
    }
}
