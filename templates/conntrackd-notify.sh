# keepalived's notify scripts for conntrackd in primary-backup, run as
#   /bin/sh conntrackd-notify.sh CONNTRACKD CONFIG primary|backup|fault
# from the vrrp_instance the director renders (conntrack-tools' primary-backup.sh, with the
# binary and the file as arguments). Each step is logged if it fails; none stops the next.
bin=$1 conf=$2 state=$3
step() {
    "$bin" -C "$conf" "$@" >/dev/null 2>&1 \
        || logger -t director-conntrackd "conntrackd $* failed on becoming $state"
}
case "$state" in
primary)
    step -c  # the peer's connections (external cache) into the kernel's table
    step -f  # both caches flushed
    step -R  # the internal cache read again from the kernel
    step -B  # and sent whole to the peer
    ;;
backup)
    step -t  # the kernel's entries left from being primary expire soon
    step -n  # ask the primary for its whole table
    ;;
fault)
    step -t
    ;;
*)
    echo "usage: conntrackd-notify.sh CONNTRACKD CONFIG primary|backup|fault" >&2
    exit 1
    ;;
esac
exit 0
