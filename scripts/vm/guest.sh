#!/bin/sh
# The payload of a scripts/vm-test guest. Run by busybox init (pid 1, which reaps orphans) from
# the results share (/vmshare), on this machine's root filesystem (9p, read-only) under a tmpfs
# overlay; in the systemd variant by systemd (pid 1) as the system service vm-test.service
# (scripts/vm/systemd/), which powers the VM off when this script ends. Reads /vmshare/config.sh (written by the host), sets the guest up like a small
# systemd host would be, runs the end-to-end test executables as root and as an unprivileged
# user who owns a delegated cgroup subtree, runs scripts/vm/smoke.sh, and writes result lines
# to /vmshare/results (each line also goes to the console prefixed with `@@ `):
#
#   BOOT secs=N                      seconds from kernel start to the payload
#   FACT key=value...                what the guest kernel offers
#   RESULT run=R test=T rc=N passed=N failed=N ignored=N skipped=N secs=N
#   FAILED run=R test=T case=NAME    one per failing test (it failed again when run alone)
#   FLAKY run=R test=T case=NAME     one per test that failed, then passed when run alone
#   SKIPPED run=R test=T NAME: WHY   one per skipping test (not on the console)
#   LEFTOVER run=R test=T ...        processes left in the executable's cgroup after it ended
#   SMOKE run=R check=NAME ok|FAIL ...
#   DONE secs=N
# Full logs: /vmshare/logs/RUN-TEST.log. The host side (scripts/vm-test) reads all of it after
# the VM has powered off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umask 022
SHARE=/vmshare
RESULTS=$SHARE/results
: >"$RESULTS"

say() {
    echo "@@ $*"
    echo "$*" >>"$RESULTS"
}
fail_setup() {
    say "SETUP-FAILED $*"
    exit 1
}

# shellcheck source=/dev/null
. "$SHARE/config.sh" || fail_setup "cannot read $SHARE/config.sh"
# VARIANT REPO SANDBOX_BIN PROBE TESTS ROOT_TESTS REQUIRE RUNS SMOKE_RUNS TEST_TIMEOUT DEBUG_CMD

say "BOOT secs=$(cut -d' ' -f1 /proc/uptime)"

# systemd as pid 1 (the systemd variant): it mounted the kernel filesystems and owns the cgroup
# tree; the user gets a real user manager and each run a real system service (see below).
SYSTEMD=0
[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && SYSTEMD=1
[ "$VARIANT" != systemd ] || [ "$SYSTEMD" = 1 ] ||
    fail_setup "variant systemd, but pid 1 is $(cat /proc/1/comm 2>/dev/null) (the boot did not reach systemd)"

# ------------------------------------------------------------------------------------------
# The filesystems a systemd host would have

# (Under systemd only /tmp is missing: the others are mounted already.)
mounted() { mountpoint -q "$1" 2>/dev/null; }
mounted /tmp || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || fail_setup "mount /tmp"
mounted /run || mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || fail_setup "mount /run"
mkdir -p /dev/pts /dev/shm /run/user
mounted /dev/pts || mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts /dev/pts ||
    fail_setup "mount /dev/pts"
mounted /dev/shm || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || fail_setup "mount /dev/shm"
mounted /sys/fs/cgroup || mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup ||
    fail_setup "mount cgroup2"
mounted /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
# Test fixtures (SANDBOX_RUN_TEST_TMP) on a tmpfs of their own, outside /tmp and $HOME: those
# two are private tmpfs mounts inside every sandbox, so a fixture path under them would name a
# different, sandbox-private file inside.
FIXTURES=/srv/sandbox-run-test
mkdir -p "$FIXTURES" || fail_setup "mkdir $FIXTURES"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$FIXTURES" || fail_setup "mount $FIXTURES"
mkdir -p /run/lock
ln -sf /proc/self/mounts /run/mounts 2>/dev/null
ip link set lo up 2>/dev/null || busybox ip link set lo up
hostname "vm-$VARIANT"
# What systemd sets: unprivileged ping groups; nothing else the tests need.
sysctl -qw net.ipv4.ping_group_range="0 2147483647" 2>/dev/null

CG=/sys/fs/cgroup
if [ "$SYSTEMD" = 0 ]; then
    echo "+cpu +memory +pids" >"$CG/cgroup.subtree_control" ||
        fail_setup "enable cpu, memory, pids in the root cgroup (have: $(cat $CG/cgroup.controllers))"
fi

# ------------------------------------------------------------------------------------------
# The variant's kernel setting (the command-line ones were given at boot)

case $VARIANT in
nouserns)
    # Before every test run, root's included: max_user_namespaces=0 also stops root.
    sysctl -qw user.max_user_namespaces=0 || fail_setup "sysctl user.max_user_namespaces=0"
    ;;
esac

lsm=$(cat /sys/kernel/security/lsm 2>/dev/null)
x32=off
case " $(cat /proc/cmdline) " in *" syscall.x32=y "*) x32=on ;; esac
say "FACT kernel=$(uname -r) variant=$VARIANT cgroup2=$(cat $CG/cgroup.subtree_control | tr ' ' ',') lsm=${lsm:-?} x32=$x32 max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces) unprivileged_userns_clone=$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo n/a)"

# ------------------------------------------------------------------------------------------
# The unprivileged user and its delegated cgroup subtree (as systemd's Delegate=yes does it)

TUSER=sbxvm
TUID=2000
while grep -q "^[^:]*:[^:]*:$TUID:" /etc/passwd || grep -q "^[^:]*:[^:]*:$TUID:" /etc/group; do
    TUID=$((TUID + 1))
done
if grep -q "^$TUSER:" /etc/passwd; then
    TUID=$(grep "^$TUSER:" /etc/passwd | cut -d: -f3)
else
    echo "$TUSER:x:$TUID:$TUID:sandbox-run VM test user:/home/$TUSER:/bin/sh" >>/etc/passwd ||
        fail_setup "add $TUSER to /etc/passwd"
    echo "$TUSER:x:$TUID:" >>/etc/group || fail_setup "add $TUSER to /etc/group"
    # a shadow entry (no password, never expires): PAM's account check (pam_unix, when
    # systemd starts the user's manager) refuses a user it has none for
    echo "$TUSER:!:$(($(date +%s) / 86400))::::::" >>/etc/shadow || fail_setup "add $TUSER to /etc/shadow"
fi
TGID=$(grep "^$TUSER:" /etc/passwd | cut -d: -f4)
mkdir -p "/home/$TUSER"
chown "$TUID:$TGID" "/home/$TUSER"
chmod 0755 "/home/$TUSER"
if [ "$SYSTEMD" = 0 ]; then
    mkdir -p "/run/user/$TUID"
    chown "$TUID:$TGID" "/run/user/$TUID"
    chmod 0700 "/run/user/$TUID"
fi

# Each test executable (and each smoke run) gets a unit of its own, like a command started with
# `systemd-run --scope` would: root's in system.slice (a CI runner's service), the user's in
# user.slice/user-UID.slice as a scope DELEGATED to the user (Delegate=yes: the directory and
# its cgroup.procs, cgroup.subtree_control and cgroup.threads belong to the user, and the
# parents enable cpu, memory and pids for it). A fresh unit per command matters: a delegatee
# may enable controllers in its scope, after which no process can join the scope itself.
#
# Under systemd (the systemd variant) both are real: each run is a transient system service
# (`systemd-run --wait --pipe`: system.slice/vm-test-WHO-NAME.service, root's cgroup, NOT
# delegated, as a CI runner's job or a login shell outside a scope has it), and the user has a
# user manager (user@UID.service, started by `loginctl enable-linger`) with its user bus; the
# user's runs get XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS as a login sets them. Processes
# a run leaves in its service are killed by systemd when it ends; those it leaves in the user's
# manager (a scope that outlived its sandbox) are reported as LEFTOVER and killed.
if [ "$SYSTEMD" = 1 ]; then
    loginctl enable-linger "$TUSER" || fail_setup "loginctl enable-linger $TUSER"
    i=0
    until state=$(systemctl is-active "user@$TUID.service" 2>/dev/null) && [ "$state" = active ] &&
        [ -S "/run/user/$TUID/bus" ]; do
        i=$((i + 1))
        if [ "$i" -ge 240 ] || [ "$state" = failed ]; then
            systemctl --no-pager status "user@$TUID.service" 2>&1 | sed 's/^/@@   /'
            journalctl --no-pager -b -n 30 2>&1 | sed 's/^/@@   /'
            fail_setup "the user manager user@$TUID.service (or its bus /run/user/$TUID/bus) did not come up ($state after $i s)"
        fi
        sleep 1
    done
    say "FACT user=$TUSER uid=$TUID systemd=$(systemctl --version | head -n1 | cut -d' ' -f2) user_manager=user@$TUID.service since=$(cut -d' ' -f1 /proc/uptime)s user_bus=/run/user/$TUID/bus user_manager_controllers=$(tr ' ' ',' <"$CG/user.slice/user-$TUID.slice/user@$TUID.service/cgroup.controllers") payload_cgroup=$(cut -d: -f3 /proc/self/cgroup)"
    unit() { echo "vm-test-$1-$2.service"; }
    # unit_leftovers UNIT: pids in the user's manager but its own (init.scope) and its bus
    # (dbus.service); kills them with cgroup.kill.
    UM=$CG/user.slice/user-$TUID.slice/user@$TUID.service
    unit_leftovers() {
        find "$UM" -name cgroup.procs 2>/dev/null | while read -r f; do
            case $f in */init.scope/* | */dbus.service/*) continue ;; esac
            pids=$(tr '\n' ' ' <"$f")
            [ -z "${pids% }" ] && continue
            d=${f%/cgroup.procs}
            printf '%s: ' "${d#"$UM"/}"
            for p in $pids; do
                printf '%s[%s] ' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
            done
            echo 1 >"${f%/cgroup.procs}/cgroup.kill" 2>/dev/null
        done
    }
else
    mkdir -p "$CG/system.slice" "$CG/user.slice/user-$TUID.slice" || fail_setup "mkdir slices"
    for s in system.slice user.slice "user.slice/user-$TUID.slice"; do
        echo "+cpu +memory +pids" >"$CG/$s/cgroup.subtree_control" ||
            fail_setup "enable cpu, memory, pids in $s"
    done
    # unit WHO NAME: create the unit's cgroup, print its path
    unit() {
        if [ "$1" = root ]; then
            u=$CG/system.slice/vm-test-$2.service
            mkdir -p "$u" || return 1
        else
            u=$CG/user.slice/user-$TUID.slice/vm-test-$2.scope
            mkdir -p "$u" || return 1
            for f in "$u" "$u/cgroup.procs" "$u/cgroup.subtree_control" "$u/cgroup.threads"; do
                chown "$TUID:$TGID" "$f" || return 1
            done
        fi
        echo "$u"
    }
    # unit_leftovers UNIT: pids still anywhere below UNIT (a sandbox that outlived its run); kills
    # them with cgroup.kill so the next run starts clean.
    unit_leftovers() {
        pids=$(find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')
        [ -z "${pids% }" ] && return 0
        for p in $pids; do
            printf '%s[%s] ' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
        done
        echo 1 >"$1/cgroup.kill" 2>/dev/null
    }
    probe_unit=$(unit user setup-check) || fail_setup "create a delegated scope"
    say "FACT user=$TUSER uid=$TUID delegated=${probe_unit#"$CG"} controllers=$(tr ' ' ',' <"$probe_unit/cgroup.controllers") fixtures=$FIXTURES"
    rmdir "$probe_unit"
fi

# ------------------------------------------------------------------------------------------
# Running things as root or as the user, each in its own cgroup

# as WHO UNIT CMD...: run CMD with a clean environment, as root or as the user, inside the unit
# (a cgroup from `unit`): the shell moves itself there first, then drops to the user. Under
# systemd the unit is a transient system service started with the current directory.
as() {
    who=$1 cg=$2
    shift 2
    path=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin
    if [ "$who" = root ]; then
        home=/root user=root
        # root's toolchains on this machine, as its login PATH has them (real_programs runs
        # cargo and pytest under the ci profile when it finds them)
        for d in /root/.pyenv/shims /root/.cargo/bin; do
            [ -d "$d" ] && path=$d:$path
        done
    else
        home=/home/$TUSER user=$TUSER
    fi
    [ "$who" = root ] || set -- setpriv --reuid="$TUID" --regid="$TGID" --clear-groups "$@"
    # the user's bus, as a login under systemd sets it (none in the other variants)
    bus=""
    [ "$SYSTEMD" = 1 ] && [ "$who" != root ] && bus=DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$TUID/bus
    set -- env -i ${bus:+"$bus"} \
        PATH="$path" \
        HOME="$home" USER="$user" LOGNAME="$user" SHELL=/bin/sh LANG=C.UTF-8 TERM=dumb \
        XDG_RUNTIME_DIR="$([ "$who" = root ] && echo /run/user/0 || echo "/run/user/$TUID")" \
        SANDBOX_RUN_TEST_TMP="$FIXTURES/$who" SANDBOX_RUN_TEST_REQUIRE="$REQUIRE" \
        SANDBOX_RUN_TEST_SLOWDOWN=10 \
        SANDBOX_RUN_VM_VARIANT="$VARIANT" SANDBOX_RUN_VM_RUN="$who" \
        SANDBOX_RUN_VM_SMOKE_BIN="$SANDBOX_BIN" SANDBOX_RUN_VM_SMOKE_PROBE="$PROBE" \
        SANDBOX_RUN_VM_REPO="$REPO" SANDBOX_RUN_VM_USER="$TUID:$TGID" \
        CARGO_MANIFEST_DIR="$REPO" RUST_BACKTRACE=0 \
        "$@"
    if [ "$SYSTEMD" = 1 ]; then
        systemd-run --quiet --wait --pipe --collect --same-dir --service-type=exec \
            --unit="$cg" -- "$@"
    else
        # shellcheck disable=SC2016
        sh -c 'echo $$ >"$1/cgroup.procs" || exit 99; shift; exec "$@"' sh "$cg" "$@"
    fi
}
mkdir -p /run/user/0 && chmod 0700 /run/user/0
mkdir -p "$FIXTURES/root" "$FIXTURES/user"
chown "$TUID:$TGID" "$FIXTURES/user"
# Tests that keep scratch files in the target dir (env!("CARGO_TARGET_TMPDIR")) need it
# writable: the user owns it here, as a user who built the tests would (overlay copy only).
TARGET_TMPDIR=$(dirname "$SANDBOX_BIN")/../tmp
mkdir -p "$TARGET_TMPDIR" && chown "$TUID:$TGID" "$TARGET_TMPDIR"

# run_test WHO NAME EXE
run_test() {
    who=$1 name=$2 exe=$3
    log=$SHARE/logs/$who-$name.log
    if [ "$exe" = missing ] || [ ! -x "$exe" ]; then
        say "RESULT run=$who test=$name rc=missing passed=0 failed=0 ignored=0 skipped=0 secs=0"
        return
    fi
    echo "@@ ---- $who: $name ($exe)"
    t0=$(cut -d. -f1 /proc/uptime)
    rcf=/tmp/rc-$who-$name
    u=$(unit "$who" "$name") || fail_setup "cannot create the cgroup for $who $name"
    (
        cd "$REPO" || exit 98
        # --show-output: the SKIP lines of passing tests go to the log too
        as "$who" "$u" timeout -k 10 "$TEST_TIMEOUT" "$exe" --test-threads=2 --show-output
        echo $? >"$rcf"
    ) 2>&1 | tee "$log"
    left=$(unit_leftovers "$u")
    where=${u#"$CG"}
    [ "$SYSTEMD" = 1 ] && where=user@$TUID.service
    [ -z "$left" ] || say "LEFTOVER run=$who test=$name processes still in $where after the run (killed): $left"
    rc=$(cat "$rcf" 2>/dev/null || echo 97)
    t1=$(cut -d. -f1 /proc/uptime)
    summary=$(grep '^test result:' "$log" | tail -n1)
    num() { echo "$summary" | sed -n "s/.* \([0-9][0-9]*\) $1.*/\1/p"; }
    passed=$(num passed) failed=$(num failed) ignored=$(num ignored)
    skipped=$(grep -c '^SKIP ' "$log")
    # A case that failed is run once more, alone. Under TCG a run is 10-50 times slower than on
    # hardware and a time-bound test can miss by load alone: a case that then passes is
    # reported FLAKY (listed in the summary with its first failure), one that fails again
    # FAILED. An executable that was killed (timeout) is not retried.
    : >"/tmp/failed-$who-$name"
    sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log" >"/tmp/cases-$who-$name"
    if [ "$rc" = 101 ]; then
        while read -r c; do
            echo "@@ ---- $who: $name: once more, alone: $c"
            if (cd "$REPO" && as "$who" "$u" timeout -k 10 "$TEST_TIMEOUT" "$exe" --exact "$c" \
                --test-threads=1) >"$SHARE/logs/$who-$name-retry.log" 2>&1; then
                say "FLAKY run=$who test=$name case=$c"
            else
                echo "$c" >>"/tmp/failed-$who-$name"
            fi
        done <"/tmp/cases-$who-$name"
        flaky=$(($(wc -l <"/tmp/cases-$who-$name") - $(wc -l <"/tmp/failed-$who-$name")))
        passed=$((${passed:-0} + flaky)) failed=$(wc -l <"/tmp/failed-$who-$name")
        [ "$failed" != 0 ] || rc=0
    else
        cp "/tmp/cases-$who-$name" "/tmp/failed-$who-$name"
    fi
    say "RESULT run=$who test=$name rc=$rc passed=${passed:-0} failed=${failed:-0} ignored=${ignored:-0} skipped=$skipped secs=$((t1 - t0))"
    while read -r c; do
        say "FAILED run=$who test=$name case=$c"
    done <"/tmp/failed-$who-$name"
    grep '^SKIP ' "$log" | sort -u | while read -r l; do
        echo "SKIPPED run=$who test=$name ${l#SKIP }" >>"$RESULTS"
    done
}

if [ -n "${DEBUG_CMD:-}" ]; then
    echo "@@ ---- debug command: $DEBUG_CMD"
    (cd "$REPO" && sh -c "$DEBUG_CMD") 2>&1 | tee "$SHARE/logs/debug.log"
fi

start=$(cut -d. -f1 /proc/uptime)
for who in $RUNS; do
    for spec in $TESTS; do
        # ROOT_TESTS (when set): root runs only these of TESTS
        case $who:" ${ROOT_TESTS:-} " in
        root:"  ") ;;
        root:*" ${spec%%=*} "*) ;;
        root:*) continue ;;
        esac
        run_test "$who" "${spec%%=*}" "${spec#*=}"
    done
done
for who in $SMOKE_RUNS; do
    echo "@@ ---- $who: smoke checks for variant $VARIANT"
    u=$(unit "$who" smoke) || fail_setup "cannot create the cgroup for the $who smoke run"
    (cd / && as "$who" "$u" sh "$SHARE/smoke.sh") 2>&1 | tee "$SHARE/logs/$who-smoke.log" | grep -v '^SMOKE '
    sed -n 's/^SMOKE /SMOKE run='"$who"' /p' "$SHARE/logs/$who-smoke.log" | while read -r l; do
        say "$l"
    done
    grep -q '^SMOKE ' "$SHARE/logs/$who-smoke.log" ||
        say "SMOKE run=$who check=smoke.sh FAIL: printed no result (see logs/$who-smoke.log)"
done

# Leftovers after all runs: a sandbox that outlived its run would show up here.
# shellcheck disable=SC2009
left=$(ps -eo pid=,user=,args= 2>/dev/null | grep -E 'sandbox-run|/examples/probe' | grep -v grep)
[ -z "$left" ] || say "FACT leftover_processes=$(echo "$left" | tr -s ' \n' ' ;')"
dmesg >"$SHARE/dmesg.txt" 2>/dev/null
say "DONE secs=$(($(cut -d. -f1 /proc/uptime) - start))"
sync
