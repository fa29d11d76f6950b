#!/usr/bin/env bash
#! Installs and configures Podman for Warren's engine tests on Debian bookworm (run as root).
#
# Idempotent. Steps (each can be run alone by naming it):
#   install   apt-get install podman, runc, busybox-static, openssh-sftp-server, git and nftables
#   config    write /etc/containers/containers.conf (runc, cgroupfs, ulimits within the hard limits)
#             and give user `containers` the subordinate id ranges Podman allocates user
#             namespaces from (`--userns=auto`: GitOps pods run in one of their own)
#   service   start `podman system service` on /run/podman/podman.sock unless it answers
#   image     build localhost/warren-test:latest from a busybox-static rootfs with OpenSSH's
#             sftp-server and Debian's git with its HTTP transport (podman import)
#   image-debian  build localhost/warren-test-debian:latest, a glibc image the injected editor
#             runs in: `debootstrap --variant=minbase` of bookworm with git and ca-certificates
#             (the rootfs tarball cached in /var/cache/warren-images; about 75 s the first time)
#   verify    `podman run --rm localhost/warren-test:latest true`
#   stop      stop the service the `service` step started (not part of the default steps)
# Without arguments install, config, service, image and verify run, in that order. The engine
# tests need no service (the runtime starts its own); CI that must leave nothing running can
# run `setup-podman.sh install config image verify`.
#
# Why the workarounds: on these machines crun refuses hybrid cgroups and Podman's default ulimits
# cannot be raised (see /work/shared/notes/podman.md). Warren itself does not depend on them.
set -euo pipefail

IMAGE="${WARREN_TEST_IMAGE:-localhost/warren-test:latest}"
SOCKET_DIR=/run/podman
SOCKET="$SOCKET_DIR/podman.sock"

log() { printf 'setup-podman: %s\n' "$*" >&2; }

step_install() {
    if command -v podman >/dev/null && command -v runc >/dev/null && [ -x /bin/busybox ]; then
        log "podman, runc and busybox-static already installed"
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q podman runc busybox-static openssh-sftp-server git nftables
}

step_config() {
    local nofile nproc
    nofile="$(ulimit -Hn)"
    nproc="$(ulimit -Hu)"
    # Stay within the hard limits: raising a limit needs CAP_SYS_RESOURCE, which we lack here.
    [ "$nofile" = unlimited ] && nofile=1048576
    [ "$nproc" = unlimited ] && nproc=32768
    [ "$nofile" -gt 1048576 ] && nofile=1048576
    [ "$nproc" -gt 32768 ] && nproc=32768
    mkdir -p /etc/containers
    local want
    want="$(cat <<CONF
# Written by Warren's .ci/setup-podman.sh.
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)"
    # The range Podman's documentation suggests for rootful `--userns=auto`: above every id
    # a host user or a container's own mapping uses.
    local f
    for f in /etc/subuid /etc/subgid; do
        if ! grep -q '^containers:' "$f" 2>/dev/null; then
            echo "containers:2147483647:2147483648" >> "$f"
            log "added the containers range to $f"
        fi
    done
    if [ -f /etc/containers/containers.conf ] && [ "$(cat /etc/containers/containers.conf)" = "$want" ]; then
        log "/etc/containers/containers.conf already up to date"
        return
    fi
    printf '%s\n' "$want" > /etc/containers/containers.conf
    log "wrote /etc/containers/containers.conf (nofile=$nofile, nproc=$nproc)"
}

socket_answers() {
    [ -S "$SOCKET" ] || return 1
    if command -v curl >/dev/null; then
        curl -sf --max-time 2 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1
    else
        timeout 5 podman --remote --url "unix://$SOCKET" version >/dev/null 2>&1
    fi
}

step_service() {
    if socket_answers; then
        log "podman service already answers on $SOCKET"
        return
    fi
    mkdir -p "$SOCKET_DIR"
    rm -f "$SOCKET"
    nohup podman system service --time=0 "unix://$SOCKET" >/var/log/podman-service.log 2>&1 &
    local pid=$!
    echo "$pid" > "$SOCKET_DIR/service.pid"
    for _ in $(seq 1 100); do
        if socket_answers; then
            log "podman service answers on $SOCKET (pid $pid; stop it with: kill \$(cat $SOCKET_DIR/service.pid))"
            return
        fi
        sleep 0.1
    done
    log "podman service did not answer on $SOCKET within 10 s; see /var/log/podman-service.log"
    exit 1
}

# Builds a rootfs from busybox-static into $1: applets symlinked, /bin/sh, /tmp, and an
# /etc/passwd with root and the workspace user 5001 (group 0, as Warren runs containers).
build_rootfs() {
    local root="$1" busybox
    busybox="$(command -v busybox || true)"
    [ -x /bin/busybox ] && busybox=/bin/busybox
    if [ -z "$busybox" ]; then
        log "busybox not found: apt-get install busybox-static"
        exit 1
    fi
    mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin" "$root/etc" \
        "$root/tmp" "$root/home/user" "$root/projects" "$root/root" "$root/var/www"
    chmod 1777 "$root/tmp"
    cp "$busybox" "$root/bin/busybox"
    local applet
    for applet in $("$root/bin/busybox" --list); do
        [ "$applet" = busybox ] && continue
        ln -sf busybox "$root/bin/$applet"
    done
    ln -sf busybox "$root/bin/sh"
    cat > "$root/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/bin/sh
user:x:5001:0:workspace user:/home/user:/bin/sh
PASSWD
    cat > "$root/etc/group" <<GROUP
root:x:0:
GROUP
    # Something of the image's own in its home, as real images have (workspaces seed theirs from it).
    echo '# the image profile of warren-test' > "$root/home/user/.profile"
    chown -R 5001:0 "$root/home/user"
    chmod 0775 "$root/home/user" "$root/projects"
    # OpenSSH's sftp server (needs only libc), so SSH tests can run `sftp` into a workspace.
    local sftp=/usr/lib/openssh/sftp-server lib
    if [ ! -x "$sftp" ]; then
        log "$sftp not found: apt-get install openssh-sftp-server"
        exit 1
    fi
    copy_with_libs "$sftp" "$root"
    # Debian's git (not a second one under /usr/local) and its HTTP transport, so workspaces
    # can clone, fetch and push; templates are optional and left out.
    local git=/usr/bin/git
    if [ ! -x "$git" ] || [ ! -x /usr/lib/git-core/git-remote-http ]; then
        log "$git or git-remote-http not found: apt-get install git"
        exit 1
    fi
    copy_with_libs "$git" "$root"
    copy_with_libs /usr/lib/git-core/git-remote-http "$root"
    ln -sf git-remote-http "$root/usr/lib/git-core/git-remote-https"
    ln -sf ../../bin/git "$root/usr/lib/git-core/git"
    mkdir -p "$root/usr/share/git-core/templates"
}

# Copies a program and the shared libraries it loads into the rootfs at the same paths.
copy_with_libs() {
    local program="$1" root="$2" lib
    mkdir -p "$root$(dirname "$program")"
    cp -L "$program" "$root$program"
    for lib in $(ldd "$program" | grep -o '/[^ ]*'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

step_image() {
    if podman image exists "$IMAGE" &&
        podman run --rm "$IMAGE" sh -c 'test -x /usr/lib/openssh/sftp-server && test -f /home/user/.profile && git --version' >/dev/null 2>&1; then
        log "image $IMAGE already exists"
        return
    fi
    podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
    WORK_DIR="$(mktemp -d)"
    trap 'rm -rf "$WORK_DIR"' EXIT
    build_rootfs "$WORK_DIR/root"
    tar -C "$WORK_DIR/root" -cf "$WORK_DIR/rootfs.tar" .
    podman import --change 'CMD ["/bin/sh"]' "$WORK_DIR/rootfs.tar" "$IMAGE" >/dev/null
    rm -rf "$WORK_DIR"
    log "built $IMAGE"
}

DEBIAN_IMAGE="${WARREN_TEST_DEBIAN_IMAGE:-localhost/warren-test-debian:latest}"
DEBIAN_CACHE="${WARREN_IMAGE_CACHE:-/var/cache/warren-images}/debian-bookworm-minbase-git.tar"

step_image_debian() {
    if podman image exists "$DEBIAN_IMAGE" &&
        podman run --rm "$DEBIAN_IMAGE" sh -c 'test -e /lib64/ld-linux-x86-64.so.2 && git --version' >/dev/null 2>&1; then
        log "image $DEBIAN_IMAGE already exists"
        return
    fi
    if [ ! -s "$DEBIAN_CACHE" ]; then
        command -v debootstrap >/dev/null 2>&1 ||
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap
        local work
        work="$(mktemp -d)"
        log "debootstrap --variant=minbase bookworm (with git, ca-certificates)"
        debootstrap --variant=minbase --include=git,ca-certificates bookworm "$work/root" \
            http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 || {
            tail -20 "$work/debootstrap.log" >&2
            rm -rf "$work"
            exit 1
        }
        rm -rf "$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/locale" \
            "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin
        mkdir -p "$(dirname "$DEBIAN_CACHE")"
        tar -C "$work/root" -cf "$DEBIAN_CACHE.tmp" .
        mv "$DEBIAN_CACHE.tmp" "$DEBIAN_CACHE"
        rm -rf "$work"
    fi
    podman rmi -f "$DEBIAN_IMAGE" >/dev/null 2>&1 || true
    podman import --change 'CMD ["/bin/bash"]' "$DEBIAN_CACHE" "$DEBIAN_IMAGE" >/dev/null
    log "built $DEBIAN_IMAGE from $DEBIAN_CACHE"
}

step_stop() {
    local pidfile="$SOCKET_DIR/service.pid"
    if [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; then
        log "stopped the podman service (pid $(cat "$pidfile"))"
    else
        log "no podman service started by this script is running"
    fi
    rm -f "$pidfile"
}

step_verify() {
    podman run --rm "$IMAGE" true
    log "podman run --rm $IMAGE true: ok"
    podman run --rm --userns=auto:size=65536 "$IMAGE" true
    log "podman run --rm --userns=auto:size=65536 $IMAGE true: ok"
}

main() {
    local steps=("$@")
    [ ${#steps[@]} -eq 0 ] && steps=(install config service image verify)
    local s
    for s in "${steps[@]}"; do
        case "$s" in
            install | config | service | stop)
                # System-wide changes; building and running the image works rootless too.
                if [ "$(id -u)" != 0 ]; then
                    log "step $s must run as root"
                    exit 1
                fi
                "step_$s"
                ;;
            image | image-debian | verify) "step_${s//-/_}" ;;
            *)
                log "unknown step $s (install, config, service, image, image-debian, verify, stop)"
                exit 2
                ;;
        esac
    done
}

main "$@"
