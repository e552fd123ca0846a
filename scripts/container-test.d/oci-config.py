#!/usr/bin/env python3
"""Turn `runc spec`'s config.json into the container a CI runner would get, for one tier.

Usage: oci-config.py TIER SPEC_IN SECCOMP_JSON OUT --rootfs DIR --work DIR --bin DIR
                     --cgroup PATH

TIER:
  docker-userns  Docker's defaults (root, its 14 capabilities, its seccomp profile) with the
                 profile's namespace calls opened and /proc left unmasked: what a Docker host
                 gives with `--security-opt seccomp=<that profile> --security-opt
                 systempaths=unconfined`.
  docker-userns-user
                 The same as uid 1001 (`--user 1001`, the Actions runner image's user): what
                 docs/containers.md recommends, since an unmasked /proc/sys is writable by a
                 root container.
  docker-userns-masked
                 The same with Docker's masked and read-only /proc paths (only the seccomp
                 option): the kernel then refuses a fresh /proc in a new user namespace.
  docker         Docker's defaults as `docker run` gives them: the seccomp profile as Docker
                 renders it for a container without CAP_SYS_ADMIN (no unshare, no mount, clone
                 without namespace flags only, clone3 ENOSYS).
  k8s-restricted The Pod Security Standard "restricted": runAsNonRoot (uid 1001, as the Actions
                 runner image), allowPrivilegeEscalation=false (no_new_privs), capabilities
                 drop ALL, seccompProfile RuntimeDefault (containerd's profile is a copy of
                 Docker's; rendered here for an empty capability set).

SECCOMP_JSON is a profile in Docker's own format (archMap, includes/excludes by capability and
architecture), the file `docker run --security-opt seccomp=FILE` takes: Docker's default for
the docker and k8s-restricted tiers, the one docs/containers.md makes from it with jq for the
docker-userns tiers. It is rendered as dockerd renders it (moby's profiles/seccomp
setupSeccomp), for this machine's architecture, into the OCI `linux.seccomp` runc loads.
"""

import argparse
import json
import os
import platform

# moby daemon/pkg/oci/caps/defaults.go
DOCKER_CAPS = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]

# moby daemon/pkg/oci/defaults.go (containerd's defaults list the same paths)
MASKED = [
    "/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
    "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
    "/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware",
]
READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]

SCMP_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def kernel_at_least(v):
    have = [int(x) for x in platform.release().split("-")[0].split(".")[:2]]
    want = [int(x) for x in v.split(".")[:2]]
    return have >= want


def render_seccomp(profile, caps):
    """moby's setupSeccomp: keep each rule whose includes/excludes match this container."""
    machine = platform.machine()
    arch, goarch = SCMP_ARCH[machine], GO_ARCH[machine]
    out = {
        "defaultAction": profile["defaultAction"],
        "defaultErrnoRet": profile.get("defaultErrnoRet"),
        "architectures": [],
        "syscalls": [],
    }
    for a in profile.get("archMap", []):
        if a["architecture"] == arch:
            out["architectures"] = [a["architecture"]] + a.get("subArchitectures", [])
    for rule in profile["syscalls"]:
        exc, inc = rule.get("excludes", {}), rule.get("includes", {})
        if goarch in exc.get("arches", []):
            continue
        if any(c in caps for c in exc.get("caps", [])):
            continue
        if "minKernel" in exc and kernel_at_least(exc["minKernel"]):
            continue
        if inc.get("arches") and goarch not in inc["arches"]:
            continue
        if any(c not in caps for c in inc.get("caps", [])):
            continue
        if "minKernel" in inc and not kernel_at_least(inc["minKernel"]):
            continue
        r = {k: v for k, v in rule.items() if k in ("names", "action", "args", "errnoRet")}
        out["syscalls"].append(r)
    if out["defaultErrnoRet"] is None:
        del out["defaultErrnoRet"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tier", choices=["docker-userns", "docker-userns-user", "docker-userns-masked", "docker", "k8s-restricted"])
    ap.add_argument("spec_in")
    ap.add_argument("seccomp")
    ap.add_argument("out")
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--cgroup", required=True)
    ap.add_argument("--nofile", type=int, default=20000)
    a = ap.parse_args()

    with open(a.spec_in) as f:
        spec = json.load(f)
    with open(a.seccomp) as f:
        docker_profile = json.load(f)

    restricted = a.tier == "k8s-restricted"
    # Docker passes its capabilities for any user; a non-root process loses them at exec.
    caps = [] if restricted else DOCKER_CAPS
    nonroot = restricted or a.tier == "docker-userns-user"
    uid = 1001 if nonroot else 0
    home = "/home/runner" if nonroot else "/root"

    p = spec["process"]
    p["terminal"] = False
    p["user"] = {"uid": uid, "gid": uid}
    p["args"] = ["/bin/sh", "/opt/sandbox-run/inside.sh", a.tier]
    p["cwd"] = "/work"
    p["env"] = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"HOME={home}",
        "LANG=C.UTF-8",
    ]
    p["capabilities"] = {k: list(caps) for k in ("bounding", "effective", "permitted")}
    # Docker leaves no_new_privs off unless --security-opt no-new-privileges; Kubernetes sets
    # it for allowPrivilegeEscalation: false.
    p["noNewPrivileges"] = restricted
    # The host's hard limit here is 20000 and root may not raise it (see PITFALLS).
    p["rlimits"] = [{"type": "RLIMIT_NOFILE", "hard": a.nofile, "soft": a.nofile}]
    p.pop("apparmorProfile", None)

    spec["root"] = {"path": a.rootfs, "readonly": True}
    spec["hostname"] = "runner"

    tmpfs = lambda dest, opts: {"destination": dest, "type": "tmpfs", "source": "tmpfs",
                                "options": ["nosuid", "nodev"] + opts}
    bind = lambda src, dest, mode: {"destination": dest, "type": "bind", "source": src,
                                    "options": ["rbind", mode, "nosuid", "nodev"]}
    # Docker's own mounts (moby DefaultLinuxSpec), then the runner's: the host's system
    # directories read-only, a writable home, /tmp and /var (with /var/lib and /var/tmp, as an
    # image has them), the work directory. (runc gives a tmpfs the mode of the directory it
    # covers: the rootfs has /tmp at 1777.)
    spec["mounts"] = [
        {"destination": "/proc", "type": "proc", "source": "proc",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["ro", "nosuid", "noexec", "nodev"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
        bind("/usr", "/usr", "ro"),
        bind("/etc", "/etc", "ro"),
        bind(a.bin, "/opt/sandbox-run", "ro"),
        bind(a.work, "/work", "rw"),
        tmpfs("/tmp", ["mode=1777", "size=1g"]),
        tmpfs("/run", ["mode=755", "size=64m"]),
        bind(a.work + "/../var", "/var", "rw"),
        tmpfs(home, [f"mode=700,uid={uid},gid={uid}", "size=512m"]),
    ]

    linux = spec["linux"]
    linux["namespaces"] = [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")]
    # systempaths=unconfined clears both lists.
    unmasked = a.tier in ("docker-userns", "docker-userns-user")
    linux["maskedPaths"] = [] if unmasked else MASKED
    linux["readonlyPaths"] = [] if unmasked else READONLY
    linux["cgroupsPath"] = a.cgroup
    linux.pop("uidMappings", None)
    linux.pop("gidMappings", None)
    linux["seccomp"] = render_seccomp(docker_profile, caps)

    with open(a.out, "w") as f:
        json.dump(spec, f, indent=1)


if __name__ == "__main__":
    main()
