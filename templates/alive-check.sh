# keepalived's check that the director on its box is alive, run as
#   /bin/sh alive-check.sh HEARTBEAT SECONDS
# from the vrrp_script the director renders: exit 0 while the director's control loop has
# touched HEARTBEAT within the last SECONDS (it does after its steps, and once at start).
beat=$(stat -c %Y "$1" 2>/dev/null) || exit 1
[ $(( $(date +%s) - beat )) -lt "$2" ]
