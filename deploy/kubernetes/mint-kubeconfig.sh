#!/usr/bin/env bash
# Print a kubeconfig for the edge boxes' identity (deploy/kubernetes/rbac.yaml applied first).
#   mint-kubeconfig.sh                   the long-lived token of Secret lvs-director-token
#   mint-kubeconfig.sh --duration 720h   a time-bound token (kubectl create token): re-mint
#                                        and re-run the playbook before it expires
# The API server's address and CA come from your current kubectl context; set SERVER to
# override the address the edge boxes should use.
set -euo pipefail
NS=lvs-director
SA=lvs-director
duration=""
if [[ "${1:-}" == "--duration" ]]; then duration="${2:?--duration needs a value like 720h}"; fi

cluster=$(kubectl config view --minify -o jsonpath='{.contexts[0].context.cluster}')
server=${SERVER:-$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')}
ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [[ -z "$ca" ]]; then
  ca=$(kubectl -n "$NS" get secret lvs-director-token -o jsonpath='{.data.ca\.crt}')
fi
if [[ -n "$duration" ]]; then
  token=$(kubectl -n "$NS" create token "$SA" --duration "$duration")
else
  for _ in $(seq 30); do  # the token controller fills the Secret in a moment
    token=$(kubectl -n "$NS" get secret lvs-director-token -o jsonpath='{.data.token}' | base64 -d)
    [[ -n "$token" ]] && break
    sleep 1
  done
  [[ -n "$token" ]] || { echo "Secret $NS/lvs-director-token has no token yet" >&2; exit 1; }
fi

cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: ${cluster}
    cluster:
      server: ${server}
      certificate-authority-data: ${ca}
users:
  - name: ${SA}
    user:
      token: ${token}
contexts:
  - name: lvs-director
    context: {cluster: ${cluster}, user: ${SA}}
current-context: lvs-director
KUBECONFIG
