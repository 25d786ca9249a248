#!/bin/sh
# /init of the Tenantry microVM guest (busybox sh). Mounts what the agent needs, loads the
# virtio drivers (modules in Debian's cloud kernel), then becomes the agent. When the agent
# exits, init exits: the kernel panics, `panic=-1` reboots at once and QEMU's `-no-reboot`
# turns that into QEMU exiting — a dead agent is a dead VM, never a half-alive one.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

disk_mib=256
tmp_mib=64
pids=128
debug=0
# busybox expands $(cat ...) into words; the kernel command line has no quoting we rely on.
for arg in $(cat /proc/cmdline 2>/dev/null); do
    case "$arg" in
        tenantry.disk_mib=*) disk_mib="${arg#*=}" ;;
        tenantry.tmp_mib=*) tmp_mib="${arg#*=}" ;;
        tenantry.pids=*) pids="${arg#*=}" ;;
        tenantry.debug=1) debug=1 ;;
    esac
done

if [ "$debug" = 1 ]; then
    set -x
else
    # Quiet unless debugging: the console is an emulated UART, slow under TCG.
    exec >/dev/null 2>&1
fi

fail() {
    echo "tenantry init: $*" >/dev/console
    exit 1  # init exiting panics the kernel, which ends QEMU (-no-reboot)
}

for module in virtio_ring virtio virtio_mmio virtio_console; do
    insmod "/lib/modules/$module.ko" || fail "insmod $module"
done

mount -t tmpfs -o "size=${disk_mib}m,mode=0755,uid=1000,gid=1000" work /work || fail "mount /work"
# The browser image's host asks for a bigger /tmp (tenantry.tmp_mib): Chromium's profile
# and cache live there, and it keeps its shared memory there too (--disable-dev-shm-usage).
mount -t tmpfs -o "size=${tmp_mib}m,mode=1777" tmp /tmp || fail "mount /tmp"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o size=16m,mode=1777 shm /dev/shm
ip link set lo up 2>/dev/null
hostname sandbox

# The port named by the host (`virtserialport,name=tenantry.agent`): its /dev/vportNpM
# number depends on probe order, its name does not. Probing is asynchronous: wait for it.
port=""
tries=0
while [ -z "$port" ]; do
    for entry in /sys/class/virtio-ports/*; do
        [ -r "$entry/name" ] || continue
        if [ "$(cat "$entry/name")" = tenantry.agent ]; then
            port="/dev/${entry##*/}"
        fi
    done
    if [ -z "$port" ]; then
        tries=$((tries + 1))
        [ "$tries" -gt 500 ] && fail "no virtio-serial port named tenantry.agent"
        sleep 0.01
    fi
done
while [ ! -c "$port" ]; do
    tries=$((tries + 1))
    [ "$tries" -gt 1000 ] && fail "$port never appeared"
    sleep 0.01
done

# The egress relay (127.0.0.1:3128, the code's HTTP(S)_PROXY), as root so the sandbox user
# cannot kill it. It opens the port named tenantry.egress at the first connection, not now:
# a clone restored from the template has a fresh host end behind it. The agent starts once
# the relay listens (its readiness line comes through a FIFO; EOF if it died): the host
# runs code as soon as the agent answers.
mkfifo /run/relay-ready || fail "mkfifo"
/usr/bin/python3 -I /relay.py --port-name tenantry.egress </dev/null >/run/relay-ready &
read -r _ </run/relay-ready
rm -f /run/relay-ready

exec /usr/bin/python3 -I /agent.py --channel "$port" --workdir /work --uid 1000 --nproc "$pids"
