#!/bin/sh
# Runs inside one container of scripts/container-test as its process 1's child (TIER is the
# only argument; the container's user, capabilities, seccomp profile and mounts are the tier's).
#
# In the container: /opt/sandbox-run/{sandbox-run,probe} (read-only), /work (read-write):
# hello (a copy of examples/hello-node owned by the container's user), hello-u (the same, owned
# by uid 1001: an unprivileged owner), out/ (where this writes). The host's /usr and /etc are
# bound read-only; /tmp, /run, /var and $HOME are tmpfs.
#
# Prints one line per check, as scripts/vm/smoke.sh does: `SMOKE check=NAME ok ...` or
# `SMOKE check=NAME FAIL: ...`, and the facts the host's table is made of:
#   FACT NAME VALUE        (exit codes, the refusal lines)
#   LAYER NAME kept|degraded ATTACK
# where ATTACK is `denied` (the attack failed inside while its positive control succeeded
# outside the sandbox in this same container), `open` (it succeeded: the layer is not there,
# as the report said), or `no-control` (the container itself forbids what the attack tries,
# so the attempt proves nothing about sandbox-run). A layer the report keeps whose attack
# succeeds is a failure. Exits 1 when a check failed.
# shellcheck disable=SC2016 # the `sh -c 'cd "$1" ...'` wrappers expand in the inner shell
set -u
TIER=${1:?tier}
BIN=/opt/sandbox-run/sandbox-run
PROBE=/opt/sandbox-run/probe
OUT=/work/out
failures=0
me=$(id -u)
fail() {
    echo "SMOKE check=$1 FAIL: $2"
    failures=$((failures + 1))
}
# The refusal or last line of a run's stderr, for the table.
last_line() { grep -v "^\s*$" "$1" | tail -n 1 | cut -c1-2000; }

echo "FACT tier $TIER"
echo "FACT uid $me"
echo "FACT caps $(grep CapEff /proc/self/status | awk '{print $2}')"
echo "FACT no_new_privs $(grep NoNewPrivs /proc/self/status | awk '{print $2}')"
echo "FACT seccomp $(grep '^Seccomp:' /proc/self/status | awk '{print $2}')"

# ---- doctor
"$BIN" doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.err"
echo "FACT doctor_exit $?"
for k in userns overlay landlock seccomp cgroup; do
    echo "FACT doctor_$k $(jq -r --arg k "$k" '.checks[] | select(.key == $k) | (if .ok then "ok" else "FAIL" end) + ": " + .found' "$OUT/doctor.json" | tr '\n' ' ' | cut -c1-200)"
done
for p in validate ci; do
    echo "FACT doctor_profile_$p $(jq -r --arg p "$p" '.profiles[] | select(.profile == $p) | if .full then "full" elif .runs then "degraded: " + (.degraded | join(",")) else "cannot run: " + (.missing_required | join(",")) end' "$OUT/doctor.json")"
done

# ---- the README's example: validate (every layer required), then the shipped best-effort
# profile (ci: namespaces required, cgroup and landlock best-effort), then ci with
# namespaces best-effort too (what docs/containers.md gives for containers without user
# namespaces).
cat >/work/out/ci-no-userns.toml <<'EOF'
extends = "ci"
[layers]
namespaces = "best-effort"
filesystem = "best-effort"
EOF
# The fix validate's cgroup refusal gives (its three lines), for the README's example again.
cat >/work/out/validate-no-cgroup.toml <<'EOF'
extends = "validate"
[layers]
cgroup = "best-effort"
EOF
example() { # NAME PROFILE REPO [FLAG...]
    name=$1 prof=$2 repo=$3
    shift 3
    (cd "$repo" && "$BIN" --profile "$prof" "$@" --repo "$repo" --report "$OUT/$name.json" -- npm test) \
        >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null
    code=$?
    echo "FACT exit_$name $code"
    if [ "$code" = 0 ]; then
        if grep -q '^# pass [1-9]' "$OUT/$name.out" && grep -q '^# fail 0' "$OUT/$name.out"; then
            echo "SMOKE check=$name ok (npm test passed)"
        else
            fail "$name" "exit 0 but no test passed: $(tail -c 300 "$OUT/$name.out")"
        fi
        echo "FACT degraded_$name $(jq -r '.sandbox.degraded | join(",")' "$OUT/$name.json")"
    elif [ "$code" = 125 ]; then
        line=$(last_line "$OUT/$name.err")
        echo "FACT refusal_$name $line"
        # A refusal is one line that says what is missing, and at most one more that says what
        # to change (after the warnings that name each best-effort layer it went without).
        rest=$(grep -v '^sandbox-run: degraded: ' "$OUT/$name.err" | grep .)
        n=$(printf '%s\n' "$rest" | grep -c .)
        if [ "$n" = 1 ] || { [ "$n" = 2 ] && printf '%s\n' "$rest" | tail -n 1 | grep -q '^sandbox-run: to run: '; }; then
            echo "SMOKE check=$name ok (refused in $n line(s))"
        else
            fail "$name" "the refusal is not one line (and one of what to do): $(tr '\n' '|' <"$OUT/$name.err" | cut -c1-400)"
        fi
    else
        fail "$name" "exit $code: $(tail -c 400 "$OUT/$name.err")"
    fi
}
example validate validate /work/hello
example validate-no-cgroup "$OUT/validate-no-cgroup.toml" /work/hello
example ci ci /work/hello
example nons "$OUT/ci-no-userns.toml" /work/hello
# The same consent for one run, by flag (what the refusal names).
example without-ns ci /work/hello --without namespaces
if [ "$me" = 0 ]; then
    # Root's checkout refused without a user namespace: the same with an unprivileged owner.
    example nons-u "$OUT/ci-no-userns.toml" /work/hello-u
fi

# ---- attacks, under the best-effort profile plus the probe, on the repo that ran
repo=/work/hello
jq -e '.results[0].exit_code == 0' "$OUT/nons.json" >/dev/null 2>&1 || repo=/work/hello-u
if ! jq -e '.results[0].exit_code == 0' "$OUT/nons.json" >/dev/null 2>&1 &&
    ! jq -e '.results[0].exit_code == 0' "$OUT/nons-u.json" >/dev/null 2>&1; then
    echo "FACT attacks none: no profile ran here"
    exit "$((failures > 0))"
fi
cat >"$OUT/probe.toml" <<EOF
extends = "$OUT/ci-no-userns.toml"
[gate]
paths = ["$PROBE"]
[filesystem]
extra_ro = ["/opt/sandbox-run"]
[limits]
memory = "96M"
EOF
run_in() { "$BIN" --profile "$OUT/probe.toml" --repo "$repo" --report "$OUT/probe.json" -- "$PROBE" "$@" </dev/null 2>"$OUT/probe.err"; }
# The workload's uid: the repo's owner when the caller is root and no user namespace maps it.
wuid=$(stat -c %u "$repo")
as_w() {
    if [ "$me" = 0 ] && [ "$wuid" != 0 ]; then
        setpriv --reuid="$wuid" --regid="$wuid" --clear-groups -- "$@"
    else
        "$@"
    fi
}
run_in pid >/dev/null || fail probe-runs "$(cat "$OUT/probe.err")"
R=$OUT/probe.json
has() { jq -e "$1" "$R" >/dev/null 2>&1; }
state() { if has "$1"; then echo kept; else echo degraded; fi; }

# attack LAYER STATE CONTROL-ARGS -- ATTACK-ARGS: the control runs outside the sandbox as the
# workload's uid (as the caller when ctl_as=caller); the attack inside.
ctl_as=workload
attack() {
    layer=$1 st=$2
    shift 2
    ctl=""
    while [ "$1" != -- ]; do
        ctl="$ctl $1"
        shift
    done
    shift
    # shellcheck disable=SC2086 # ctl is a list of words
    if [ "$ctl_as" = caller ]; then
        c_out=$("$PROBE" $ctl 2>&1)
    else
        c_out=$(as_w "$PROBE" $ctl 2>&1)
    fi
    c=$?
    a_out=$(run_in "$@" 2>&1)
    a=$?
    if [ "$c" != 0 ]; then
        result=no-control
    elif [ "$a" = 0 ]; then
        result=open
    else
        result=denied
    fi
    echo "LAYER $layer $st $result"
    echo "  control: $c_out | inside: $a_out" | cut -c1-300
    if [ "$st" = kept ] && [ "$result" = open ]; then
        fail "attack-$layer" "the report keeps $layer but the attack got through: $a_out"
    else
        echo "SMOKE check=attack-$layer ok ($st, $result)"
    fi
}

# Things outside the sandbox to reach: a file, a process, a TCP listener.
echo "outside" >/work/secret.txt
chmod 644 /work/secret.txt
# (Each started as one simple command, so that $! is the process itself.)
if [ "$me" = 0 ] && [ "$wuid" != 0 ]; then
    setpriv --reuid="$wuid" --regid="$wuid" --clear-groups -- sleep 300 &
else
    sleep 300 &
fi
sleeper=$!
port=47123
python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16); time.sleep(300)' "$port" &
listener=$!
# A file in the repo that only another user may read: a caller with CAP_DAC_OVERRIDE (root
# with Docker's capabilities) reads it; without capabilities nobody but its owner can.
if [ "$me" = 0 ]; then
    echo "private" >"$repo/private.txt"
    chown 4321:4321 "$repo/private.txt"
    chmod 600 "$repo/private.txt"
fi
sleep 0.3

attack userns "$(state '.sandbox.namespaces | index("user")')" unshare-user -- unshare-user
attack mount "$(state '.sandbox.namespaces | index("mount")')" read /work/secret.txt -- read /work/secret.txt
attack pid "$(state '.sandbox.namespaces | index("pid")')" kill "$sleeper" 0 -- kill "$sleeper" 0
attack net "$(state '.sandbox.namespaces | index("net")')" tcp-connect "127.0.0.1:$port" -- tcp-connect "127.0.0.1:$port"
# landlock: without a mount namespace it alone keeps the file above out; with one, the mount
# namespace already does, and the report's status is the evidence (the end-to-end tests
# attack landlock under namespaces).
attack landlock "$(state '.sandbox.filesystem.landlock != "not_enforced"')" read /work/secret.txt -- read /work/secret.txt
# seccomp: ptrace is allowed by Docker's profile (kernel 4.8+) and refused by sandbox-run's.
attack seccomp "$(state '.sandbox.seccomp.mode == "allowlist"')" ptrace-traceme -- ptrace-traceme
# caps: the caller's capabilities do not reach the command: a file of another uid, mode 0600,
# is read by the caller (CAP_DAC_OVERRIDE) and not inside. (A raw socket would be refused
# inside by the seccomp filter too, whatever the capabilities.)
ctl_as=caller
attack caps "$(state '.sandbox.capabilities == []')" read "$repo/private.txt" -- read "$repo/private.txt"
ctl_as=workload
inside_caps=$(run_in status 2>/dev/null | awk '/^CapEff/ {print $2}')
echo "FACT caps_inside $inside_caps"
[ "$inside_caps" = 0000000000000000 ] || fail caps-inside "CapEff inside is $inside_caps"
# cgroup: 200 MiB under a 96 MiB cap is an OOM kill (137); 16 MiB is fine.
cg=$(state '.sandbox.cgroup != null')
if [ "$cg" = kept ]; then
    run_in alloc 16 >/dev/null && c=0 || c=$?
    run_in alloc 200 >/dev/null && a=0 || a=$?
    if [ "$c" = 0 ] && [ "$a" = 137 ]; then
        echo "LAYER cgroup kept denied"
    else
        echo "LAYER cgroup kept open"
        fail attack-cgroup "alloc 16 MiB: exit $c, alloc 200 MiB under 96M: exit $a (want 0 and 137)"
    fi
else
    echo "LAYER cgroup degraded open"
    echo "SMOKE check=attack-cgroup ok (degraded, reported)"
fi
echo "FACT degraded_probe $(jq -r '.sandbox.degraded | join(",")' "$R")"
kill "$sleeper" "$listener" 2>/dev/null
exit "$((failures > 0))"
