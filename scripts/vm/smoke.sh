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
# profile itself is checked separately.
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
        echo 'cgroup = "best-effort"'
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
*) want_doctor=1 ;;
esac
if [ "$doctor_rc" = "$want_doctor" ]; then
    echo "SMOKE check=doctor-exit ok (exit $doctor_rc)"
else
    echo "SMOKE check=doctor-exit FAIL: exit $doctor_rc, want $want_doctor: $(head -c 300 "$D/doctor.err")"
    failures=$((failures + 1))
fi
case $V in
default)
    doctor_has landlock-abi-2 '.checks[] | select(.key == "landlock") | .ok and (.found | test("^ABI 2 \\(no truncate, no tcp"))'
    doctor_has all-profiles-full '[.profiles[] | .full] | all'
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
*)
    echo "SMOKE check=variant FAIL: no smoke checks for variant $V"
    failures=$((failures + 1))
    ;;
esac

rm -rf "$D"
[ "$failures" = 0 ]
