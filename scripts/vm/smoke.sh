#!/bin/sh
# Smoke checks of one scripts/vm-test variant: the variant's key behaviour, asserted with the
# real sandbox-run binary and the probe through their exit codes and messages. Run inside the
# guest by guest.sh, once as root and once as the unprivileged user (in its delegated cgroup).
#
# Environment (set by guest.sh): SANDBOX_RUN_VM_VARIANT, SANDBOX_RUN_VM_RUN (root|user),
# SANDBOX_RUN_VM_SMOKE_BIN (sandbox-run), SANDBOX_RUN_VM_SMOKE_PROBE (the probe),
# SANDBOX_RUN_VM_REPO (the source tree: its examples/hello-node is the validate fixture).
#
# Prints one line per check: `SMOKE check=NAME ok DETAIL` or `SMOKE check=NAME FAIL: WHY`, and
# the evidence of a failure below it. Exits 1 when a check failed.
# shellcheck disable=SC2016 # the `sh -c 'cd "$1" ...'` wrappers expand in the inner shell
set -u
V=${SANDBOX_RUN_VM_VARIANT:?}
WHO=${SANDBOX_RUN_VM_RUN:?}
BIN=${SANDBOX_RUN_VM_SMOKE_BIN:?}
PROBE=${SANDBOX_RUN_VM_SMOKE_PROBE:-}
HELLO=${SANDBOX_RUN_VM_REPO:?}/examples/hello-node
failures=0

D=$(mktemp -d "${SANDBOX_RUN_TEST_TMP:-/tmp}/smoke.XXXXXX") || exit 1
chmod 755 "$D"
mkdir -p "$D/repo"
echo "inside" >"$D/repo/inside.txt"
# The fixture repo for validate runs: a copy of examples/hello-node owned by whoever runs the
# check (as root, sandbox-run runs the command as the repo's owner).
cp -r "$HELLO" "$D/hello"
cd "$D/repo" || exit 1

# A probe profile: validate plus the probe (by path) and its directory. LAYERS: extra [layers]
# lines. cgroup stays best-effort in these, like the end-to-end tests' profiles, so that the
# checks below test the variant's layer and not the cgroup work in progress; the validate
# profile itself is checked separately. PROFILE_CGROUP (when set): the cgroup layer's mode.
profile() {
    name=$1
    shift
    {
        echo 'extends = "validate"'
        echo '[gate]'
        echo "paths = [\"$PROBE\"]"
        echo '[filesystem]'
        echo "extra_ro = [\"$(dirname "$PROBE")\"]"
        echo '[layers]'
        echo "cgroup = \"${PROFILE_CGROUP:-best-effort}\""
        for l in "$@"; do echo "$l"; done
    } >"$D/$name.toml"
    echo "$D/$name.toml"
}

# check NAME WANT_CODE REGEX CMD...: CMD (stdin /dev/null) exits WANT_CODE and its stdout+stderr
# match the extended REGEX (case-insensitive; empty: anything).
check() {
    name=$1 want=$2 re=$3
    shift 3
    out=$D/$name.out
    "$@" </dev/null >"$out" 2>&1
    code=$?
    if [ "$code" = "$want" ] && { [ -z "$re" ] || grep -qiE -- "$re" "$out"; }; then
        echo "SMOKE check=$name ok (exit $code)"
    else
        if [ "$code" != "$want" ]; then
            why="exit $code, want $want"
        else
            why="output does not match /$re/"
        fi
        echo "SMOKE check=$name FAIL: $why: $(tr '\n' ' ' <"$out" | cut -c1-300)"
        echo "  command: $*"
        sed 's/^/  | /' "$out" | head -n 20
        failures=$((failures + 1))
    fi
}

# report_has NAME FILE JQ-EXPR: the JSON report satisfies the jq expression.
report_has() {
    name=$1 file=$2 expr=$3
    if ! command -v jq >/dev/null; then
        echo "SMOKE check=$name ok (not checked: no jq on this machine)"
    elif [ -s "$file" ] && jq -e "$expr" "$file" >/dev/null 2>&1; then
        echo "SMOKE check=$name ok ($expr)"
    else
        echo "SMOKE check=$name FAIL: report does not satisfy $expr: $(head -c 400 "$file" 2>/dev/null)"
        failures=$((failures + 1))
    fi
}

run() { "$BIN" "$@"; }

# ---- every variant: the gate needs no kernel feature
check gate-allows 0 '^allowed' run check --profile validate -- node --version
check gate-denies 126 '^denied by rule node-eval' run check --profile validate -- node -e 1

# ---- doctor, in every variant: what it finds must be what the variant made of the kernel.
# doctor_has NAME JQ-EXPR: `doctor --json` satisfies the jq expression.
"$BIN" doctor --json >"$D/doctor.json" 2>"$D/doctor.err"
doctor_rc=$?
doctor_has() { report_has "doctor-$1" "$D/doctor.json" "$2"; }
case $V in
default | x32) want_doctor=0 ;;
# systemd: the user has a manager to ask for a delegated scope, so every layer
systemd) want_doctor=0 ;;
*) want_doctor=1 ;;
esac
if [ "$doctor_rc" = "$want_doctor" ]; then
    echo "SMOKE check=doctor-exit ok (exit $doctor_rc)"
else
    echo "SMOKE check=doctor-exit FAIL: exit $doctor_rc, want $want_doctor: $(head -c 300 "$D/doctor.err")"
    failures=$((failures + 1))
fi
case $V in
default | systemd)
    doctor_has landlock-abi-2 '.checks[] | select(.key == "landlock") | .ok and (.found | test("^ABI 2 \\(no truncate, no tcp"))'
    [ "$V" = default ] && doctor_has all-profiles-full '[.profiles[] | .full] | all'
    [ "$V" = systemd ] && doctor_has validate-runs '.profiles[] | select(.profile == "validate") | .runs and (.missing_required == [])'
    ;;
x32)
    doctor_has x32-on '.checks[] | select(.key == "x32") | .found | startswith("enabled")'
    ;;
nouserns)
    doctor_has userns-fails-with-fix '.checks[] | select(.key == "userns") | (.ok | not) and (.fix | test("max_user_namespaces"))'
    doctor_has validate-cannot-run '.profiles[] | select(.profile == "validate") | (.runs | not)'
    ;;
nolandlock)
    doctor_has landlock-fails '.checks[] | select(.key == "landlock") | (.ok | not) and (.found == "not available")'
    doctor_has validate-cannot-run '.profiles[] | select(.profile == "validate") | (.runs | not) and (.missing_required | index("landlock") != null)'
    doctor_has ci-runs-degraded '.profiles[] | select(.profile == "ci") | .runs and (.degraded | index("landlock") != null)'
    ;;
esac

if [ -z "$PROBE" ] || [ ! -x "$PROBE" ]; then
    echo "SMOKE check=probe FAIL: the probe was not built"
    exit 1
fi
P=$(profile probe)

case $V in
default)
    # The whole stack on pure cgroup v2 with landlock ABI 2.
    check probe-runs 0 '^pid: ok' run --profile "$P" --repo "$D/repo" -- "$PROBE" pid
    check probe-report 0 '^pid: ok' run --profile "$P" --repo "$D/repo" --report "$D/r.json" -- "$PROBE" pid
    report_has report-landlock-abi-2 "$D/r.json" '.env_fingerprint.landlock_abi == 2'
    report_has report-cgroup-v2 "$D/r.json" '.env_fingerprint.cgroup == "v2"'
    check x32-off-unconfined 1 '^x32-getpid: denied errno=38' "$PROBE" x32-getpid
    # validate requires every layer, and this VM has every layer (cgroup delegated to users)
    check validate-runs 0 '^v[0-9]' sh -c 'cd "$1" && shift && exec "$@"' sh "$D/hello" \
        "$BIN" --profile validate --repo "$D/hello" -- node --version
    # The README's first command, from a checkout at an ordinary but long path (socket and
    # mount paths built from it must still fit): the bundled example's whole test suite.
    LONG="$D/a-checkout-at-an-ordinary-path-of-more-than-sixty-chars/examples"
    mkdir -p "$LONG" && cp -r "$HELLO" "$LONG/hello-node"
    check readme-example-long-path 0 '^# pass 5$' sh -c 'cd "$1" && shift && exec "$@"' sh "$LONG/.." \
        "$BIN" --profile validate --repo examples/hello-node -- npm test
    ;;
x32)
    # The kernel runs x32 system calls (else this variant proves nothing)...
    check x32-on-unconfined 0 '^x32-getpid: ok' "$PROBE" x32-getpid
    # ...and the sandbox's filter kills them.
    check x32-killed-in-sandbox 1 '^x32-getpid: killed signal=31' run --profile "$P" --repo "$D/repo" -- "$PROBE" x32-getpid
    check int80-killed-in-sandbox 1 '^int80-getpid: killed signal=31' run --profile "$P" --repo "$D/repo" -- "$PROBE" int80-getpid
    check probe-runs 0 '^pid: ok' run --profile "$P" --repo "$D/repo" -- "$PROBE" pid
    ;;
nouserns)
    # The sysctl is in force, for root too.
    check userns-off-unconfined 1 '^unshare-user: denied errno=28' "$PROBE" unshare-user
    # validate requires namespaces: refuse (125) with a line that names user namespaces
    check validate-refuses 125 'user namespace' sh -c 'cd "$1" && shift && exec "$@"' sh "$D/hello" \
        "$BIN" --profile validate --repo "$D/hello" -- node --version
    check probe-profile-refuses 125 'user namespace' run --profile "$P" --repo "$D/repo" -- "$PROBE" pid
    # namespaces (and so the new root) best-effort: runs in the host's namespaces under landlock
    # + seccomp + rlimits + the cgroup, and reports the degradation
    PB=$(profile best-effort 'namespaces = "best-effort"' 'filesystem = "best-effort"')
    if [ "$WHO" = root ]; then
        # ...but never as the host's root: a root-owned repo is refused...
        check best-effort-refuses-root 125 'root on the host' run --profile "$PB" --repo "$D/repo" -- "$PROBE" pid
        # ...and a repo of an unprivileged user runs as that user
        cp -r "$D/repo" "$D/urepo" && chown -R "${SANDBOX_RUN_VM_USER:?}" "$D/urepo"
        check best-effort-runs-as-owner 0 "^whoami: ok uid=${SANDBOX_RUN_VM_USER%%:*} " \
            run --profile "$PB" --repo "$D/urepo" --report "$D/be.json" -- "$PROBE" whoami
    else
        check best-effort-runs 0 '^pid: ok' run --profile "$PB" --repo "$D/repo" --report "$D/be.json" -- "$PROBE" pid
    fi
    report_has best-effort-reports-degraded "$D/be.json" '.sandbox.degraded | index("namespaces") != null'
    report_has best-effort-reports-no-namespaces "$D/be.json" '.sandbox.namespaces == []'
    report_has best-effort-landlock-enforced "$D/be.json" '.sandbox.filesystem.landlock != "not_enforced"'
    ;;
nolandlock)
    if grep -q landlock /sys/kernel/security/lsm 2>/dev/null; then
        echo "SMOKE check=lsm FAIL: landlock is active: $(cat /sys/kernel/security/lsm)"
        failures=$((failures + 1))
    else
        echo "SMOKE check=lsm ok ($(cat /sys/kernel/security/lsm 2>/dev/null))"
    fi
    check validate-refuses 125 'landlock' sh -c 'cd "$1" && shift && exec "$@"' sh "$D/hello" \
        "$BIN" --profile validate --repo "$D/hello" -- node --version
    check probe-profile-refuses 125 'landlock' run --profile "$P" --repo "$D/repo" -- "$PROBE" pid
    PB=$(profile best-effort 'landlock = "best-effort"')
    check best-effort-runs 0 '^pid: ok' run --profile "$PB" --repo "$D/repo" --report "$D/be.json" -- "$PROBE" pid
    report_has best-effort-reports-degraded "$D/be.json" '.sandbox.degraded | index("landlock") != null'
    ;;
systemd)
    # As the user, from a system service's cgroup (not delegated: root owns it), with the user
    # manager running and XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS set as a login sets
    # them. The bed first: the context is what it should be.
    own=$(cut -d: -f3 /proc/self/cgroup)
    if [ "$WHO" != root ] && [ ! -w "/sys/fs/cgroup$own/cgroup.procs" ] &&
        case $own in /system.slice/*.service) true ;; *) false ;; esac; then
        echo "SMOKE check=bed-not-delegated ok (in $own, not writable by uid $(id -u))"
    else
        echo "SMOKE check=bed-not-delegated FAIL: in $own as uid $(id -u) (writable: $([ -w "/sys/fs/cgroup$own/cgroup.procs" ] && echo yes || echo no))"
        failures=$((failures + 1))
    fi
    # (degraded: some user unit failed; the manager runs all the same)
    check bed-user-manager 0 '^(running|degraded)' sh -c 'systemctl --user is-system-running; true'
    check bed-user-bus 0 '' test -S "${DBUS_SESSION_BUS_ADDRESS#unix:path=}"

    # caps WRAP...: the cgroup caps for the user without a delegated scope of its own. validate
    # (every layer required) runs and its report shows the caps in force; a memory hog is
    # OOM-killed under a 64M cap; a fork bomb stops at a pids cap of 32. Run once under the
    # wrapper the hint names (systemd-run --user --scope -p Delegate=yes: the control, which
    # proves the bed and the checks right) and once bare (the acceptance: sandbox-run asks the
    # user manager for the scope itself).
    PC=$(PROFILE_CGROUP=required profile caps)
    caps() {
        k=$1
        shift
        check "$k-validate-runs" 0 '^v[0-9]' sh -c 'cd "$1" && shift && exec "$@"' sh "$D/hello" \
            "$@" "$BIN" --profile validate --repo "$D/hello" --report "$D/$k.json" -- node --version
        report_has "$k-caps-in-force" "$D/$k.json" \
            '.sandbox.cgroup.version == 2 and .sandbox.cgroup.memory_max == 2147483648 and .sandbox.cgroup.cpu_max == "200000 100000" and .sandbox.cgroup.pids_max == 256 and (.sandbox.degraded | index("cgroup") == null)'
        check "$k-memory-hog-oom-killed" 137 'out of memory' "$@" "$BIN" --profile "$PC" \
            --repo "$D/repo" --memory 64M --report "$D/$k-oom.json" -- "$PROBE" alloc 256
        report_has "$k-oom-reported" "$D/$k-oom.json" \
            '.results[0].status == "oom" and (.results[0].limits_hit | index("memory") != null) and .sandbox.cgroup.memory_max == 67108864'
        check "$k-pids-cap-holds" 1 'fork-bomb:' "$@" "$BIN" --profile "$PC" \
            --repo "$D/repo" --pids 32 --report "$D/$k-pids.json" -- "$PROBE" fork-bomb 200
        report_has "$k-pids-reported" "$D/$k-pids.json" \
            '(.results[0].limits_hit | index("pids") != null) and .sandbox.cgroup.pids_max == 32'
    }
    caps control systemd-run --user --scope --quiet -p Delegate=yes
    caps caps
    # Nothing left behind: no sandbox-run unit in the user manager, no sandbox-run cgroup.
    units=$(systemctl --user list-units --all --plain --no-legend 'sandbox-run*' 2>&1)
    if [ -z "$units" ]; then
        echo "SMOKE check=no-units-left ok (systemctl --user list-units --all 'sandbox-run*': none)"
    else
        echo "SMOKE check=no-units-left FAIL: $(echo "$units" | tr '\n' ';' | cut -c1-300)"
        failures=$((failures + 1))
    fi
    dirs=$(find /sys/fs/cgroup -name 'sandbox-run*' -type d 2>/dev/null)
    if [ -z "$dirs" ]; then
        echo "SMOKE check=no-cgroups-left ok (no sandbox-run* under /sys/fs/cgroup)"
    else
        echo "SMOKE check=no-cgroups-left FAIL: $(echo "$dirs" | tr '\n' ' ' | cut -c1-300)"
        failures=$((failures + 1))
    fi
    ;;
*)
    echo "SMOKE check=variant FAIL: no smoke checks for variant $V"
    failures=$((failures + 1))
    ;;
esac

rm -rf "$D"
[ "$failures" = 0 ]
