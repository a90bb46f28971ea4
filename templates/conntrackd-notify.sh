# keepalived's notify scripts for conntrackd in primary-backup, run as
#   /bin/sh conntrackd-notify.sh CONNTRACKD CONFIG primary|backup|fault
# from the vrrp_instance the director renders (conntrack-tools' primary-backup.sh, with the
# binary and the file as arguments, for conntrackd with DisableExternalCache: the peer's
# entries are written to the kernel as they come, so there is nothing to commit and nothing
# to flush). Each step is logged if it fails; none stops the next.
bin=$1 conf=$2 state=$3
step() {
    "$bin" -C "$conf" "$@" >/dev/null 2>&1 \
        || logger -t director-conntrackd "conntrackd $* failed on becoming $state"
}
case "$state" in
primary)
    # The peer's connections are in the kernel already (DisableExternalCache): read the
    # whole table (the peer's with this box's own) into the cache and send it to the peer.
    step -f  # the cache emptied
    step -R  # read again from the kernel
    step -B  # and sent whole to the peer
    ;;
backup)
    step -n  # ask the primary for its whole table (into this box's kernel)
    ;;
fault)
    ;;  # the entries stay: they are the primary's, kept up to date by it
*)
    echo "usage: conntrackd-notify.sh CONNTRACKD CONFIG primary|backup|fault" >&2
    exit 1
    ;;
esac
exit 0
